package split.web;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

import split.db.SplitDb;

/** The web part of ComponentSplit: 1 unit of its own, then 2 in the database. */
public class SplitWeb {
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    /** CPU time spent in handle() itself, not in the database, nanoseconds. */
    public static long own;

    public static long handle(long start) {
        long t0 = CPU.getCurrentThreadCpuTime();
        long x = start;
        for (int i = 0; i < 100_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        own += CPU.getCurrentThreadCpuTime() - t0;
        return x + SplitDb.query(x);
    }
}
