/**
 * Ground truth for threads: 8 busy threads run for the whole test while short-lived threads
 * start and end; each short-lived thread burns a fixed amount of its own CPU time, so every
 * thread is on the CPU long enough to be sampled.
 *
 * Usage: java ThreadChurn SECONDS CHURN_THREADS
 * Prints one line per thread: "thread NAME" for every thread it started.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.List;

public class ThreadChurn {
    static volatile long sink;

    static void burnCpu(long cpuNanos) {
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long end = cpu.getCurrentThreadCpuTime() + cpuNanos;
        long x = Thread.currentThread().getId();
        while (cpu.getCurrentThreadCpuTime() < end) {
            for (int i = 0; i < 100_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= x >>> 31;
            }
            sink += x;
        }
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        int churn = args.length > 1 ? Integer.parseInt(args[1]) : 10;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Thread worker = new Thread(() -> {
                while (System.nanoTime() < end) {
                    burnCpu(5_000_000L);
                }
            }, "busy-" + i);
            workers.add(worker);
            worker.start();
        }
        long gap = (long) (seconds * 1000 * 0.8 / Math.max(1, churn));
        for (int i = 0; i < churn; i++) {
            Thread shortLived = new Thread(() -> burnCpu(100_000_000L), "churn-" + i);
            shortLived.start();
            workers.add(shortLived);
            Thread.sleep(gap);
        }
        for (Thread worker : workers) {
            worker.join();
        }
        for (Thread worker : workers) {
            System.out.println("thread " + worker.getName());
        }
    }
}
