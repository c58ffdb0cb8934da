/**
 * Ground truth for the trace's allocation, free and unload elements: allocates N
 * Unloads.Payload objects (held in an array, then let go), then loads Unloadable in a class
 * loader of its own (it finds the class in the same directory), calls its run() once, lets the
 * loader go and collects until the class is unloaded (a weak reference to it clears). Prints
 * "payloads=N unloaded=true" when it was.
 *
 * Usage: java Unloads N
 */
import java.lang.ref.WeakReference;
import java.net.URL;
import java.net.URLClassLoader;

public class Unloads {
    static final class Payload {
        final int value;

        Payload(int value) {
            this.value = value;
        }
    }

    static long sum;

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        Payload[] kept = new Payload[n];
        for (int i = 0; i < n; i++) {
            kept[i] = new Payload(i);
        }
        for (Payload payload : kept) {
            sum += payload.value;
        }
        kept = null;
        WeakReference<Class<?>> unloadable = load();
        for (int i = 0; i < 100 && unloadable.get() != null; i++) {
            System.gc();
            Thread.sleep(20);
        }
        // Once more, for the payloads' and the class's frees to be posted.
        System.gc();
        System.out.println("payloads=" + n + " unloaded=" + (unloadable.get() == null));
    }

    static WeakReference<Class<?>> load() throws Exception {
        URL classes = Unloads.class.getProtectionDomain().getCodeSource().getLocation();
        // No parent but the bootstrap loader: this loader defines Unloadable itself.
        try (URLClassLoader loader = new URLClassLoader(new URL[] {classes}, null)) {
            Class<?> type = loader.loadClass("Unloadable");
            type.getMethod("run").invoke(type.getConstructor().newInstance());
            return new WeakReference<>(type);
        }
    }
}
