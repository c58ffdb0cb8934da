/**
 * Ground truth for profiling a running JVM from outside (openprof profile): a service that
 * runs until its standard input closes. Its thread "worker" repeats, forever, 30 ms of work
 * then 30 ms of sleep; the work is heavy() and light() with the same loop body, heavy called
 * for three times the trips of light (a number that varies from call to call). So a CPU
 * profile of any period gives heavy 75 % and light 25 % of the samples in the two, and a
 * wall-clock profile of "worker" gives it running half of the time and sleeping the other half. Before each sleep, buffer() allocates 64 KiB: by
 * far the most bytes the program allocates.
 *
 * Prints "ready" once the worker runs. Each line read on standard input is answered with the
 * worker's measured shares so far (running and sleeping, by System.nanoTime) and the time it
 * spent in heavy() and in light() so far; it exits when standard input closes.
 *
 * Usage: java Service [WORK_MS SLEEP_MS]
 * (30 and 30 unless given: a lighter duty cycle, for many JVMs on one machine).
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class Service {
    static long WORK_NS = 30_000_000, SLEEP_NS = 30_000_000;
    static volatile long sink;
    static long random = 0x9E3779B97F4A7C15L;
    static volatile long runningNs, sleepingNs;
    // The time inside heavy() and light() so far: the split a profile must show, measured (a
    // method the JIT has compiled less well than the other for a while shifts it from 3:1).
    static volatile long heavyNs, lightNs;
    static volatile byte[] buffer;

    // heavy and light have the same loop body; only the trip count differs (3:1).
    static long heavy(long seed, int trips) {
        long x = seed;
        for (int i = 0; i < trips * 3; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long light(long seed, int trips) {
        long x = seed;
        for (int i = 0; i < trips; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static void work() {
        long start = System.nanoTime();
        long until = start + WORK_NS;
        while (System.nanoTime() < until) {
            // 5,000 to 15,000 trips, alike for both: the loop has no period for a sampling
            // clock to fall in step with.
            random ^= random << 13;
            random ^= random >>> 7;
            random ^= random << 17;
            int trips = 5_000 + (int) Math.floorMod(random, 10_000L);
            long before = System.nanoTime();
            sink += heavy(sink, trips);
            long between = System.nanoTime();
            sink += light(sink, trips);
            long after = System.nanoTime();
            heavyNs += between - before;
            lightNs += after - between;
        }
        runningNs += System.nanoTime() - start;
    }

    static void buffer() {
        buffer = new byte[64 * 1024];
    }

    static void rest() {
        buffer();
        long start = System.nanoTime();
        long until = start + SLEEP_NS;
        long left;
        while ((left = until - System.nanoTime()) > 0) {
            try {
                Thread.sleep(left / 1_000_000, (int) (left % 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
        }
        sleepingNs += System.nanoTime() - start;
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 2) {
            WORK_NS = Long.parseLong(args[0]) * 1_000_000;
            SLEEP_NS = Long.parseLong(args[1]) * 1_000_000;
        }
        Thread worker = new Thread(() -> {
            while (true) {
                work();
                rest();
            }
        }, "worker");
        worker.setDaemon(true);
        worker.start();
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        while (in.readLine() != null) {
            long running = runningNs, sleeping = sleepingNs;
            double total = running + sleeping;
            System.out.printf("running=%.1f sleeping=%.1f heavy_ns=%d light_ns=%d%n",
                    100 * running / total, 100 * sleeping / total, heavyNs, lightNs);
            System.out.flush();
        }
    }
}
