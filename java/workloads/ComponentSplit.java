package split.app;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

import split.db.SplitDb;
import split.web.SplitWeb;

/**
 * Ground truth for component statistics: code in three packages with known CPU shares. Each
 * round, split.app.ComponentSplit computes 3 units itself, and calls split.web.SplitWeb, which
 * computes 1 unit and calls split.db.SplitDb for 2 more. Where the CPU is spent (self): app 50 %,
 * web 16.7 %, db 33.3 %; where it passes (total): web 50 % (its own and the database's), db
 * 33.3 %, app 100 % (main is on every stack). The shares the JVM measured (thread CPU time around
 * each part) are printed too (app_cpu_share=0.4998 web_cpu_share=... db_cpu_share=...). Each
 * class runs the loop in a method of its own: a shared helper would be in one package, and the
 * CPU would be spent there.
 *
 * Usage: java -cp CLASSES split.app.ComponentSplit CPU_SECONDS
 * Runs until the main thread has used CPU_SECONDS of CPU time.
 */
public class ComponentSplit {
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    static volatile long sink;

    static long compute(long start, int units) {
        long x = start;
        for (int i = 0; i < units * 100_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        long budget = (long) (seconds * 1e9);
        long app = 0;
        long start = CPU.getCurrentThreadCpuTime();
        while (CPU.getCurrentThreadCpuTime() - start < budget) {
            long t0 = CPU.getCurrentThreadCpuTime();
            sink += compute(sink, 3);
            app += CPU.getCurrentThreadCpuTime() - t0;
            sink += SplitWeb.handle(sink);
        }
        double total = app + SplitWeb.own + SplitDb.used;
        System.out.printf("app_cpu_share=%.4f web_cpu_share=%.4f db_cpu_share=%.4f%n",
                app / total, SplitWeb.own / total, SplitDb.used / total);
    }
}
