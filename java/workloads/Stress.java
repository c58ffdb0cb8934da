/**
 * Tries to make a profiler crash or hang the JVM: deep recursion, garbage at changing rates (from
 * a trickle to humongous arrays) and GC, classes defined in throw-away class loaders (so they
 * unload while their frames may sit in samples), exceptions, and threads coming and going.
 * With "redefine=N", the JVM attaches a Java agent to itself (run it with
 * -Djdk.attach.allowAttachSelf=true) and redefines the class of the deep recursion every 20 ms,
 * at least N times (however long a busy machine makes each take), while its frames are on the
 * stacks: each redefinition throws away the compiled code of
 * the old methods, so frames deoptimise by the thousand (a deoptimisation storm) and samples
 * meet methods that are obsolete. With "starts=N", at least N short threads are started in
 * all. Prints "ready" once its threads run, what it did, and "stress done" when it finishes
 * cleanly.
 *
 * Usage: java Stress SECONDS [redefine=N] [starts=N]
 */
import java.io.InputStream;
import java.lang.instrument.ClassDefinition;
import java.lang.instrument.Instrumentation;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.jar.Attributes;
import java.util.jar.JarOutputStream;
import java.util.jar.Manifest;

public class Stress {
    static volatile long sink;
    static volatile Instrumentation instrumentation;

    /** The deep recursion, in a class of its own so that it can be redefined under the frames. */
    static class Deep {
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
    }

    static long recurse(int depth) {
        return Deep.recurse(depth);
    }

    /** Where the attached Java agent hands over the JVM's Instrumentation. */
    public static void agentmain(String arguments, Instrumentation given) {
        instrumentation = given;
    }

    /** Attaches a Java agent to this JVM: a jar of just a manifest naming this class. */
    static Instrumentation attachToSelf() throws Exception {
        Path jar = Paths.get("stress-agent.jar").toAbsolutePath();
        Manifest manifest = new Manifest();
        Attributes main = manifest.getMainAttributes();
        main.put(Attributes.Name.MANIFEST_VERSION, "1.0");
        main.put(new Attributes.Name("Agent-Class"), Stress.class.getName());
        main.put(new Attributes.Name("Can-Redefine-Classes"), "true");
        try (JarOutputStream out = new JarOutputStream(Files.newOutputStream(jar), manifest)) {
            // The class itself is on the class path already.
        }
        com.sun.tools.attach.VirtualMachine vm = com.sun.tools.attach.VirtualMachine.attach(
                String.valueOf(ProcessHandle.current().pid()));
        try {
            vm.loadAgent(jar.toString());
        } finally {
            vm.detach();
        }
        if (instrumentation == null) {
            throw new IllegalStateException("the Java agent did not start");
        }
        return instrumentation;
    }

    static byte[] classBytes(Class<?> type) throws Exception {
        String name = type.getName().substring(type.getName().lastIndexOf('.') + 1) + ".class";
        try (InputStream in = type.getResourceAsStream(name)) {
            return in.readAllBytes();
        }
    }

    /**
     * Garbage at a rate that changes every round: full speed, a trickle, and humongous arrays
     * (larger than half a G1 region), so that the collector runs at every pace.
     */
    static void garbage(int round) {
        List<byte[]> keep = new ArrayList<>();
        switch (round % 3) {
            case 0:
                for (int i = 0; i < 2_000; i++) {
                    keep.add(new byte[1024 + (i % 64) * 128]);
                    if (keep.size() > 200) {
                        keep.clear();
                    }
                }
                break;
            case 1:
                for (int i = 0; i < 50; i++) {
                    keep.add(new byte[256]);
                    LockSupport.parkNanos(100_000);
                }
                break;
            default:
                for (int i = 0; i < 8; i++) {
                    keep.add(new byte[4 << 20]);
                    if (keep.size() > 2) {
                        keep.clear();
                    }
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
        boolean redefine = false;
        long leastRedefinitions = 0;
        long leastStarts = 0;
        for (int i = 1; i < args.length; i++) {
            if (args[i].startsWith("redefine=")) {
                redefine = true;
                leastRedefinitions = Long.parseLong(args[i].substring("redefine=".length()));
            } else if (args[i].startsWith("starts=")) {
                leastStarts = Long.parseLong(args[i].substring("starts=".length()));
            } else {
                throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        long end = System.nanoTime() + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        AtomicLong redefinitions = new AtomicLong();
        if (redefine) {
            Instrumentation instrumentation = attachToSelf();
            byte[] deep = classBytes(Deep.class);
            long least = leastRedefinitions;
            threads.add(new Thread(() -> {
                try {
                    while (System.nanoTime() < end || redefinitions.get() < least) {
                        instrumentation.redefineClasses(new ClassDefinition(Deep.class, deep));
                        redefinitions.incrementAndGet();
                        Thread.sleep(20);
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, "redefine"));
        }
        for (int i = 0; i < 3; i++) {
            int depth = 500 + i * 1000;
            threads.add(new Thread(() -> {
                while (System.nanoTime() < end) {
                    sink += recurse(depth);
                }
            }, "deep-" + i));
        }
        threads.add(new Thread(() -> {
            int round = 0;
            while (System.nanoTime() < end) {
                garbage(round++);
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
        // Short threads, eight at a time, until the time is up and at least leastStarts began.
        long starts = 0;
        while (System.nanoTime() < end || starts < leastStarts) {
            Thread[] batch = new Thread[8];
            for (int i = 0; i < batch.length; i++) {
                batch[i] = new Thread(() -> sink += recurse(50), "short-" + starts++);
                batch[i].start();
            }
            for (Thread shortLived : batch) {
                shortLived.join();
            }
        }
        for (Thread thread : threads) {
            thread.join();
        }
        System.out.println("threads started: " + starts);
        if (redefine) {
            System.out.println("redefinitions: " + redefinitions.get());
        }
        System.out.println("stress done");
    }
}
