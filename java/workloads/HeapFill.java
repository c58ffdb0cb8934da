import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A heap of a chosen size for dump benchmarks: MEGABYTES of live objects of mixed kinds (small
 * instances with references, strings, maps, primitive arrays), prints "ready", then waits until
 * its standard input closes.
 *
 * Usage: java HeapFill MEGABYTES
 */
public class HeapFill {
    static final class Node {
        long id;
        int weight;
        Node next;
        Object payload;
    }

    static List<Object> roots = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        long target = Long.parseLong(args[0]) << 20;
        long filled = 0;
        Node previous = null;
        Map<String, Node> index = new HashMap<>();
        int i = 0;
        while (filled < target) {
            Node node = new Node();
            node.id = i;
            node.weight = i % 97;
            node.next = previous;
            switch (i % 4) {
                case 0: node.payload = new byte[128 + i % 64]; filled += 150; break;
                case 1: node.payload = new long[8]; filled += 80; break;
                case 2: node.payload = "s" + i; filled += 56; break;
                default: node.payload = new int[] {i, i + 1}; filled += 24; break;
            }
            filled += 32;
            if (i % 16 == 0) {
                index.put("k" + i, node);
                filled += 100;
            }
            previous = i % 1000 == 999 ? null : node;
            if (i % 1000 == 999) {
                roots.add(node);
            }
            i++;
        }
        roots.add(index);
        System.out.println("ready");
        System.out.flush();
        while (System.in.read() != -1) {
            // wait for the benchmark to close stdin
        }
        System.out.println(roots.size());
    }
}
