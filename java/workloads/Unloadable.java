/**
 * A class that Unloads loads in a class loader of its own and lets go, so that it is unloaded.
 */
public class Unloadable {
    public static int runs;

    public void run() {
        runs++;
    }
}
