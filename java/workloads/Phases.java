/**
 * Ground truth for the web UI: a program in two phases whose hot method changes, and whose
 * requests take a time that depends on their key.
 *
 * Its thread "worker" loops, forever: in phase 1 it computes in alpha(), in phase 2 in beta()
 * (the same work, 2 ms each call), and after each of those handles a request, handle(key),
 * which spins 1 ms for the key "fast" and 8 ms for "slow" (every fourth request). So a profile
 * of phase 1 has alpha and no beta, one of phase 2 beta and no alpha, and method parameter
 * tracing of handle(String) ranks "slow" first at about 8 ms a call against 1 ms.
 *
 * Prints "ready" once the worker runs. A line "next" on standard input starts phase 2 (it
 * answers "phase 2"); it exits when standard input closes.
 *
 * Usage: java Phases
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class Phases {
    static volatile int phase = 1;
    static volatile long sink;

    static long spin(long nanos) {
        long until = System.nanoTime() + nanos;
        long x = sink;
        while (System.nanoTime() < until) {
            for (int i = 0; i < 200; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        return x;
    }

    static long alpha() {
        return spin(2_000_000);
    }

    static long beta() {
        return spin(2_000_000);
    }

    static long handle(String key) {
        return spin(key.equals("slow") ? 8_000_000 : 1_000_000);
    }

    public static void main(String[] args) throws Exception {
        Thread worker = new Thread(() -> {
            for (long request = 0; ; request++) {
                sink += phase == 1 ? alpha() : beta();
                sink += handle(request % 4 == 3 ? "slow" : "fast");
            }
        }, "worker");
        worker.setDaemon(true);
        worker.start();
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("next")) {
                phase = 2;
                System.out.println("phase 2");
                System.out.flush();
            }
        }
    }
}
