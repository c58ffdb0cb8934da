/**
 * Ground truth for virtual threads off their carriers (JDK 21 and later): THREADS virtual
 * threads, half of them sleeping in sleeper() (Thread.sleep) and half parked in parker()
 * (LockSupport.parkNanos), ROUNDS times MILLIS ms each. Neither runs on any OS thread while it
 * waits, so only the virtual thread mount events can account its time. Each thread measures
 * the wall time it spent in its waits; the totals are printed in nanoseconds, to compare with a
 * wall profile's sleeping time under sleeper() and parked time under parker(). On a JDK
 * without virtual threads it prints `virtual_threads=no` and its feature version, and does
 * nothing else.
 *
 * Usage: java VirtualWaits THREADS ROUNDS MILLIS
 * Built with --release 17: virtual threads are reached through reflection.
 */
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

public class VirtualWaits {
    static final AtomicLong sleptNanos = new AtomicLong();
    static final AtomicLong parkedNanos = new AtomicLong();

    static void sleeper(int rounds, int millis) throws InterruptedException {
        for (int k = 0; k < rounds; k++) {
            long start = System.nanoTime();
            Thread.sleep(millis);
            sleptNanos.addAndGet(System.nanoTime() - start);
        }
    }

    static void parker(int rounds, int millis) {
        for (int k = 0; k < rounds; k++) {
            long start = System.nanoTime();
            long end = start + millis * 1_000_000L;
            // A park may return early (spuriously): park again until the time is up.
            for (long now = start; now < end; now = System.nanoTime()) {
                LockSupport.parkNanos(end - now);
            }
            parkedNanos.addAndGet(System.nanoTime() - start);
        }
    }

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        int rounds = Integer.parseInt(args[1]);
        int millis = Integer.parseInt(args[2]);
        ExecutorService executor;
        try {
            executor = (ExecutorService) Executors.class
                .getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        } catch (NoSuchMethodException absent) {
            System.out.println("virtual_threads=no feature=" + Runtime.version().feature());
            return;
        }
        for (int t = 0; t < threads; t++) {
            boolean sleeps = t % 2 == 0;
            executor.submit(() -> {
                if (sleeps) {
                    sleeper(rounds, millis);
                } else {
                    parker(rounds, millis);
                }
                return null;
            });
        }
        executor.shutdown();
        executor.awaitTermination(1, TimeUnit.HOURS);
        System.out.println("virtual_threads=" + threads + " slept_ns=" + sleptNanos.get()
            + " parked_ns=" + parkedNanos.get());
    }
}
