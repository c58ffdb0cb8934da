/**
 * Ground truth for delay=: main calls target() once a round, and target() itself does almost
 * nothing (it runs two of its three basic blocks for an odd argument, all three for an even
 * one, and counts the even ones), so with delay=Delayed.target:DURATION nearly all of target()'s time is the delay,
 * whose count and total the agent prints. Around it, other() does a varying amount of work of
 * its own. Prints the calls of target() and the main thread's CPU time, to compare a profile's
 * share of target() with the delays' share of the CPU.
 *
 * Usage: java Delayed CPU_SECONDS
 * Runs until the main thread has used CPU_SECONDS of CPU time.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class Delayed {
    static volatile long sink;

    // Three basic blocks: the test, the branch taken for an even x, the return.
    static long target(long x) {
        if ((x & 1) == 0) {
            x += 3;
        }
        return x + 1;
    }

    static long other(long seed, int rounds) {
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
        long budget = (long) (seconds * 1e9);
        long start = cpu.getCurrentThreadCpuTime();
        long random = 0x9E3779B97F4A7C15L;
        long calls = 0;
        long evens = 0;
        long x = 1;
        long used = 0;
        while (used < budget) {
            for (int k = 0; k < 100; k++) {
                random ^= random << 13;
                random ^= random >>> 7;
                random ^= random << 17;
                // 10,000 to 30,000 rounds: some tens of microseconds, no fixed period.
                x = other(x, 10_000 + (int) Math.floorMod(random, 20_000L));
                if ((x & 1) == 0) {
                    evens++;
                }
                x = target(x);
                calls++;
            }
            used = cpu.getCurrentThreadCpuTime() - start;
        }
        sink = x;
        System.out.println("target_calls=" + calls + " target_evens=" + evens + " main_cpu_ns=" + used);
    }
}
