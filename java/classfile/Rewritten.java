// Methods of every shape the class rewriter must keep working (loops, switches, exception
// handlers, monitors, uninitialised objects on the stack, every parameter type), called a known
// number of times; the test instruments them and checks the results and the hook's counts.
public class Rewritten {
    private final int base;

    Rewritten(int base) {
        this.base = base;
    }

    @Override
    public String toString() {
        return "R" + base;
    }

    static int loop(int n) {
        int sum = 0;
        for (int i = 0; i < n; i++) {
            sum += i;
        }
        return sum;
    }

    static double mix(long a, double b, int c, String s) {
        return a + b * c + s.length();
    }

    static float small(boolean z, char c, byte b, short s, float f) {
        return (z ? 1 : 0) + c + b + s + f;
    }

    String kind(int x) {
        switch (x) {
            case 0: return "zero";
            case 1: return "one";
            case 2: return "two";
            default: break;
        }
        switch (x * 1000) {
            case 5000: return "five";
            case 1000000: return "thousand";
            default: return "other" + base;
        }
    }

    static int fails(int x) {
        if (x > 0) {
            throw new IllegalStateException("x=" + x);
        }
        return x;
    }

    static int guarded(int x) {
        try {
            return fails(x);
        } catch (IllegalStateException e) {
            return -1;
        } finally {
            x++;
        }
    }

    synchronized int locked(int x) {
        synchronized (Rewritten.class) {
            if (x < 0) {
                return 0;
            }
        }
        return x + base;
    }

    static void early(int x) {
        if (x == 0) {
            return;
        }
        counter += x;
    }

    static String fresh(boolean flag) {
        return new StringBuilder(flag ? "yes" : "no").append(flag ? 1 : 0).toString();
    }

    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static int counter;

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) {
        for (int i = 0; i < 3; i++) {
            check(loop(10) == 45, "loop");
        }
        check(mix(2L, 1.5, 2, "abc") == 8.0, "mix");
        check(small(true, 'a', (byte) 2, (short) 3, 0.5f) == 103.5f, "small");
        Rewritten r = new Rewritten(7);
        String kinds = r.kind(0) + r.kind(2) + r.kind(5) + r.kind(1000) + r.kind(9);
        check(kinds.equals("zerotwofivethousandother7"), "kind " + kinds);
        int thrown = 0;
        for (int i = 1; i <= 4; i++) {
            try {
                fails(i);
            } catch (IllegalStateException expected) {
                thrown++;
            }
        }
        check(thrown == 4, "fails");
        check(guarded(1) == -1 && guarded(0) == 0, "guarded");
        check(r.locked(-1) == 0 && r.locked(1) == 8, "locked");
        early(0);
        early(5);
        check(counter == 5, "early");
        check(fresh(true).equals("yes1") && fresh(false).equals("no0"), "fresh");
        check(fib(10) == 55, "fib");
        System.out.println("results ok");
        System.out.println(openprof.MptHook.report());
    }
}
