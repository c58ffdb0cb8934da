/**
 * Ground truth for thread statistics: three threads named split-3, split-2 and split-1 burn CPU
 * in the same loop until each has used 3, 2 and 1 sixths of CPU_SECONDS of its own CPU time, so a
 * correct profile gives them 50 %, 33.3 % and 16.7 % of their CPU samples. Each thread's share
 * of the three's CPU time, as the JVM measured it, is printed too (split_3_cpu_share=0.5001 ...),
 * a second ground truth.
 *
 * Usage: java ThreadSplit CPU_SECONDS
 * Each thread stops on its own CPU time, not on the clock: a loaded machine makes the run longer,
 * not the split different.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class ThreadSplit {
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    static final long[] used = new long[4];
    static volatile long sink;

    static long spin(long start) {
        long x = start;
        for (int i = 0; i < 200_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) throws InterruptedException {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        long sixth = (long) (seconds * 1e9 / 6);
        Thread[] threads = new Thread[4];
        for (int share = 1; share <= 3; share++) {
            final int parts = share;
            threads[share] = new Thread(() -> {
                long start = CPU.getCurrentThreadCpuTime();
                long x = parts;
                while (CPU.getCurrentThreadCpuTime() - start < parts * sixth) {
                    x = spin(x);
                }
                sink += x;
                used[parts] = CPU.getCurrentThreadCpuTime() - start;
            }, "split-" + share);
            threads[share].start();
        }
        long total = 0;
        for (int share = 1; share <= 3; share++) {
            threads[share].join();
            total += used[share];
        }
        StringBuilder out = new StringBuilder();
        for (int share = 3; share >= 1; share--) {
            out.append(String.format("split_%d_cpu_share=%.4f ", share, (double) used[share] / total));
        }
        System.out.println(out.toString().trim());
    }
}
