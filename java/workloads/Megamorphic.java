/**
 * Ground truth for stack walking through dispatch stubs: a hot loop calls Shape.area() on an
 * array holding four implementations in a shuffled order, so the call site is megamorphic and
 * compiled code reaches each area() through an itable stub. The bodies are short (their loops
 * run 1, 2, 3 and 4 times: a 1:2:3:4 split of the work inside them), so a large share of the
 * CPU time is spent in the stub and the call sequence around it, exactly where samples are hard
 * to walk.
 *
 * Usage: java Megamorphic CPU_SECONDS
 * Runs until the main thread has used CPU_SECONDS of CPU time; prints the calls made per class.
 */
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Random;

public class Megamorphic {
    interface Shape {
        long area(long x);
    }

    static long mix(long x, int rounds) {
        for (int i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static final class Square implements Shape {
        public long area(long x) { return mix(x, 1); }
    }

    static final class Circle implements Shape {
        public long area(long x) { return mix(x, 2); }
    }

    static final class Triangle implements Shape {
        public long area(long x) { return mix(x, 3); }
    }

    static final class Hexagon implements Shape {
        public long area(long x) { return mix(x, 4); }
    }

    static volatile long sink;

    static long sweep(Shape[] shapes, long x) {
        for (Shape shape : shapes) {
            x += shape.area(x);
        }
        return x;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        Shape[] shapes = new Shape[4096];
        for (int i = 0; i < shapes.length; i++) {
            switch (i % 4) {
                case 0: shapes[i] = new Square(); break;
                case 1: shapes[i] = new Circle(); break;
                case 2: shapes[i] = new Triangle(); break;
                default: shapes[i] = new Hexagon(); break;
            }
        }
        Random random = new Random(42);
        for (int i = shapes.length - 1; i > 0; i--) {
            int j = random.nextInt(i + 1);
            Shape swap = shapes[i];
            shapes[i] = shapes[j];
            shapes[j] = swap;
        }
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long budget = (long) (seconds * 1e9);
        long start = cpu.getCurrentThreadCpuTime();
        long sweeps = 0;
        long x = 1;
        while (cpu.getCurrentThreadCpuTime() - start < budget) {
            for (int i = 0; i < 64; i++) {
                x = sweep(shapes, x);
            }
            sweeps += 64;
        }
        sink = x;
        System.out.printf("sweeps=%d calls_per_class=%d%n", sweeps, sweeps * shapes.length / 4);
    }
}
