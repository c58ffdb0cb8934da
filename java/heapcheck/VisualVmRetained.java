import java.io.File;
import java.util.List;

import org.graalvm.visualvm.lib.jfluid.heap.Heap;
import org.graalvm.visualvm.lib.jfluid.heap.HeapFactory;
import org.graalvm.visualvm.lib.jfluid.heap.Instance;
import org.graalvm.visualvm.lib.jfluid.heap.JavaClass;
import org.graalvm.visualvm.lib.jfluid.heap.ObjectArrayInstance;

/**
 * Retained sizes of a heap dump as VisualVM's heap library (NetBeans' profiler heap, a reader
 * openprof did not write) computes them, to check openprof's against.
 *
 * Usage: java -cp LIBRARY.jar:. VisualVmRetained DUMP shapes
 *          prints, for the RetainedShapes workload, "name id shallow retained" lines and the
 *          retained size of its classes' instances ("class NAME instances retained");
 *        java -cp LIBRARY.jar:. VisualVmRetained DUMP top N
 *          computes every retained size and prints the N largest objects and the time taken.
 */
public class VisualVmRetained {
    public static void main(String[] args) throws Exception {
        long start = System.nanoTime();
        Heap heap = HeapFactory.createHeap(new File(args[0]));
        if (args[1].equals("top")) {
            List<Instance> biggest = heap.getBiggestObjectsByRetainedSize(Integer.parseInt(args[2]));
            for (Instance instance : biggest) {
                System.out.println(instance.getJavaClass().getName() + " 0x"
                        + Long.toHexString(instance.getInstanceId()) + " " + instance.getSize()
                        + " " + instance.getRetainedSize());
            }
            System.out.println("seconds " + (System.nanoTime() - start) / 1e9);
            return;
        }
        Instance head = (Instance) heap.getJavaClassByName("RetainedShapes$Chain").getValueOfStaticField("head");
        print("chain.head", head);
        print("chain.head.next", (Instance) head.getValueOfField("next"));
        print("chain.head.payload", (Instance) head.getValueOfField("payload"));
        JavaClass caches = heap.getJavaClassByName("RetainedShapes$Caches");
        print("caches.first", (Instance) caches.getValueOfStaticField("first"));
        print("caches.second", (Instance) caches.getValueOfStaticField("second"));
        ObjectArrayInstance first = (ObjectArrayInstance) caches.getValueOfStaticField("first");
        print("caches.first[0]", first.getValues().get(0));
        print("caches.first[199]", first.getValues().get(199));
        Instance listeners = (Instance) heap.getJavaClassByName("RetainedShapes$Bus").getValueOfStaticField("listeners");
        print("bus.listeners", listeners);
        Instance elementData = (Instance) listeners.getValueOfField("elementData");
        print("bus.listeners.elementData", elementData);
        print("bus.listeners[0]", ((ObjectArrayInstance) elementData).getValues().get(0));
        for (String name : new String[] {"RetainedShapes$Link", "RetainedShapes$Entry", "RetainedShapes$Listener"}) {
            JavaClass javaClass = heap.getJavaClassByName(name);
            System.out.println("class " + name + " " + javaClass.getInstancesCount() + " "
                    + javaClass.getRetainedSizeByClass());
        }
    }

    static void print(String name, Instance instance) {
        System.out.println(name + " 0x" + Long.toHexString(instance.getInstanceId()) + " "
                + instance.getSize() + " " + instance.getRetainedSize());
    }
}
