// A Java stand-in for the agent's native hook, for the class rewriter's tests: counts the calls
// instrumented code makes, and the values passed, by site.
package openprof;

import java.util.Map;
import java.util.TreeMap;

public final class MptHook {
    private static final Map<String, Integer> COUNTS = new TreeMap<>();
    private static int depth;

    private static void count(String what) {
        COUNTS.merge(what, 1, Integer::sum);
    }

    public static void begin(int site, Object self) {
        count("begin " + site + (self == null ? " static" : " " + self.getClass().getName()));
        depth++;
    }

    public static void arg(int index, boolean value) { count("arg " + index + " boolean " + value); }
    public static void arg(int index, byte value) { count("arg " + index + " byte " + value); }
    public static void arg(int index, char value) { count("arg " + index + " char " + value); }
    public static void arg(int index, short value) { count("arg " + index + " short " + value); }
    public static void arg(int index, int value) { count("arg " + index + " int " + value); }
    public static void arg(int index, long value) { count("arg " + index + " long " + value); }
    public static void arg(int index, float value) { count("arg " + index + " float " + value); }
    public static void arg(int index, double value) { count("arg " + index + " double " + value); }
    public static void arg(int index, Object value) { count("arg " + index + " object " + value); }

    public static void enter() {
        count("enter");
    }

    public static void exit(int site) {
        count("exit " + site);
        depth--;
    }

    public static void exitThrown(int site) {
        count("thrown " + site);
        depth--;
    }

    public static String report() {
        StringBuilder out = new StringBuilder("depth " + depth + "\n");
        for (Map.Entry<String, Integer> entry : COUNTS.entrySet()) {
            out.append(entry.getKey()).append(" = ").append(entry.getValue()).append('\n');
        }
        return out.toString();
    }
}
