/**
 * Ground truth for streaming: calls work() ten times a millisecond for SECONDS seconds, then
 * prints "calls=N", the exact number of work() calls; a trace (cpu=times) must count as many.
 * Prints "ready" when it starts calling, and "progress=N" after every thousandth call (N the
 * calls so far), for tests that wait until so many calls were made.
 *
 * Usage: java Ticker SECONDS
 * With "-" for SECONDS it calls until a line comes on its standard input (10 minutes at most),
 * for tests that end it when they have seen what they wait for.
 */
public class Ticker {
    static long total;

    static long work(int i) {
        total += i;
        return total;
    }

    public static void main(String[] args) throws Exception {
        boolean untilTold = args[0].equals("-");
        double seconds = untilTold ? 600 : Double.parseDouble(args[0]);
        long until = System.nanoTime() + (long) (seconds * 1e9);
        long calls = 0;
        System.out.println("ready");
        System.out.flush();
        while (System.nanoTime() < until && !(untilTold && System.in.available() > 0)) {
            for (int i = 0; i < 10; i++) {
                work(i);
                calls++;
            }
            if (calls % 1000 == 0) {
                System.out.print("progress=");
                System.out.println(calls);
            }
            Thread.sleep(1);
        }
        System.out.println("calls=" + calls);
    }
}
