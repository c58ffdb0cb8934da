/**
 * Ground truth for allocation windows: for SECONDS, each round allocates one byte[1400] in
 * big() and one byte[600] in small(), kept briefly in a small ring so neither is optimized
 * away and both die young. With a 16-byte array header big() makes 1416 / (1416 + 616) =
 * 69.7 % of the bytes and half of the objects, in every window alike.
 *
 * Usage: java AllocSplit SECONDS
 */
public class AllocSplit {
    static final byte[][] ring = new byte[64][];
    static long checksum;

    static byte[] big(int round) {
        byte[] bytes = new byte[1400];
        bytes[round % 1400] = (byte) round;
        return bytes;
    }

    static byte[] small(int round) {
        byte[] bytes = new byte[600];
        bytes[round % 600] = (byte) round;
        return bytes;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long rounds = 0;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 10_000; i++) {
                ring[i & 63] = big(i);
                byte[] small = small(i);
                checksum += small[i % 600] + ring[0][0];
            }
            rounds += 10_000;
        }
        System.out.println("rounds=" + rounds + " checksum=" + checksum);
    }
}
