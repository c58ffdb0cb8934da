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
 * profiles the milliseconds blocked and parked, with the number of cycles in which each wait
 * lasted at least WAITED_MS (a cycle whose holder came late may not wait at all).
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
        volatile Thread holder;
        volatile int cycle = -1;
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
                    sleepUntil(monitorFree);
                }
                sleepUntil(lockFree);
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

    /**
     * One worker's cycles; returns nanoseconds sleeping, blocked, parked, computing, and the
     * cycles whose blocked and parked waits lasted at least WAITED_MS.
     */
    static long[] work(Pair pair, int cycles) {
        long[] spent = new long[6];
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
            spent[4] += entered - slept >= WAITED_MS * 1_000_000 ? 1 : 0;
            spent[5] += locked - entered >= WAITED_MS * 1_000_000 ? 1 : 0;
        }
        return spent;
    }

    public static void main(String[] args) throws Exception {
        int workers = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        int cycles = args.length > 1 ? Integer.parseInt(args[1]) : 40;
        long[][] spent = new long[workers][];
        Thread[] threads = new Thread[workers * 2];
        for (int w = 0; w < workers; w++) {
            Pair pair = new Pair();
            int index = w;
            Thread holder = new Thread(() -> hold(pair, cycles), "holder-" + w);
            pair.holder = holder;
            threads[2 * w] = holder;
            threads[2 * w + 1] = new Thread(() -> spent[index] = work(pair, cycles), "worker-" + w);
        }
        for (Thread thread : threads) {
            thread.start();
        }
        System.out.println("ready");
        System.out.flush();
        for (Thread thread : threads) {
            thread.join();
        }
        long[] total = new long[6];
        for (long[] one : spent) {
            for (int i = 0; i < 6; i++) {
                total[i] += one[i];
            }
        }
        double all = total[0] + total[1] + total[2] + total[3];
        System.out.printf("sleeping=%.4f blocked=%.4f parked=%.4f running=%.4f%n",
                total[0] / all, total[1] / all, total[2] / all, total[3] / all);
        System.out.printf("blocked_ms=%d parked_ms=%d blocked_waits=%d parked_waits=%d%n",
                total[1] / 1_000_000, total[2] / 1_000_000, total[4], total[5]);
    }
}
