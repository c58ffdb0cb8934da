/**
 * Ground truth for heap dumps: keeps exactly NODES instances of Keep$Node (each holding an
 * int[] of 10 elements) and one Keep$Node[] of NODES elements reachable, prints "ready", then
 * waits until its standard input closes.
 *
 * Usage: java Keep NODES
 */
public class Keep {
    static final class Node {
        final int index;
        final int[] payload = new int[10];

        Node(int index) {
            this.index = index;
        }
    }

    static Node[] kept;

    public static void main(String[] args) throws Exception {
        int nodes = Integer.parseInt(args[0]);
        kept = new Node[nodes];
        for (int i = 0; i < nodes; i++) {
            kept[i] = new Node(i);
        }
        System.out.println("ready");
        System.out.flush();
        while (System.in.read() != -1) {
            // wait for the test to close stdin
        }
        System.out.println("kept " + kept.length);
    }
}
