import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;

/**
 * Class churn for memory measurements: for SECONDS, again and again, loads ChurnTarget in a
 * class loader of its own (a new class each time, with new methods for a profiler to name),
 * runs its work() for about a millisecond of CPU, and lets the loader go, so that the JVM
 * unloads the classes. Prints "iterations=N" at the end.
 *
 * Usage: java ClassChurn SECONDS
 * Runs until the main thread has used SECONDS of CPU time, so that a busy machine changes how
 * long it takes, not how much it samples.
 */
public class ClassChurn {
    public static void main(String[] args) throws Exception {
        java.lang.management.ThreadMXBean cpu =
            java.lang.management.ManagementFactory.getThreadMXBean();
        long end = cpu.getCurrentThreadCpuTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        URL classes = ClassChurn.class.getProtectionDomain().getCodeSource().getLocation();
        long iterations = 0;
        long sink = 0;
        while (cpu.getCurrentThreadCpuTime() < end) {
            try (URLClassLoader loader = new URLClassLoader(new URL[] {classes}, null)) {
                Class<?> target = loader.loadClass("ChurnTarget");
                Method work = target.getMethod("work", int.class);
                work.setAccessible(true);
                sink += (Long) work.invoke(null, 200_000);
            }
            iterations++;
        }
        System.out.println("iterations=" + iterations + " sink=" + (sink & 1));
    }
}

/** What ClassChurn loads anew each time: a little CPU work in a method of its own. */
class ChurnTarget {
    public static long work(int rounds) {
        long x = rounds;
        for (int i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }
}
