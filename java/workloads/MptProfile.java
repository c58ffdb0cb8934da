/**
 * Ground truth for the samples taken inside traced calls: handle(kind) spends 8 ms of its
 * thread's CPU time in slowPath() for kind 1 and 2 ms in fastPath() for kind 2; between
 * requests the thread spends 4 ms in outside(), inside no traced call. 250 rounds of
 * handle(1), handle(2), outside() (3.5 s of CPU).
 *
 * So of the CPU samples, those inside handle(1) are 8/14, those inside handle(2) 2/14, and none
 * of them is in outside(); handle(1)'s are in slowPath(), handle(2)'s in fastPath().
 *
 * Usage: java MptProfile
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class MptProfile {
    static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();
    static volatile long sink;

    /** Spins until this thread has used `nanos` more of CPU time. */
    static void burn(long nanos) {
        long until = THREADS.getCurrentThreadCpuTime() + nanos;
        long x = sink;
        while (THREADS.getCurrentThreadCpuTime() < until) {
            for (int i = 0; i < 2000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        sink = x;
    }

    static void slowPath() {
        burn(8_000_000);
    }

    static void fastPath() {
        burn(2_000_000);
    }

    static void outside() {
        burn(4_000_000);
    }

    static void handle(int kind) {
        if (kind == 1) {
            slowPath();
        } else {
            fastPath();
        }
    }

    public static void main(String[] args) {
        for (int round = 0; round < 250; round++) {
            handle(1);
            handle(2);
            outside();
        }
        System.out.println("done");
    }
}
