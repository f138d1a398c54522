package com.anaconda.skein;

import java.lang.reflect.Method;
import java.util.HashSet;
import java.util.Set;

import org.apache.hadoop.yarn.api.records.Priority;

/**
 * Do two outstanding container requests of skein's ApplicationMaster ever share a
 * priority? The AM matches a container YARN gives to its request by priority alone, so
 * two requests with one priority get two containers of which the AM uses one and
 * releases the other as "canceled", and the second request is never served.
 *
 * <p>The AM's own bookkeeping, as a gang's restart drives it: three requests, the first
 * served by YARN (its priority removed), the numbering brought up to date as after each
 * allocate response, and a fourth request, which must not take a number still
 * outstanding. Exit 0: every outstanding number distinct; 1: two shared one.
 */
public final class PriorityCheck {
  private PriorityCheck() { }

  public static void main(String[] args) throws Exception {
    ApplicationMaster am = new ApplicationMaster();
    Class<?> tracker = Class.forName("com.anaconda.skein.ApplicationMaster$ServiceTracker");
    Method newPriority = ApplicationMaster.class.getDeclaredMethod("newPriority", tracker);
    Method removePriority =
        ApplicationMaster.class.getDeclaredMethod("removePriority", Priority.class);
    Method updatePriorities = ApplicationMaster.class.getDeclaredMethod("updatePriorities");
    newPriority.setAccessible(true);
    removePriority.setAccessible(true);
    updatePriorities.setAccessible(true);

    Priority first = (Priority) newPriority.invoke(am, (Object) null);
    Priority second = (Priority) newPriority.invoke(am, (Object) null);
    Priority third = (Priority) newPriority.invoke(am, (Object) null);
    removePriority.invoke(am, first);  // YARN gave its container
    updatePriorities.invoke(am);       // as after every allocate response with news
    Priority fourth = (Priority) newPriority.invoke(am, (Object) null);

    Set<Integer> outstanding = new HashSet<Integer>();
    for (Priority p : new Priority[] {second, third, fourth}) {
      if (!outstanding.add(p.getPriority())) {
        System.out.println("SHARED: priority " + p.getPriority() + " given to two "
            + "outstanding requests (" + second.getPriority() + ", " + third.getPriority()
            + ", " + fourth.getPriority() + ")");
        System.exit(1);
      }
    }
    System.out.println("ok: outstanding priorities " + second.getPriority() + ", "
        + third.getPriority() + ", " + fourth.getPriority());
  }
}
