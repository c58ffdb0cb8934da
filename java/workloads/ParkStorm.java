import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Heavy park traffic: LOCKERS threads take turns on one ReentrantLock (each holds it for a
 * few microseconds of work, so the others queue and park) while PAIRS producer and consumer
 * threads hand numbers through a SynchronousQueue (every hand-over parks one side), for
 * SECONDS seconds. Prints how many lock turns and hand-overs were made, and checks that the
 * consumers received exactly what the producers sent.
 *
 * Usage: java ParkStorm LOCKERS PAIRS SECONDS
 */
public class ParkStorm {
    static long shared;

    public static void main(String[] args) throws Exception {
        int lockers = Integer.parseInt(args[0]);
        int pairs = Integer.parseInt(args[1]);
        long seconds = Long.parseLong(args[2]);
        ReentrantLock lock = new ReentrantLock();
        SynchronousQueue<Long> queue = new SynchronousQueue<>();
        AtomicBoolean stop = new AtomicBoolean();
        LongAdder turns = new LongAdder();
        LongAdder sent = new LongAdder();
        LongAdder received = new LongAdder();
        Thread[] threads = new Thread[lockers + 2 * pairs];
        for (int i = 0; i < lockers; i++) {
            threads[i] = new Thread(() -> {
                while (!stop.get()) {
                    lock.lock();
                    try {
                        for (int k = 0; k < 200; k++) {
                            shared = shared * 6364136223846793005L + 1442695040888963407L;
                        }
                    } finally {
                        lock.unlock();
                    }
                    turns.increment();
                }
            }, "locker-" + i);
        }
        for (int i = 0; i < pairs; i++) {
            threads[lockers + 2 * i] = new Thread(() -> {
                try {
                    for (long n = 1; !stop.get(); n++) {
                        queue.put(n);
                        sent.add(n);
                    }
                    queue.put(0L);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "producer-" + i);
            threads[lockers + 2 * i + 1] = new Thread(() -> {
                try {
                    long n;
                    while ((n = queue.take()) != 0) {
                        received.add(n);
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "consumer-" + i);
        }
        for (Thread thread : threads) {
            thread.start();
        }
        Thread.sleep(seconds * 1000);
        stop.set(true);
        for (Thread thread : threads) {
            thread.join();
        }
        if (sent.sum() != received.sum()) {
            throw new AssertionError("sent " + sent.sum() + ", received " + received.sum());
        }
        System.out.printf("turns=%d handovers_sum=%d%n", turns.sum(), received.sum());
    }
}
