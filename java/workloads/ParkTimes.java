import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.locks.LockSupport;

/**
 * Ground truth for profiling parked threads: the main thread parks COUNT times for BRIEF_MS on
 * a Brief blocker and COUNT times for LONG_MS on a Long blocker (LockSupport.parkNanos: one
 * Unsafe.park each; nothing unparks it), timing every park with System.nanoTime, and prints
 * how many parks of each kind it made and the milliseconds they took.
 *
 * With "attach" it first parks 20,000 times for a nanosecond on a Warmup blocker, in the same
 * method, called 1,000 times, so that the JIT compiles that method fully (the native park is
 * then called from compiled code), prints "ready" and waits for a line on its standard input (a test
 * attaches the agent meanwhile) before the timed parks; if standard input closes first, it
 * exits at once.
 *
 * Usage: java ParkTimes COUNT BRIEF_MS LONG_MS [attach]
 */
public class ParkTimes {
    static final class Warmup {}
    static final class Brief {}
    static final class Long {}

    /** Parks `count` times for `nanos` on `blocker`; returns the nanoseconds parked. */
    static long parkLoop(Object blocker, int count, long nanos) {
        long parked = 0;
        for (int i = 0; i < count; i++) {
            long start = System.nanoTime();
            LockSupport.parkNanos(blocker, nanos);
            parked += System.nanoTime() - start;
        }
        return parked;
    }

    public static void main(String[] args) throws Exception {
        int count = Integer.parseInt(args[0]);
        long brief = Integer.parseInt(args[1]) * 1_000_000L;
        long longer = Integer.parseInt(args[2]) * 1_000_000L;
        if (args.length > 3 && args[3].equals("attach")) {
            Warmup warmup = new Warmup();
            for (int round = 0; round < 1_000; round++) {
                parkLoop(warmup, 20, 1);
            }
            System.out.println("ready");
            System.out.flush();
            BufferedReader input = new BufferedReader(new InputStreamReader(System.in));
            if (input.readLine() == null) {
                return;
            }
        }
        long briefNanos = parkLoop(new Brief(), count, brief);
        long longNanos = parkLoop(new Long(), count, longer);
        System.out.printf("brief_parks=%d brief_ms=%d long_parks=%d long_ms=%d%n",
                count, briefNanos / 1_000_000, count, longNanos / 1_000_000);
    }
}
