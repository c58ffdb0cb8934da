/**
 * An allocation-heavy workload for the allocation-sampling benchmark: for SECONDS it builds
 * and drops short-lived objects (small arrays, strings, boxed lists), then prints
 * "ops=N cpu_ns=T" (T: this thread's CPU time).
 *
 * Usage: java AllocChurn SECONDS
 */
public class AllocChurn {
    static long sink;

    public static void main(String[] args) {
        long seconds = Long.parseLong(args[0]);
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        long ops = 0;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                int[] numbers = new int[8 + (i & 15)];
                numbers[i & 7] = i;
                String text = Integer.toString(i);
                java.util.ArrayList<Integer> list = new java.util.ArrayList<>(4);
                list.add(i);
                sink += numbers[i & 7] + text.length() + list.size();
            }
            ops += 1000;
        }
        long cpu = java.lang.management.ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
        System.out.println("ops=" + ops + " cpu_ns=" + cpu);
    }
}
