/**
 * Ground truth for heap=sites: two allocation sites in a known mix. keep() allocates
 * byte[1400] that stay reachable to the end; temp() allocates byte[600] that die at once.
 * With a 16-byte array header, keep() makes 1416 / (1416 + 616) = 69.7 % of the bytes, and
 * all of its objects are live at exit; none of temp()'s are.
 *
 * Usage: java AllocMix ROUNDS
 */
public class AllocMix {
    static byte[][] kept;
    static long checksum;

    static byte[] keep(int size) {
        return new byte[size];
    }

    static byte[] temp(int size) {
        return new byte[size];
    }

    public static void main(String[] args) {
        int rounds = Integer.parseInt(args[0]);
        kept = new byte[rounds][];
        for (int i = 0; i < rounds; i++) {
            kept[i] = keep(1400);
            byte[] scratch = temp(600);
            scratch[i % 600] = (byte) i;
            checksum += scratch[i % 600];
        }
        System.out.print("kept ");
        System.out.println(kept.length);
    }
}
