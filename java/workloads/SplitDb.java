package split.db;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/** The database part of ComponentSplit: 2 units. */
public class SplitDb {
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    /** CPU time spent in query(), nanoseconds. */
    public static long used;

    public static long query(long start) {
        long t0 = CPU.getCurrentThreadCpuTime();
        long x = start;
        for (int i = 0; i < 200_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        used += CPU.getCurrentThreadCpuTime() - t0;
        return x;
    }
}
