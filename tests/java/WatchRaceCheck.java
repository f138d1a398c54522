package com.anaconda.skein;

import com.anaconda.skein.shaded.com.google.protobuf.ByteString;
import com.anaconda.skein.shaded.io.grpc.stub.StreamObserver;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Does skein's ApplicationMaster ever send two messages at once on one watch stream?
 *
 * <p>The AM's gRPC service runs in this process, on the skein jar given on the classpath
 * (compiled against its shaded names, so it runs on skein 0.8.2's own jar and on tfyarn's
 * build alike). One thread creates a watch on key "k"; while the AM sends that watch's
 * confirmation (this stream observer holds it there), another thread puts "k". A correct
 * AM makes the put wait for the confirmation (the put's thread is seen BLOCKED on the
 * store's lock); skein 0.8.2 sends the put's event at the same time, on the same stream,
 * which gRPC's StreamObserver does not allow. Exit 0: no overlap; 1: overlapped.
 */
public final class WatchRaceCheck {
  private WatchRaceCheck() { }

  public static void main(String[] args) throws Exception {
    ApplicationMaster am = new ApplicationMaster();
    final ApplicationMaster.AppMasterImpl service = am.new AppMasterImpl();
    final AtomicInteger sending = new AtomicInteger();
    final AtomicInteger overlaps = new AtomicInteger();
    final AtomicReference<Thread> putter = new AtomicReference<Thread>();
    final CountDownLatch confirming = new CountDownLatch(1);

    final StreamObserver<Msg.WatchResponse> stream = new StreamObserver<Msg.WatchResponse>() {
      @Override
      public void onNext(Msg.WatchResponse msg) {
        if (sending.incrementAndGet() > 1) {
          overlaps.incrementAndGet();
        }
        try {
          if (msg.getType() == Msg.WatchResponse.Type.CREATE) {
            confirming.countDown();
            // Hold the confirmation until the put has either sent (an overlap) or is
            // waiting for the store's lock: one of the two always happens.
            while (overlaps.get() == 0 && !blocked(putter.get())) {
              Thread.yield();
            }
          }
        } finally {
          sending.decrementAndGet();
        }
      }

      @Override
      public void onError(Throwable t) { }

      @Override
      public void onCompleted() { }
    };
    final StreamObserver<Msg.WatchRequest> requests = service.watch(stream);
    final Msg.WatchRequest create = Msg.WatchRequest.newBuilder()
        .setCreate(Msg.WatchCreateRequest.newBuilder().setStart("k").setEnd("k\0")
                   .setEventType(Msg.WatchCreateRequest.Type.PUT))
        .build();
    final Msg.PutKeyRequest put = Msg.PutKeyRequest.newBuilder()
        .setKey("k").setValue(ByteString.copyFromUtf8("v")).build();
    final StreamObserver<Msg.PutKeyResponse> ignored = new StreamObserver<Msg.PutKeyResponse>() {
      @Override
      public void onNext(Msg.PutKeyResponse msg) { }

      @Override
      public void onError(Throwable t) { }

      @Override
      public void onCompleted() { }
    };

    Thread creator = new Thread(new Runnable() {
      @Override
      public void run() {
        requests.onNext(create);
      }
    });
    creator.start();
    confirming.await();
    Thread p = new Thread(new Runnable() {
      @Override
      public void run() {
        service.putKey(put, ignored);
      }
    });
    putter.set(p);
    p.start();
    creator.join();
    p.join();
    if (overlaps.get() > 0) {
      System.out.println("OVERLAP: a put's event was sent during the watch's confirmation");
      System.exit(1);
    }
    System.out.println("ok: the put waited for the watch's confirmation");
  }

  private static boolean blocked(Thread t) {
    return t != null && t.getState() == Thread.State.BLOCKED;
  }
}
