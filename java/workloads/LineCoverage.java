/**
 * Ground truth for line coverage: main calls Counted's methods for x = -3..5, so each marked
 * line of Counted runs a known number of times (the comment at its end says how many; a loop's
 * header counts each test of its condition).
 *
 * Usage: java LineCoverage
 */
public class LineCoverage {
    static class Counted {
        static int classify(int x) {
            if (x < 0) { // runs 9
                return -1; // runs 3
            }
            int sum = 0; // runs 6
            for (int i = 0; i < x; i++) { // runs 21
                sum += i; // runs 15
            }
            return sum; // runs 6
        }

        static String name(int x) {
            switch (x) { // runs 9
                case 1:
                    return "one"; // runs 2
                case 2:
                    return "two"; // runs 1
                default:
                    return "many"; // runs 6
            }
        }

        static int guarded(int x) {
            try {
                if (x == 0) { // runs 9
                    throw new IllegalStateException("zero"); // runs 3
                }
                return x; // runs 6
            } catch (IllegalStateException expected) {
                return -1; // runs 3
            }
        }
    }

    static class Wrapped {
        // An object under construction across a branch, its `new` at the start of a block:
        // the stack map names it by the `new`'s offset, which the block's counter moves.
        static int wrapped(int x) {
            if (x > 3) { // runs 9
                x = 3; // runs 2
            }
            return new StringBuilder(x > 0 ? "pos" : "neg").length(); // runs 9
        }
    }

    public static void main(String[] args) {
        long sink = 0;
        for (int x = -3; x <= 5; x++) {
            sink += Counted.classify(x);
            sink += Counted.name(x % 4).length();
            sink += Counted.guarded(x % 3);
            sink += Wrapped.wrapped(x);
        }
        System.out.println("sink=" + sink);
    }
}
