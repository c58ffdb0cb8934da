/**
 * Many idle threads beside a few busy ones, for wall-clock profiling's bounded cost: IDLE
 * threads sleep the whole run; BUSY threads each spend three times as long in heavy() as in
 * light() (the same loop, 3:1 trip counts) for SECONDS of wall time. Prints how many rounds of
 * heavy and light the busy threads made (the throughput a profiler's cost lowers) and the share
 * of their time in heavy() they measured.
 *
 * Usage: java IdleCrowd IDLE BUSY SECONDS
 */
public class IdleCrowd {
    static volatile long sink;
    static final java.util.concurrent.atomic.AtomicLong rounds = new java.util.concurrent.atomic.AtomicLong();
    // The busy threads' time inside heavy() and light(): the split wall samples must show,
    // measured (3:1 once the JIT has compiled both alike; a loaded machine delays that).
    static final java.util.concurrent.atomic.AtomicLong heavyNs = new java.util.concurrent.atomic.AtomicLong();
    static final java.util.concurrent.atomic.AtomicLong lightNs = new java.util.concurrent.atomic.AtomicLong();

    static long heavy(long x) {
        for (int i = 0; i < 3_000_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    static long light(long x) {
        for (int i = 0; i < 1_000_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        int idle = Integer.parseInt(args[0]);
        int busy = Integer.parseInt(args[1]);
        Object never = new Object();
        for (int i = 0; i < idle; i++) {
            Thread thread = new Thread(() -> {
                synchronized (never) {
                    try {
                        never.wait();
                    } catch (InterruptedException e) {
                        // the end of the run
                    }
                }
            }, "idle-" + i);
            thread.setDaemon(true);
            thread.start();
        }
        // The busy time starts once the idle threads run: starting thousands of threads takes a
        // while on a loaded machine.
        long until = System.nanoTime() + (long) (Double.parseDouble(args[2]) * 1e9);
        Thread[] workers = new Thread[busy];
        for (int i = 0; i < busy; i++) {
            workers[i] = new Thread(() -> {
                long x = 1;
                long done = 0, inHeavy = 0, inLight = 0;
                long now = System.nanoTime();
                while (now < until) {
                    x = heavy(x);
                    long between = System.nanoTime();
                    x = light(x);
                    long after = System.nanoTime();
                    inHeavy += between - now;
                    inLight += after - between;
                    now = after;
                    done++;
                }
                sink += x;
                rounds.addAndGet(done);
                heavyNs.addAndGet(inHeavy);
                lightNs.addAndGet(inLight);
            }, "busy-" + i);
            workers[i].start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        System.out.println("rounds=" + rounds.get() + " heavy_wall_share="
                + (double) heavyNs.get() / (heavyNs.get() + lightNs.get()));
    }
}
