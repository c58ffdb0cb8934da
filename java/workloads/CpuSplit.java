/**
 * Ground truth for CPU sampling: heavy() does three times the work of light() in every call, so
 * a correct profile gives heavy 75 % and light 25 % of the samples in these two methods.
 * The split is also measured with thread CPU time and printed, as a second ground truth.
 *
 * Usage: java CpuSplit CPU_SECONDS
 * Runs until the main thread has used CPU_SECONDS of CPU time, so a loaded machine changes how
 * long it takes, not how many samples it gets.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class CpuSplit {
    static volatile long sink;

    // heavy and light have the same loop body; only the trip count differs (3:1).
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

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 5;
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long heavyNanos = 0, lightNanos = 0, calls = 0;
        long budget = (long) (seconds * 1e9);
        long random = 0x9E3779B97F4A7C15L;
        while (heavyNanos + lightNanos < budget) {
            // Each call's length varies (100,000 to 300,000 rounds, both methods alike), so the
            // program has no period for a sampling clock to fall in step with: a CPU timer
            // checked at the scheduler's tick would otherwise catch the same few points of a
            // strictly periodic loop again and again.
            random ^= random << 13;
            random ^= random >>> 7;
            random ^= random << 17;
            int rounds = 100_000 + (int) Math.floorMod(random, 200_000L);
            long t0 = cpu.getCurrentThreadCpuTime();
            sink += heavy(sink, rounds);
            long t1 = cpu.getCurrentThreadCpuTime();
            sink += light(sink, rounds);
            long t2 = cpu.getCurrentThreadCpuTime();
            heavyNanos += t1 - t0;
            lightNanos += t2 - t1;
            calls++;
        }
        System.out.printf("calls=%d heavy_cpu_share=%.4f%n", calls,
                (double) heavyNanos / (heavyNanos + lightNanos));
    }
}
