/**
 * A CPU-bound benchmark workload: THREADS threads hash, sort and look up data for SECONDS
 * after WARMUP seconds, then print the operations done while measuring ("ops=N") and the CPU
 * time the whole JVM used meanwhile ("cpu_ns=N": every thread, the profiler's own included).
 *
 * Usage: java Throughput THREADS WARMUP SECONDS
 */
import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

public class Throughput {
    static volatile long sink;

    static long operation(int seed, Map<String, Integer> table, int[] scratch) {
        long hash = 1125899906842597L;
        for (int i = 0; i < scratch.length; i++) {
            scratch[i] = (seed * 1103515245 + i * 12345) ^ (seed >>> 3);
            hash = 31 * hash + scratch[i];
        }
        Arrays.sort(scratch);
        Integer found = table.get("key-" + (seed & 1023));
        return hash + scratch[scratch.length / 2] + (found == null ? 0 : found);
    }

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        double warmup = Double.parseDouble(args[1]);
        double seconds = Double.parseDouble(args[2]);
        Map<String, Integer> table = new HashMap<>();
        for (int i = 0; i < 1024; i++) {
            table.put("key-" + i, i);
        }
        long start = System.nanoTime();
        long measureFrom = start + (long) (warmup * 1e9);
        long measureTo = measureFrom + (long) (seconds * 1e9);
        AtomicLong measured = new AtomicLong();
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int id = t;
            workers[t] = new Thread(() -> {
                int[] scratch = new int[256];
                long ops = 0;
                int seed = id;
                long now;
                while ((now = System.nanoTime()) < measureTo) {
                    sink += operation(seed++, table, scratch);
                    if (now >= measureFrom) {
                        ops++;
                    }
                }
                measured.addAndGet(ops);
            }, "worker-" + t);
            workers[t].start();
        }
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        Thread.sleep(Math.max(0, (measureFrom - System.nanoTime()) / 1_000_000));
        long cpuFrom = os.getProcessCpuTime();
        for (Thread worker : workers) {
            worker.join();
        }
        long cpuTo = os.getProcessCpuTime();
        System.out.println("ops=" + measured.get() + " cpu_ns=" + (cpuTo - cpuFrom));
    }
}
