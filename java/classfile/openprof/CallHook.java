// A Java stand-in for the agent's call hook, for the class rewriter's tests: counts the entries
// and exits instrumented code reports, by site, and how deep the calls are open.
package openprof;

import java.util.Map;
import java.util.TreeMap;

public final class CallHook {
    /** Coverage counters by class slot, as the agent keeps them. */
    public static long[][] blocks = {
        new long[256],
    };
    private static final Map<String, Integer> COUNTS = new TreeMap<>();
    private static int depth;

    private static void count(String what) {
        COUNTS.merge(what, 1, Integer::sum);
    }

    /** One run of a block (the agent's hook adds atomically; the tests run one thread). */
    public static void count(long[] counters, int block) {
        counters[block]++;
    }

    public static void enter(int site) {
        count("enter " + site);
        depth++;
    }

    public static void enterThis(int site, Object self) {
        count("enter " + site);
        count("this " + site + " " + self.getClass().getName());
        depth++;
    }

    public static void called(int callSite) {
        count("called " + callSite);
    }

    public static void returned(int callSite) {
        count("returned " + callSite);
    }

    public static void caught(int site) {
        count("caught " + site);
    }

    public static void initialized(int site) {
        count("initialized " + site);
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
