/**
 * Ground truth for calls that never finish: a daemon thread enters wait(7) and blocks there for
 * good, while main calls wait(0) three times (each returns at once), then exits. A profile
 * written at exit has three finished calls of wait and one unfinished.
 */
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.LockSupport;

public class MptUnfinished {
    static final CountDownLatch ENTERED = new CountDownLatch(1);

    static void wait(int seconds) {
        if (seconds == 0) {
            return;
        }
        ENTERED.countDown();
        while (true) {
            LockSupport.park();
        }
    }

    public static void main(String[] args) throws Exception {
        Thread stuck = new Thread(() -> wait(7));
        stuck.setDaemon(true);
        stuck.start();
        ENTERED.await();
        for (int call = 0; call < 3; call++) {
            wait(0);
        }
        System.out.println("done");
    }
}
