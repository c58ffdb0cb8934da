/**
 * Ground truth for the first calls of traced methods: THREADS threads each call every one of
 * METHODS methods once, with the thread's number as the argument, meeting at a barrier before
 * each method. So each method's first calls come on several threads at the same instant, and a tracer of
 * work0(int) .. work15(int)'s parameter must record, for every method, each thread's number once.
 *
 * Usage: java MptFirstCalls
 * Prints "done" at the end.
 */
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

public class MptFirstCalls {
    static final int THREADS = 4;
    static final int METHODS = 16;
    static volatile long sink;

    static int work0(int v) { return v; }
    static int work1(int v) { return v + 1; }
    static int work2(int v) { return v + 2; }
    static int work3(int v) { return v + 3; }
    static int work4(int v) { return v + 4; }
    static int work5(int v) { return v + 5; }
    static int work6(int v) { return v + 6; }
    static int work7(int v) { return v + 7; }
    static int work8(int v) { return v + 8; }
    static int work9(int v) { return v + 9; }
    static int work10(int v) { return v + 10; }
    static int work11(int v) { return v + 11; }
    static int work12(int v) { return v + 12; }
    static int work13(int v) { return v + 13; }
    static int work14(int v) { return v + 14; }
    static int work15(int v) { return v + 15; }

    static int call(int method, int v) {
        switch (method) {
            case 0: return work0(v);
            case 1: return work1(v);
            case 2: return work2(v);
            case 3: return work3(v);
            case 4: return work4(v);
            case 5: return work5(v);
            case 6: return work6(v);
            case 7: return work7(v);
            case 8: return work8(v);
            case 9: return work9(v);
            case 10: return work10(v);
            case 11: return work11(v);
            case 12: return work12(v);
            case 13: return work13(v);
            case 14: return work14(v);
            default: return work15(v);
        }
    }

    /** Threads that reached the barrier before each method's calls. */
    static final AtomicInteger arrived = new AtomicInteger();

    public static void main(String[] args) throws Exception {
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < THREADS; t++) {
            final int number = t;
            Thread thread = new Thread(() -> {
                for (int method = 0; method < METHODS; method++) {
                    // A spinning barrier: the threads leave it within nanoseconds of each
                    // other, so the method's first calls overlap.
                    arrived.incrementAndGet();
                    while (arrived.get() < (method + 1) * THREADS) {
                        Thread.onSpinWait();
                    }
                    sink += call(method, number);
                }
            }, "caller-" + t);
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        System.out.println("done");
    }
}
