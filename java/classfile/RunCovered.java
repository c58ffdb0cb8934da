// Runs Covered's methods for x = -3..5 once its code counts its blocks, then prints the
// counters of its coverage slot (0), comma-separated. Not instrumented itself.
public class RunCovered {
    public static void main(String[] args) {
        long sink = 0;
        for (int x = -3; x <= 5; x++) {
            sink += Covered.classify(x);
            sink += Covered.name(x % 4).length();
            sink += Covered.guarded(x % 3);
        }
        long[] counters = openprof.CallHook.blocks[0];
        StringBuilder out = new StringBuilder("counters ");
        for (int i = 0; i < counters.length; i++) {
            out.append(i == 0 ? "" : ",").append(counters[i]);
        }
        System.out.println(out.append(" sink ").append(sink));
    }
}
