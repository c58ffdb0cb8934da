import java.util.ArrayList;
import java.util.List;

/**
 * Ground truth for retained sizes: three structures whose retained bytes are known by
 * construction, kept reachable; prints "ready", then waits until its standard input closes.
 *
 * - RetainedShapes$Chain.head: a chain of LINKS RetainedShapes$Link, each with a byte[] of
 *   PAYLOAD bytes; link k retains the links after it and their payloads.
 * - RetainedShapes$Caches.first and .second: two RetainedShapes$Entry[] caches of ENTRIES
 *   entries each (an Entry holds a byte[] of DATA bytes) sharing SHARED of them: each cache
 *   retains only the entries it alone holds.
 * - RetainedShapes$Bus.listeners: an ArrayList of LISTENERS RetainedShapes$Listener, each with a
 *   byte[] of STATE bytes, registered and never removed: the leak, most of the heap.
 *
 * Usage: java RetainedShapes
 */
public class RetainedShapes {
    static final int LINKS = 1000;
    static final int PAYLOAD = 1000;
    static final int ENTRIES = 200;
    static final int SHARED = 50;
    static final int DATA = 500;
    static final int LISTENERS = 10000;
    static final int STATE = 4000;

    static final class Link {
        Link next;
        byte[] payload;
    }

    static final class Chain {
        static Link head;
    }

    static final class Entry {
        int key;
        byte[] data;
    }

    static final class Caches {
        static Entry[] first;
        static Entry[] second;
    }

    static final class Listener {
        final byte[] state = new byte[STATE];
        int events;
    }

    static final class Bus {
        static final List<Listener> listeners = new ArrayList<>();

        static void register(Listener listener) {
            listeners.add(listener);
        }
    }

    public static void main(String[] args) throws Exception {
        // Built in methods of their own: no local variable of main keeps a structure alive,
        // so the statics are the only paths to them.
        buildChain();
        buildCaches();
        buildBus();
        System.out.println("ready");
        System.out.flush();
        while (System.in.read() != -1) {
            // wait for the test to close stdin
        }
        System.out.println("kept " + Bus.listeners.size() + " " + Chain.head.payload.length);
    }

    static void buildChain() {
        Link head = null;
        for (int i = 0; i < LINKS; i++) {
            Link link = new Link();
            link.payload = new byte[PAYLOAD];
            link.next = head;
            head = link;
        }
        Chain.head = head;
    }

    static void buildCaches() {
        Caches.first = new Entry[ENTRIES];
        Caches.second = new Entry[ENTRIES];
        for (int i = 0; i < ENTRIES; i++) {
            Entry entry = new Entry();
            entry.key = i;
            entry.data = new byte[DATA];
            Caches.first[i] = entry;
        }
        // The first SHARED entries of the first cache are also in the second.
        for (int i = 0; i < ENTRIES; i++) {
            if (i < SHARED) {
                Caches.second[i] = Caches.first[i];
            } else {
                Entry entry = new Entry();
                entry.key = 1000 + i;
                entry.data = new byte[DATA];
                Caches.second[i] = entry;
            }
        }

    }

    static void buildBus() {
        for (int i = 0; i < LISTENERS; i++) {
            Bus.register(new Listener());
        }
    }
}
