package com.anaconda.skein;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.impl.AMRMClientImpl;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * Does skein's ApplicationMaster keep a node whose NodeManager did not start a container
 * out of its allocations, and let it back in when the RM reports it RUNNING again?
 *
 * <p>The AM's own keepOut (called where a start fails) and letBackIn (with each allocate
 * response's updated nodes), on an ApplicationMaster whose ResourceManager client only
 * records what the AM asks of the RM's blacklist: the RM's side is Hadoop's. A second
 * failed start on the same node asks nothing more; a node the RM reports LOST stays out;
 * reported RUNNING it comes back; one never reported comes back after the node expiry
 * and a minute. Exit 0: so; 1: not (or a jar without keepOut: skein 0.8.2's).
 */
public final class KeepOutCheck {
  private KeepOutCheck() { }

  /** The RM client: records the blacklist's additions and removals. */
  static final class Recorder extends AMRMClientImpl<ContainerRequest> {
    final List<String> asked = new ArrayList<String>();

    @Override
    public synchronized void updateBlacklist(List<String> additions, List<String> removals) {
      for (String host : additions) {
        asked.add("+" + host);
      }
      for (String host : removals) {
        asked.add("-" + host);
      }
    }
  }

  public static void main(String[] args) throws Exception {
    ApplicationMaster am = new ApplicationMaster();
    Recorder rm = new Recorder();
    set(am, "rmClient", rm);
    Configuration conf = new YarnConfiguration();
    conf.setLong(YarnConfiguration.RM_NM_EXPIRY_INTERVAL_MS, -60000);  // expire at once
    Method keepOut, letBackIn;
    try {
      keepOut = ApplicationMaster.class.getDeclaredMethod("keepOut", String.class);
      letBackIn = ApplicationMaster.class.getDeclaredMethod("letBackIn", List.class);
    } catch (NoSuchMethodException exc) {
      System.out.println("NO KEEP-OUT: this jar's AM never keeps a node out");
      System.exit(1);
      return;
    }
    keepOut.setAccessible(true);
    letBackIn.setAccessible(true);
    set(am, "conf", new YarnConfiguration());
    keepOut.invoke(am, "dead.example");
    keepOut.invoke(am, "dead.example");  // its next container's start failed too
    keepOut.invoke(am, "other.example");
    letBackIn.invoke(am, Collections.singletonList(report("dead.example", NodeState.LOST)));
    letBackIn.invoke(am, Collections.singletonList(report("dead.example", NodeState.RUNNING)));
    set(am, "conf", conf);
    letBackIn.invoke(am, Collections.<NodeReport>emptyList());
    String got = String.join(" ", rm.asked);
    String want = "+dead.example +other.example -dead.example -other.example";
    if (!got.equals(want)) {
      System.out.println("WRONG: asked the RM's blacklist " + got + "; wanted " + want);
      System.exit(1);
    }
    System.out.println("ok: " + got);
  }

  private static NodeReport report(String host, NodeState state) {
    Resource none = Resource.newInstance(0, 0);
    return NodeReport.newInstance(NodeId.newInstance(host, 8041), state, host + ":8042",
        "/default-rack", none, none, 0, "", 0L);
  }

  private static void set(Object target, String name, Object value) throws Exception {
    Field field = ApplicationMaster.class.getDeclaredField(name);
    field.setAccessible(true);
    field.set(target, value);
  }
}
