// What a Hadoop 3.3.6 NodeManager answers at /ws/v1/node/resources/yarn.io%2Fgpu, made by
// its own classes: the GPU plugin's parser reads `nvidia-smi -x -q`'s XML, the answer is
// the plugin's NMGpuResourceInfo, serialized by YARN's web services' JSON provider
// (YarnJacksonJaxbJsonProvider). The sandbox's NodeManagers run no GPU isolation, so their
// answers list no devices as YARN's and assign none; this makes the shape of a node that
// does (cgroups or docker: every device YARN's, some assigned to containers), which the
// sandbox cannot produce. tests/test_gpus.py checks it reproduces the sandbox's captured
// answer first, byte for byte.
//
//   java GpuResourceAnswer XML_FILE [isolated [INDEX=CONTAINER_ID ...]]
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import javax.ws.rs.core.MediaType;
import com.fasterxml.jackson.jaxrs.json.JacksonJsonProvider;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.resourceplugin.gpu.AssignedGpuDevice;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.resourceplugin.gpu.GpuDevice;
import org.apache.hadoop.yarn.server.nodemanager.webapp.dao.gpu.GpuDeviceInformation;
import org.apache.hadoop.yarn.server.nodemanager.webapp.dao.gpu.GpuDeviceInformationParser;
import org.apache.hadoop.yarn.server.nodemanager.webapp.dao.gpu.NMGpuResourceInfo;

public class GpuResourceAnswer {
  public static void main(String[] args) throws Exception {
    String xml = new String(Files.readAllBytes(Paths.get(args[0])), StandardCharsets.UTF_8);
    GpuDeviceInformation info = new GpuDeviceInformationParser().parseXml(xml);
    List<GpuDevice> total = new ArrayList<>();
    List<AssignedGpuDevice> assigned = new ArrayList<>();
    if (args.length > 1 && args[1].equals("isolated")) {
      for (int i = 0; i < info.getGpus().size(); i++) {
        total.add(new GpuDevice(i, info.getGpus().get(i).getMinorNumber()));
      }
      for (int a = 2; a < args.length; a++) {
        String[] kv = args[a].split("=", 2);
        int index = Integer.parseInt(kv[0]);
        assigned.add(new AssignedGpuDevice(index, total.get(index).getMinorNumber(),
            ContainerId.fromString(kv[1])));
      }
    }
    NMGpuResourceInfo answer = new NMGpuResourceInfo(info, total, assigned);
    System.out.print(new JacksonJsonProvider()
        .locateMapper(NMGpuResourceInfo.class, MediaType.APPLICATION_JSON_TYPE)
        .writeValueAsString(answer));
  }
}
