import dev.openprof.Context;

/**
 * Ground truth for samples labelled by parameter values and by the application's context:
 * requests run under Context.run("user", ...), three of alice's for each of bob's, and each
 * request calls lookup(key) with the key "slow" or "fast" alternately (both users alike).
 * lookup("slow") computes in slowBranch four times as long as lookup("fast") in fastBranch
 * (counted in rounds, not time, so that the split holds however busy the machine is), so 3/4
 * of the labelled CPU is alice's and 4/5 is under lookup's key "slow", whose samples are all
 * in slowBranch.
 *
 * Usage: java MptJoined SECONDS
 * Runs until the main thread has used SECONDS of CPU time, so that a busy machine changes how
 * long it takes, not how many samples it gets.
 */
public class MptJoined {
    static volatile long sink;

    /** About a millisecond of CPU per million rounds. */
    static long spin(long rounds) {
        long x = rounds;
        for (long i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long slowBranch() {
        return spin(4_000_000);
    }

    static long fastBranch() {
        return spin(1_000_000);
    }

    static long lookup(String key) {
        return key.equals("slow") ? slowBranch() : fastBranch();
    }

    public static void main(String[] args) {
        java.lang.management.ThreadMXBean cpu =
            java.lang.management.ManagementFactory.getThreadMXBean();
        long end = cpu.getCurrentThreadCpuTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long request = 0;
        while (cpu.getCurrentThreadCpuTime() < end) {
            String user = request % 4 == 3 ? "bob" : "alice";
            // Both keys for each user: the key changes every four requests.
            String key = (request / 4) % 2 == 0 ? "slow" : "fast";
            Context.run("user", user, () -> sink += lookup(key));
            request++;
        }
        System.out.println("requests=" + request);
    }
}
