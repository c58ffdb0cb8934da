/**
 * Ground truth for tracing calls by instrumentation. For i in 0..N: new CallTree(i) (N
 * constructions), its outer(i) (N calls) calls middle(i) (N calls), which calls leaf() twice,
 * and outer calls leaf() once more (3N leaf calls: 2N under middle, N under outer directly);
 * fails(i) is called N times and throws an IllegalStateException when i is a multiple of 10
 * (caught by main); a java.util.zip.Adler32 (a JDK class, traced when the filters name it)
 * gets update(int) N times. Then Integer.parseInt of a word, which throws (caught by main).
 * Then new Sub(x) for the 10 values x = -5..4: Sub's constructor calls Base's through
 * super(x), which throws for the 5 negative x (those leave Sub's constructor through its
 * super(...) call).
 *
 * With "wait" as a second argument it first prints "ready" and waits for a line on its standard
 * input (an agent is attached meanwhile); Sub, Base and Adler32 are first used after that line.
 *
 * Usage: java CallTree N [wait]
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class CallTree {
    static long sink;
    final int value;

    CallTree(int value) {
        this.value = value;
    }

    static int leaf(int i) {
        return i * 2 + 1;
    }

    static int middle(int i) {
        return leaf(i) + leaf(i + 1);
    }

    int outer(int i) {
        return middle(i) + leaf(value);
    }

    static int fails(int i) {
        if (i % 10 == 0) {
            throw new IllegalStateException("thrown on purpose");
        }
        return i;
    }

    static class Base {
        Base(int x) {
            if (x < 0) {
                throw new IllegalArgumentException("negative");
            }
        }
    }

    static class Sub extends Base {
        Sub(int x) {
            super(x);
        }
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        if (args.length > 1 && args[1].equals("wait")) {
            System.out.println("ready");
            System.out.flush();
            if (new BufferedReader(new InputStreamReader(System.in)).readLine() == null) {
                return;
            }
        }
        int thrown = 0;
        for (int i = 0; i < n; i++) {
            CallTree tree = new CallTree(i);
            sink += tree.outer(i);
            try {
                sink += fails(i);
            } catch (IllegalStateException expected) {
                thrown++;
            }
        }
        java.util.zip.Adler32 checksum = new java.util.zip.Adler32();
        for (int i = 0; i < n; i++) {
            checksum.update(i);
        }
        sink += checksum.getValue();
        // A JDK call that throws, caught here.
        int notNumbers = 0;
        try {
            sink += Integer.parseInt("not a number");
        } catch (NumberFormatException expected) {
            notNumbers++;
        }
        int failed = 0;
        for (int x = -5; x < 5; x++) {
            try {
                sink += new Sub(x).hashCode() & 1;
            } catch (IllegalArgumentException expected) {
                failed++;
            }
        }
        System.out.println("calls=" + n + " thrown=" + thrown + " failed_subs=" + failed
                + " not_numbers=" + notNumbers);
    }
}
