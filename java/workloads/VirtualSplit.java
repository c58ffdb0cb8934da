/**
 * Ground truth for virtual threads (JDK 21 and later): THREADS virtual threads each run heavy()
 * and light() in turn, heavy() three times the rounds of light(), yielding between rounds so that
 * they move between carrier threads. A correct profile gives heavy about 75 % of the samples of
 * the two, on the virtual threads' own stacks; the threads also time each call and print the
 * share of heavy() they measured (heavy_share), which holds however the JIT compiled the two
 * (a virtual thread has no CPU clock of its own, so the time is elapsed time, which a busy
 * machine stretches for both alike). On a JDK without virtual threads it prints
 * `virtual_threads=no` and its feature version, and does nothing else.
 *
 * Usage: java VirtualSplit THREADS ROUNDS
 * Built with --release 17: virtual threads are reached through reflection.
 */
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public class VirtualSplit {
    static final AtomicLong sink = new AtomicLong();
    static final AtomicLong heavyNanos = new AtomicLong();
    static final AtomicLong lightNanos = new AtomicLong();

    static long heavy(long seed, int rounds) {
        long x = seed;
        for (int i = 0; i < rounds * 3; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long light(long seed, int rounds) {
        long x = seed;
        for (int i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        int rounds = Integer.parseInt(args[1]);
        ExecutorService executor;
        try {
            executor = (ExecutorService) Executors.class
                .getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        } catch (NoSuchMethodException absent) {
            System.out.println("virtual_threads=no feature=" + Runtime.version().feature());
            return;
        }
        for (int t = 0; t < threads; t++) {
            final long seed = t;
            executor.submit(() -> {
                long x = seed;
                long inHeavy = 0, inLight = 0;
                for (int k = 0; k < 20; k++) {
                    // Each round's length varies: no period for a sampling clock to fall in step with.
                    int length = rounds / 2 + (int) Math.floorMod(x, (long) rounds);
                    long start = System.nanoTime();
                    x = heavy(x, length);
                    long between = System.nanoTime();
                    x = light(x, length);
                    long end = System.nanoTime();
                    inHeavy += between - start;
                    inLight += end - between;
                    Thread.yield();
                }
                heavyNanos.addAndGet(inHeavy);
                lightNanos.addAndGet(inLight);
                sink.addAndGet(x);
            });
        }
        executor.shutdown();
        executor.awaitTermination(1, TimeUnit.HOURS);
        System.out.println("virtual_threads=" + threads + " sink=" + (sink.get() & 1)
                + " heavy_share=" + (double) heavyNanos.get() / (heavyNanos.get() + lightNanos.get()));
    }
}
