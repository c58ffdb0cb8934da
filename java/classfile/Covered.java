// Line coverage's ground truth for the class rewriter's test: RunCovered calls each method for
// x = -3..5, so each marked line runs a known number of times (the comment at its end says
// how many; a loop's header counts each test of its condition).
public class Covered {
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
