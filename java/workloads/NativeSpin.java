/**
 * Ground truth for the native walk: spin() is a JNI method whose C body (built by the test with
 * frame pointers) calls one more C function, spin_inner(), that does all the work. So nearly
 * every sample of the main thread is spin_inner, under Java_NativeSpin_spin, under
 * NativeSpin.spin, under NativeSpin.main.
 *
 * Usage: java NativeSpin LIBRARY CPU_SECONDS
 * Loads LIBRARY (the built C code) and runs until the main thread has used CPU_SECONDS of CPU.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class NativeSpin {
    static native long spin(long rounds);

    public static void main(String[] args) {
        System.load(args[0]);
        double seconds = Double.parseDouble(args[1]);
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long budget = (long) (seconds * 1e9);
        long start = cpu.getCurrentThreadCpuTime();
        long sink = 0;
        while (cpu.getCurrentThreadCpuTime() - start < budget) {
            sink += spin(20_000_000);
        }
        System.out.println("sink=" + sink);
    }
}
