/**
 * The bundled demo: a small "report generator" with three visible costs, so a first profile has
 * something to say: counting primes (one method, the single hottest), sorting boxed longs
 * (spread over the JDK's TimSort and Long.compareTo) and formatting rows (spread over
 * java.util.Formatter and its regular expressions). countPrimes's limit cycles through three
 * values, so that method parameter tracing has a slow value to find.
 *
 * Usage: java Demo [SECONDS]
 */
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

public class Demo {
    static volatile long sink;

    static int countPrimes(int limit) {
        int count = 0;
        for (int n = 2; n < limit; n++) {
            boolean prime = true;
            for (int d = 2; (long) d * d <= n; d++) {
                if (n % d == 0) {
                    prime = false;
                    break;
                }
            }
            if (prime) {
                count++;
            }
        }
        return count;
    }

    static String formatRows(int rows) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < rows; i++) {
            out.append(String.format("%06d|%-12s|%10.3f%n", i, "item-" + (i * 7919 % 1000), i * 1.5));
        }
        return out.toString();
    }

    static long sortValues(int size, long seed) {
        List<Long> values = new ArrayList<>(size);
        for (int i = 0; i < size; i++) {
            seed = seed * 6364136223846793005L + 1442695040888963407L;
            values.add(seed >>> 16);
        }
        Collections.sort(values);
        return values.get(size / 2);
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 5;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        int reports = 0;
        while (System.nanoTime() < end) {
            // Three sizes of report: parameter tracing shows which limit makes the method slow.
            sink += countPrimes(20_000 + (reports % 3) * 40_000);
            sink += formatRows(2_000).length();
            sink += sortValues(20_000, reports);
            reports++;
        }
        System.out.println("Demo: generated " + reports + " reports");
    }
}
