/**
 * Ground truth for streaming: calls work() ten times a millisecond for SECONDS seconds, then
 * prints "calls=N", the exact number of work() calls; a trace (cpu=times) must count as many.
 * Prints "ready" when it starts calling.
 *
 * Usage: java Ticker SECONDS
 */
public class Ticker {
    static long total;

    static long work(int i) {
        total += i;
        return total;
    }

    public static void main(String[] args) throws Exception {
        long until = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        long calls = 0;
        System.out.println("ready");
        System.out.flush();
        while (System.nanoTime() < until) {
            for (int i = 0; i < 10; i++) {
                work(i);
                calls++;
            }
            Thread.sleep(1);
        }
        System.out.println("calls=" + calls);
    }
}
