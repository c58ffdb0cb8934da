import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Ground truth for wall-clock profiling: each worker thread spends its wall time in four known
 * states, cycle after cycle: sleeping 30 %, blocked entering a contended monitor 20 %, parked on
 * a ReentrantLock 20 % and computing 30 %. A holder thread per worker makes the contention: it
 * takes the worker's monitor and lock while the worker sleeps, and lets go of the monitor 20 ms
 * after the worker's sleep ends, of the lock 20 ms later.
 *
 * Each worker times its own phases with System.nanoTime, and the workload prints the shares of
 * the four states over all workers: the figures a wall-clock profile must show; and for lock
 * profiles the milliseconds blocked and parked, with the number of waits that certainly lasted
 * at least WAITED_MS. Those the holder counts: while it holds the monitor or the lock it looks
 * at its worker every millisecond, and a wait counts when the worker was already blocked on
 * the monitor (or parked on the lock) WAITED_MS before the holder let go. The worker's own
 * clock cannot tell: on a busy machine a worker that is not given a CPU, or stopped at a
 * safepoint, between two of its readings has not waited on anything, and a cycle whose holder
 * came late may not wait at all.
 *
 * Prints "ready" once its threads run.
 *
 * Usage: java WallStates WORKERS CYCLES
 */
public class WallStates {
    static final long SLEEP_MS = 30, BLOCKED_MS = 20, PARKED_MS = 20, COMPUTE_MS = 30;
    /** A wait at least this long counts as one (half the designed 20 ms). */
    static final long WAITED_MS = 10;
    static volatile long sink;

    /** The monitor the workers block on: its class names it in lock profiles. */
    static final class Ledger {}

    static final class Pair {
        final Ledger monitor = new Ledger();
        final ReentrantLock lock = new ReentrantLock();
        volatile long sleepEnds;
        volatile Thread holder, worker;
        volatile int cycle = -1;
        /** The waits of at least WAITED_MS the holder saw (its thread's alone). */
        long blockedWaits, parkedWaits;
    }

    static void sleepUntil(long deadline) {
        long left;
        while ((left = deadline - System.nanoTime()) > 0) {
            try {
                Thread.sleep(left / 1_000_000, (int) (left % 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /**
     * Sleeps until `deadline`, looking at `worker` every millisecond; returns whether it had
     * been in `state` for at least WAITED_MS by then (seen so that long before the deadline).
     */
    static boolean holdWatching(long deadline, Thread worker, Thread.State state) {
        long seen = -1;
        long left;
        while ((left = deadline - System.nanoTime()) > 0) {
            if (seen < 0 && worker.getState() == state) {
                seen = System.nanoTime();
            }
            try {
                Thread.sleep(0, (int) Math.min(left, 999_999));
            } catch (InterruptedException e) {
                return false;
            }
        }
        return seen >= 0 && System.nanoTime() - seen >= WAITED_MS * 1_000_000;
    }

    static void hold(Pair pair, int cycles) {
        for (int cycle = 0; cycle < cycles; cycle++) {
            while (pair.cycle < cycle) {
                LockSupport.park();
            }
            long monitorFree = pair.sleepEnds + BLOCKED_MS * 1_000_000;
            long lockFree = monitorFree + PARKED_MS * 1_000_000;
            pair.lock.lock();
            try {
                synchronized (pair.monitor) {
                    if (holdWatching(monitorFree, pair.worker, Thread.State.BLOCKED)) {
                        pair.blockedWaits++;
                    }
                }
                // Parked in ReentrantLock.lock: WAITING (the worker parks nowhere else).
                if (holdWatching(lockFree, pair.worker, Thread.State.WAITING)) {
                    pair.parkedWaits++;
                }
            } finally {
                pair.lock.unlock();
            }
        }
    }

    static long compute(long until) {
        long x = sink;
        while (System.nanoTime() < until) {
            for (int i = 0; i < 1000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        return x;
    }

    /** One worker's cycles; returns nanoseconds sleeping, blocked, parked and computing. */
    static long[] work(Pair pair, int cycles) {
        long[] spent = new long[4];
        for (int cycle = 0; cycle < cycles; cycle++) {
            long start = System.nanoTime();
            pair.sleepEnds = start + SLEEP_MS * 1_000_000;
            pair.cycle = cycle;
            LockSupport.unpark(pair.holder);
            sleepUntil(pair.sleepEnds);
            long slept = System.nanoTime();
            synchronized (pair.monitor) {
                sink++;
            }
            long entered = System.nanoTime();
            pair.lock.lock();
            pair.lock.unlock();
            long locked = System.nanoTime();
            sink += compute(locked + COMPUTE_MS * 1_000_000);
            long computed = System.nanoTime();
            spent[0] += slept - start;
            spent[1] += entered - slept;
            spent[2] += locked - entered;
            spent[3] += computed - locked;
        }
        return spent;
    }

    public static void main(String[] args) throws Exception {
        int workers = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        int cycles = args.length > 1 ? Integer.parseInt(args[1]) : 40;
        long[][] spent = new long[workers][];
        Pair[] pairs = new Pair[workers];
        Thread[] threads = new Thread[workers * 2];
        for (int w = 0; w < workers; w++) {
            Pair pair = new Pair();
            pairs[w] = pair;
            int index = w;
            pair.holder = new Thread(() -> hold(pair, cycles), "holder-" + w);
            pair.worker = new Thread(() -> spent[index] = work(pair, cycles), "worker-" + w);
            threads[2 * w] = pair.holder;
            threads[2 * w + 1] = pair.worker;
        }
        for (Thread thread : threads) {
            thread.start();
        }
        System.out.println("ready");
        System.out.flush();
        for (Thread thread : threads) {
            thread.join();
        }
        long[] total = new long[4];
        for (long[] one : spent) {
            for (int i = 0; i < 4; i++) {
                total[i] += one[i];
            }
        }
        long blockedWaits = 0, parkedWaits = 0;
        for (Pair pair : pairs) {
            blockedWaits += pair.blockedWaits;
            parkedWaits += pair.parkedWaits;
        }
        double all = total[0] + total[1] + total[2] + total[3];
        System.out.printf("sleeping=%.4f blocked=%.4f parked=%.4f running=%.4f%n",
                total[0] / all, total[1] / all, total[2] / all, total[3] / all);
        System.out.printf("blocked_ms=%d parked_ms=%d blocked_waits=%d parked_waits=%d%n",
                total[1] / 1_000_000, total[2] / 1_000_000, blockedWaits, parkedWaits);
    }
}
