/**
 * Benchmark workload for method parameter tracing.
 *
 * Usage: java MptBench calls N       calls plain(int) N times, then chained(Key) N times, and
 *                                    prints the nanoseconds each loop took (plain_ns=, chained_ns=)
 *        java MptBench compute SECS  runs an untraced hash loop for SECS seconds of wall time and
 *                                    prints how many rounds it did (rounds=)
 * Specifications the benchmark uses: "MptBench.plain(int) 1" (no modifier) and
 * "MptBench.chained(Key) 1 field:name" (a modifier chain ending in a String).
 */
public class MptBench {
    static volatile long sink;

    static final class Key {
        final String name;

        Key(String name) {
            this.name = name;
        }
    }

    static long plain(int value) {
        return value * 31L;
    }

    static long chained(Key key) {
        return key.name.length();
    }

    static long round(long seed) {
        long x = seed;
        for (int i = 0; i < 1000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) {
        if (args[0].equals("calls")) {
            int calls = Integer.parseInt(args[1]);
            long total = 0;
            long start = System.nanoTime();
            for (int i = 0; i < calls; i++) {
                total += plain(i & 1023);
            }
            long plain = System.nanoTime() - start;
            Key[] keys = {new Key("alpha"), new Key("beta"), new Key("gamma")};
            start = System.nanoTime();
            for (int i = 0; i < calls; i++) {
                total += chained(keys[i % 3]);
            }
            long chained = System.nanoTime() - start;
            sink = total;
            System.out.println("plain_ns=" + plain);
            System.out.println("chained_ns=" + chained);
        } else {
            long until = System.nanoTime() + (long) (Double.parseDouble(args[1]) * 1e9);
            long rounds = 0;
            long x = 1;
            while (System.nanoTime() < until) {
                x = round(x);
                rounds++;
            }
            sink = x;
            System.out.println("rounds=" + rounds);
        }
    }
}
