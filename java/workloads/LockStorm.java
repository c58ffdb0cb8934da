import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Heavy lock traffic, for lock profiling's cost and robustness, in three phases of SECONDS
 * seconds each, one after the other (so that each phase's throughput is its own):
 * - LOCKERS threads take turns on one fair ReentrantLock, each holding it for WORK steps of
 *   arithmetic (200 by default, a fraction of a microsecond; 20000, some tens): a fair lock
 *   hands itself to the longest waiter, so turns are parks and unparks;
 * - MONITORS threads take turns on one `synchronized` monitor the same way, so they block
 *   entering it;
 * - PAIRS producer and consumer threads hand numbers through a SynchronousQueue (every
 *   hand-over parks one side).
 * Prints how many lock turns, monitor enters and hand-overs were made (the throughput a
 * profiler's cost lowers), after checking that the consumers received exactly what the
 * producers sent.
 *
 * Usage: java LockStorm LOCKERS MONITORS PAIRS SECONDS [WORK]
 */
public class LockStorm {
    static long shared;
    static int steps = 200;
    static final Object MONITOR = new Object();

    /** The work inside the lock or the monitor. */
    static void work() {
        for (int k = 0; k < steps; k++) {
            shared = shared * 6364136223846793005L + 1442695040888963407L;
        }
    }

    /** Runs the threads for `seconds`, then has them stop and waits for them. */
    static void phase(Thread[] threads, AtomicBoolean stop, double seconds) throws Exception {
        for (Thread thread : threads) {
            thread.start();
        }
        Thread.sleep((long) (seconds * 1000));
        stop.set(true);
        for (Thread thread : threads) {
            thread.join();
        }
    }

    static long lockTurns(int lockers, double seconds) throws Exception {
        ReentrantLock lock = new ReentrantLock(true);
        AtomicBoolean stop = new AtomicBoolean();
        LongAdder turns = new LongAdder();
        Thread[] threads = new Thread[lockers];
        for (int i = 0; i < lockers; i++) {
            threads[i] = new Thread(() -> {
                while (!stop.get()) {
                    lock.lock();
                    try {
                        work();
                    } finally {
                        lock.unlock();
                    }
                    turns.increment();
                }
            }, "locker-" + i);
        }
        phase(threads, stop, seconds);
        return turns.sum();
    }

    static long monitorEnters(int monitors, double seconds) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        LongAdder enters = new LongAdder();
        Thread[] threads = new Thread[monitors];
        for (int i = 0; i < monitors; i++) {
            threads[i] = new Thread(() -> {
                while (!stop.get()) {
                    synchronized (MONITOR) {
                        work();
                    }
                    enters.increment();
                }
            }, "monitor-" + i);
        }
        phase(threads, stop, seconds);
        return enters.sum();
    }

    static long handovers(int pairs, double seconds) throws Exception {
        SynchronousQueue<Long> queue = new SynchronousQueue<>();
        AtomicBoolean stop = new AtomicBoolean();
        LongAdder sent = new LongAdder();
        LongAdder received = new LongAdder();
        LongAdder handovers = new LongAdder();
        Thread[] threads = new Thread[2 * pairs];
        for (int i = 0; i < pairs; i++) {
            threads[2 * i] = new Thread(() -> {
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
            threads[2 * i + 1] = new Thread(() -> {
                try {
                    long n;
                    while ((n = queue.take()) != 0) {
                        received.add(n);
                        handovers.increment();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "consumer-" + i);
        }
        phase(threads, stop, seconds);
        if (sent.sum() != received.sum()) {
            throw new AssertionError("sent " + sent.sum() + ", received " + received.sum());
        }
        return handovers.sum();
    }

    public static void main(String[] args) throws Exception {
        int lockers = Integer.parseInt(args[0]);
        int monitors = Integer.parseInt(args[1]);
        int pairs = Integer.parseInt(args[2]);
        double seconds = Double.parseDouble(args[3]);
        if (args.length > 4) {
            steps = Integer.parseInt(args[4]);
        }
        long turns = lockTurns(lockers, seconds);
        long enters = monitorEnters(monitors, seconds);
        long handovers = handovers(pairs, seconds);
        System.out.printf("turns=%d enters=%d handovers=%d%n", turns, enters, handovers);
    }
}
