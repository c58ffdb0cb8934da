/**
 * Ground truth for native frames in CPU samples: the main thread compresses random bytes with
 * java.util.zip.Deflater in a loop, so nearly all of its CPU time is spent in zlib's native code
 * under the JNI method Deflater.deflateBytesBytes.
 *
 * Usage: java NativeDeflate CPU_SECONDS
 * Runs until the main thread has used CPU_SECONDS of CPU time; prints the bytes compressed, the
 * inputs (1 MiB each) compressed and the CPU time that took.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Random;
import java.util.zip.Deflater;

public class NativeDeflate {
    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 5;
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        byte[] input = new byte[1 << 20];
        new Random(42).nextBytes(input);
        // Random bytes with a small alphabet: compressible, so deflate searches for matches.
        for (int i = 0; i < input.length; i++) {
            input[i] = (byte) ('a' + (input[i] & 7));
        }
        byte[] output = new byte[input.length * 2];
        long budget = (long) (seconds * 1e9);
        long start = cpu.getCurrentThreadCpuTime();
        long compressed = 0;
        long inputs = 0;
        Deflater deflater = new Deflater(Deflater.BEST_COMPRESSION);
        while (cpu.getCurrentThreadCpuTime() - start < budget) {
            deflater.reset();
            deflater.setInput(input);
            deflater.finish();
            while (!deflater.finished()) {
                compressed += deflater.deflate(output);
            }
            inputs++;
        }
        long used = cpu.getCurrentThreadCpuTime() - start;
        deflater.end();
        System.out.println("compressed=" + compressed + " inputs=" + inputs + " cpu_ns=" + used);
    }
}
