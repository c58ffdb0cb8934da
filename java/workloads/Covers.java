/**
 * Ground truth for coverage under a filter that lets the JDK through (`filter=+Covers`, which
 * includes every class no pattern matches): tally runs 10,000 times, and each marked line runs
 * the number of times its comment says; the program prints its own tallies, "3334 / 6666 / 0".
 *
 * Usage: java Covers
 */
public class Covers {
    static int a, b, c;

    static void tally(int i) {
        if (i % 3 == 0) { // runs 10000
            a++; // runs 3334
        } else if (i >= 0) { // runs 6666
            b++; // runs 6666
        } else {
            c++; // runs 0
        }
    }

    public static void main(String[] args) {
        for (int i = 0; i < 10000; i++) {
            tally(i);
        }
        System.out.println(a + " / " + b + " / " + c);
    }
}
