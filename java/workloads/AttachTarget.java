/**
 * Ground truth for attaching to a running JVM: prints "ready", then waits for a line on its
 * standard input (the test attaches the agent meanwhile). On "go" it burns CPU in two methods
 * with a known 3:1 split: heavy() on the main thread, which was running before the agent came,
 * and light() on a thread started after "go", so both ways a thread gets its CPU timer are
 * exercised. Each thread stops once it has used its share of CPU_SECONDS of its own CPU time
 * (3/4 and 1/4), then the program prints the split it measured and exits. If standard input
 * closes before a line comes, it exits at once.
 *
 * Usage: java AttachTarget CPU_SECONDS
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class AttachTarget {
    static volatile long sink;
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();

    // heavy and light have the same loop body; they differ only in how long they are called.
    static long heavy(long seed) {
        long x = seed;
        for (int i = 0; i < 100_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long light(long seed) {
        long x = seed;
        for (int i = 0; i < 100_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    /** CPU nanoseconds the calling thread used running heavy() (or light()) for `budget`. */
    static long burn(boolean heavy, long budget) {
        long start = CPU.getCurrentThreadCpuTime();
        long used = 0;
        while (used < budget) {
            sink += heavy ? heavy(sink) : light(sink);
            used = CPU.getCurrentThreadCpuTime() - start;
        }
        return used;
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        String line = in.readLine();
        if (line == null) {
            System.out.println("no go");
            return;
        }
        long budget = (long) (seconds * 1e9);
        long[] lightNanos = new long[1];
        Thread light = new Thread(() -> lightNanos[0] = burn(false, budget / 4), "light");
        light.start();
        long heavyNanos = burn(true, budget - budget / 4);
        light.join();
        System.out.printf("heavy_cpu_share=%.4f%n",
                (double) heavyNanos / (heavyNanos + lightNanos[0]));
    }
}
