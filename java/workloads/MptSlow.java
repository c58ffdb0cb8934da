/**
 * Ground truth for method parameter tracing's report: work(n) spins for n * 2 ms of wall time
 * (using the CPU), so its duration depends on its argument. Calls work(1), work(5) and work(20)
 * five times each, interleaved.
 *
 * Usage: java MptSlow [loop]
 * With "loop" it prints "ready" and calls work(1) and work(3) until its standard input closes
 * or says "stop" (for specifications added at run time), printing "pairs=N" after every tenth
 * pair of calls (N the pairs so far), for tests that wait until so many calls were made.
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class MptSlow {
    static volatile long sink;

    static long work(int n) {
        long until = System.nanoTime() + n * 2_000_000L;
        long x = n;
        while (System.nanoTime() < until) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        sink = x;
        return x;
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("loop")) {
            Thread worker = new Thread(() -> {
                for (long pairs = 1; ; pairs++) {
                    work(1);
                    work(3);
                    if (pairs % 10 == 0) {
                        System.out.print("pairs=");
                        System.out.println(pairs);
                    }
                }
            });
            worker.setDaemon(true);
            worker.start();
            System.out.println("ready");
            BufferedReader input = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = input.readLine()) != null && !line.equals("stop")) {
            }
            return;
        }
        for (int round = 0; round < 5; round++) {
            for (int n : new int[] {1, 5, 20}) {
                work(n);
            }
        }
        System.out.println("done");
    }
}
