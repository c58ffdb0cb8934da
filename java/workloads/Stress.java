/**
 * Tries to make a profiler crash or hang the JVM: deep recursion, heavy garbage and GC, classes
 * defined in throw-away class loaders (so they unload while their frames may sit in samples),
 * exceptions, and threads coming and going. Prints "ready" once its threads run and "stress
 * done" when it finishes cleanly.
 *
 * Usage: java Stress SECONDS
 */
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.net.URL;
import java.net.URLClassLoader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

public class Stress {
    static volatile long sink;

    static long recurse(int depth) {
        if (depth == 0) {
            long x = 0;
            for (int i = 0; i < 2_000; i++) {
                x += i * 31L;
            }
            return x;
        }
        return recurse(depth - 1) + depth;
    }

    static void garbage() {
        List<byte[]> keep = new ArrayList<>();
        for (int i = 0; i < 2_000; i++) {
            keep.add(new byte[1024 + (i % 64) * 128]);
            if (keep.size() > 200) {
                keep.clear();
            }
        }
        sink += keep.size();
    }

    @SuppressWarnings("unchecked")
    static void unloadableClasses() throws Exception {
        ClassLoader loader = new URLClassLoader(new URL[0], Stress.class.getClassLoader());
        InvocationHandler handler = (proxy, method, args) -> 42L;
        Callable<Long> callable = (Callable<Long>) Proxy.newProxyInstance(
                loader, new Class<?>[] {Callable.class}, handler);
        sink += callable.call();
    }

    static void exceptions() {
        for (int i = 0; i < 100; i++) {
            try {
                throw new IllegalStateException("stress " + i);
            } catch (IllegalStateException expected) {
                sink += expected.getMessage().length();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            int depth = 500 + i * 1000;
            threads.add(new Thread(() -> {
                while (System.nanoTime() < end) {
                    sink += recurse(depth);
                }
            }, "deep-" + i));
        }
        threads.add(new Thread(() -> {
            while (System.nanoTime() < end) {
                garbage();
                exceptions();
            }
        }, "garbage"));
        threads.add(new Thread(() -> {
            try {
                while (System.nanoTime() < end) {
                    unloadableClasses();
                    System.gc();
                }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, "classes"));
        for (Thread thread : threads) {
            thread.start();
        }
        // Started: a test may now ask for data dumps (before, the agent is not set up yet).
        System.out.println("ready");
        int generation = 0;
        while (System.nanoTime() < end) {
            Thread shortLived = new Thread(() -> sink += recurse(50), "short-" + generation++);
            shortLived.start();
            shortLived.join();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        System.out.println("stress done");
    }
}
