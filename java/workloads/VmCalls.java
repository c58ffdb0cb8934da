import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/** A thread that spends its CPU in the VM's code called from Java: allocating arrays too large
 * for a thread-local buffer, which compiled code (through runtime stubs) and the interpreter
 * hand to the VM, where the memory is found and zeroed. The argument is how many seconds of the
 * thread's own CPU time to run. */
public class VmCalls {
    static volatile long sink;

    static long allocate(int length) {
        long[] array = new long[length];
        return array.length;
    }

    public static void main(String[] args) {
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long budget = (long) (Double.parseDouble(args[0]) * 1e9);
        long start = cpu.getCurrentThreadCpuTime();
        long total = 0;
        int round = 0;
        while (cpu.getCurrentThreadCpuTime() - start < budget) {
            for (int i = 0; i < 64; i++) {
                total += allocate(32_768 + (round++ & 1023));
            }
        }
        sink = total;
        System.out.println("allocated " + total);
    }
}
