/**
 * A call-heavy benchmark workload: THREADS threads each call step(x) in a loop for SECONDS after
 * WARMUP seconds; step calls mix twice, so an operation is three calls of methods that do
 * almost nothing. Prints the operations done while measuring ("ops=N").
 *
 * Usage: java CallRate THREADS WARMUP SECONDS
 */
import java.util.concurrent.atomic.AtomicLong;

public class CallRate {
    static volatile long sink;

    static int mix(int x) {
        x *= 0x9E3779B9;
        return x ^ (x >>> 16);
    }

    static int step(int x) {
        return mix(x) ^ mix(x + 1);
    }

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        double warmup = Double.parseDouble(args[1]);
        double seconds = Double.parseDouble(args[2]);
        long start = System.nanoTime();
        long measureFrom = start + (long) (warmup * 1e9);
        long measureTo = measureFrom + (long) (seconds * 1e9);
        AtomicLong measured = new AtomicLong();
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int id = t;
            workers[t] = new Thread(() -> {
                int x = id;
                long ops = 0;
                long now;
                while ((now = System.nanoTime()) < measureTo) {
                    // A batch between clock reads, so that reading the clock is not the work.
                    for (int i = 0; i < 1000; i++) {
                        x = step(x);
                    }
                    if (now >= measureFrom) {
                        ops += 1000;
                    }
                }
                sink += x;
                measured.addAndGet(ops);
            }, "worker-" + t);
            workers[t].start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        System.out.println("ops=" + measured.get());
    }
}
