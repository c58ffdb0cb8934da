/**
 * Ground truth for samples in the JVM's stubs: copy() spends its time in System.arraycopy of a
 * long[] (HotSpot's jlong_disjoint_arraycopy stub, called from compiled code), arith() in
 * arithmetic of its own. The main thread's CPU time in each is measured and copy()'s share
 * printed, so a profile must put that share under copy(), nearly all of it in the stub's frame.
 *
 * Usage: java StubCopies CPU_SECONDS
 * Runs until the main thread has used CPU_SECONDS of CPU time.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class StubCopies {
    static final long[] FROM = new long[1 << 16];
    static final long[] TO = new long[1 << 16];
    static volatile long sink;

    static void copy(int times) {
        for (int i = 0; i < times; i++) {
            System.arraycopy(FROM, 0, TO, 0, FROM.length);
        }
    }

    static long arith(int rounds) {
        long x = rounds;
        for (int i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long budget = (long) (seconds * 1e9);
        long copyNanos = 0, arithNanos = 0;
        long random = 0x9E3779B97F4A7C15L;
        while (copyNanos + arithNanos < budget) {
            random ^= random << 13;
            random ^= random >>> 7;
            random ^= random << 17;
            // Varying lengths: no period for a sampling clock to fall in step with.
            int times = 20 + (int) Math.floorMod(random, 40L);
            long t0 = cpu.getCurrentThreadCpuTime();
            copy(times);
            long t1 = cpu.getCurrentThreadCpuTime();
            sink += arith(200_000 + (int) Math.floorMod(random >>> 8, 400_000L));
            long t2 = cpu.getCurrentThreadCpuTime();
            copyNanos += t1 - t0;
            arithNanos += t2 - t1;
        }
        System.out.println("copy_cpu_share=" + (double) copyNanos / (copyNanos + arithNanos));
    }
}
