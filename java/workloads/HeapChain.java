/**
 * Ground truth for long chains in a heap dump: keeps one singly linked list of exactly LINKS
 * HeapChain$Link objects reachable from the static HeapChain.head, prints "ready", then waits
 * until its standard input closes. Each link dominates the rest of the list, so the dominator
 * path from the head and the path from a GC root to its end are LINKS long.
 *
 * Usage: java HeapChain LINKS
 */
public class HeapChain {
    static final class Link {
        final int index;
        Link next;

        Link(int index) {
            this.index = index;
        }
    }

    static Link head;

    public static void main(String[] args) throws Exception {
        int links = Integer.parseInt(args[0]);
        for (int i = links - 1; i >= 0; i--) {
            Link link = new Link(i);
            link.next = head;
            head = link;
        }
        System.out.println("ready");
        System.out.flush();
        while (System.in.read() != -1) {
            // wait for the test to close stdin
        }
    }
}
