/**
 * Ground truth for method parameter tracing's values and modifiers: HashMap.get with String keys
 * and "Special" keys (a second value for the key through cast: and field:), and methods whose
 * calls give each error value a modifier chain can end in (docs/mpt.md). Every call below is
 * made a known number of times with known arguments.
 */
import java.util.HashMap;

public class MptValues {
    public static void main(String[] args) {
        HashMap<Object, Integer> map = new HashMap<>();
        map.put("alpha", 1);
        Special special = new Special("the detail");
        map.put(special, 2);
        for (int time = 0; time < 3; time++) {
            map.get("alpha");
        }
        for (int time = 0; time < 2; time++) {
            map.get(special);
        }
        map.get("missing");

        Probe.lengthOf(new int[7]);
        Probe.lengthOf(null); // NullValue
        Probe.describe(null); // NullInCall
        Probe.describe(new Throwing()); // ExceptionInCall
        Probe.describe(new StringBuilder("built")); // a StringBuilder is traced as its contents
        Probe.first(new String[] {"a", "b"}); // array_element:5 -> InvalidIndex, -1 -> "b"
        Integer boxed = 42;
        Probe.keep(boxed); // no modifier: an Integer is not traced directly -> Unknown
        Probe.keep(boxed); // id: the same object, the same id
        Probe.keep("text");
        Probe.name("a name"); // length on a String can't apply: MPT Apply Error, EnableFailed
        Probe.name("nul\u0000 and \uD83D\uDE00"); // a NUL and a character beyond the BMP
        Probe.name("x".repeat(5000)); // cut at 1024 characters
        Probe.scaled(2.5, 'x', true, (byte) 7, (short) -3, 1L << 40, 1.5f);
        Probe.describe(new Recursive()); // its toString() calls describe: not traced meanwhile
        try {
            Probe.fail(3); // leaves by an exception: its exit is still reported
        } catch (IllegalArgumentException expected) {
        }
        System.out.println("done");
    }
}

/** A key with more to say than its toString(). */
class Special {
    final String detail;

    Special(String detail) {
        this.detail = detail;
    }

    @Override
    public String toString() {
        return "Special";
    }

    @Override
    public int hashCode() {
        return detail.hashCode();
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof Special && ((Special) other).detail.equals(detail);
    }
}

class Throwing {
    @Override
    public String toString() {
        throw new IllegalStateException("no text");
    }
}

class Recursive {
    @Override
    public String toString() {
        Probe.describe("inner");
        return "recursive";
    }
}

class Probe {
    static volatile Object sink;

    static int lengthOf(int[] values) {
        return values == null ? -1 : values.length;
    }

    static void describe(Object value) {
        sink = value;
    }

    static void first(String[] values) {
        sink = values;
    }

    static void keep(Object value) {
        sink = value;
    }

    static void name(String name) {
        sink = name;
    }

    static void fail(int code) {
        throw new IllegalArgumentException("code " + code);
    }

    static void scaled(double factor, char letter, boolean flag, byte small, short signed, long big, float ratio) {
        sink = factor;
    }
}
