/**
 * Ground truth for tracing: work() is called exactly CALLS times; EXCEPTIONS times an
 * IllegalStateException is thrown in thrower(0), passes through thrower(1) and thrower(2), and
 * is caught in catcher(). With EXTRAS given, two threads contend for one lock, one waits on it
 * with a 200 ms timeout and then holds it for 300 ms while the main thread is blocked on it
 * (the main thread tries once the holder says it holds the lock, however late the holder ran),
 * and System.gc() runs once.
 *
 * Usage: java Calls CALLS EXCEPTIONS [EXTRAS]
 */
public class Calls {
    static long total;
    static final Object LOCK = new Object();
    static volatile boolean holding;

    static long work(int i) {
        total += i;
        return total;
    }

    static void thrower(int depth) {
        if (depth == 0) {
            throw new IllegalStateException("thrown on purpose");
        }
        thrower(depth - 1);
    }

    static void catcher() {
        try {
            thrower(2);
        } catch (IllegalStateException expected) {
            total++;
        }
    }

    static void contend() throws InterruptedException {
        Thread holder = new Thread(() -> {
            synchronized (LOCK) {
                try {
                    LOCK.wait(200);
                    holding = true;
                    Thread.sleep(300);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }, "holder");
        holder.start();
        while (!holding) {
            Thread.sleep(1);
        }
        synchronized (LOCK) {
            total++;
        }
        holder.join();
    }

    public static void main(String[] args) throws Exception {
        int calls = Integer.parseInt(args[0]);
        int exceptions = Integer.parseInt(args[1]);
        for (int i = 0; i < calls; i++) {
            work(i);
        }
        for (int i = 0; i < exceptions; i++) {
            catcher();
        }
        if (args.length > 2) {
            contend();
            System.gc();
            Thread.sleep(100);
        }
        System.out.println("calls done " + total);
    }
}
