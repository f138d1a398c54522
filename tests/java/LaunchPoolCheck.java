package com.anaconda.skein;

import java.lang.reflect.Method;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * Does the pool skein's ApplicationMaster starts containers on run starts at once?
 *
 * <p>Three "starts", each waiting until all three are under way, as the starts of one
 * gang's containers wait on their NodeManagers. tfyarn's build makes the pool with
 * Utils.newParallelThreadPoolExecutor; skein 0.8.2 (which lacks it) with
 * newThreadPoolExecutor(name, 0, 25, true), whose unbounded queue runs one task at a
 * time, so there the three never run together. Exit 0: they did; 1: they did not within
 * WAIT_S (the pool left two queued behind the first).
 */
public final class LaunchPoolCheck {
  private static final int STARTS = 3;
  private static final long WAIT_S = 10;

  private LaunchPoolCheck() { }

  public static void main(String[] args) throws Exception {
    ThreadPoolExecutor pool = launchPool();
    final CountDownLatch underway = new CountDownLatch(STARTS);
    final CountDownLatch together = new CountDownLatch(STARTS);
    for (int i = 0; i < STARTS; i++) {
      pool.execute(new Runnable() {
        @Override
        public void run() {
          underway.countDown();
          try {
            if (underway.await(WAIT_S, TimeUnit.SECONDS)) {
              together.countDown();
            }
          } catch (InterruptedException exc) {
            Thread.currentThread().interrupt();
          }
        }
      });
    }
    boolean ok = together.await(WAIT_S + 2, TimeUnit.SECONDS);
    pool.shutdownNow();
    if (!ok) {
      System.out.println("SERIAL: " + STARTS + " starts never ran at once");
      System.exit(1);
    }
    System.out.println("ok: " + STARTS + " starts ran at once");
  }

  /** The pool as the jar on the classpath's ApplicationMaster makes it. */
  private static ThreadPoolExecutor launchPool() throws Exception {
    try {
      Method parallel = Utils.class.getMethod("newParallelThreadPoolExecutor",
          String.class, int.class, boolean.class);
      return (ThreadPoolExecutor) parallel.invoke(null, "container-launch-executor", 25, true);
    } catch (NoSuchMethodException exc) {
      return Utils.newThreadPoolExecutor("container-launch-executor", 0, 25, true);
    }
  }
}
