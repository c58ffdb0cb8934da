/**
 * Ground truth for heap dumps with every kind of field: keeps SHAPES instances of
 * HeapShapes$Shape (a subclass of HeapShapes$Base that also implements an interface with
 * constants, which shifts JVMTI's field numbering), BASES plain HeapShapes$Base, and arrays of
 * known lengths reachable; prints "ready", then waits until its standard input closes.
 *
 * Field values are functions of the index, so two dumps of the same heap can be compared
 * value by value: sides = i % 7, area = i * 0.5, tag = 'a' + i % 26, filled = i odd,
 * small = i % 100, medium = i % 1000, ratio = i / 4f, baseId = 1000000 + i.
 *
 * Usage: java HeapShapes SHAPES BASES
 */
public class HeapShapes {
    interface Constants {
        int LIMIT = 7;
        String NAME = "shapes";
    }

    static class Base {
        static int created;
        long baseId;
        Object baseRef;
    }

    static final class Shape extends Base implements Constants, Comparable<Shape> {
        static final String LABEL = "shape";
        static int count;
        int sides;
        double area;
        char tag;
        boolean filled;
        byte small;
        short medium;
        float ratio;
        Shape next;

        public int compareTo(Shape other) {
            return Integer.compare(sides, other.sides);
        }
    }

    static Shape[] shapes;
    static Base[] bases;
    static long[][] longs;
    static short[][][] cube;
    static char[] text;

    public static void main(String[] args) throws Exception {
        int shapeCount = Integer.parseInt(args[0]);
        int baseCount = Integer.parseInt(args[1]);
        shapes = new Shape[shapeCount];
        for (int i = 0; i < shapeCount; i++) {
            Shape shape = new Shape();
            shape.baseId = 1000000 + i;
            shape.sides = i % 7;
            shape.area = i * 0.5;
            shape.tag = (char) ('a' + i % 26);
            shape.filled = i % 2 == 1;
            shape.small = (byte) (i % 100);
            shape.medium = (short) (i % 1000);
            shape.ratio = i / 4f;
            shape.next = i > 0 ? shapes[i - 1] : null;
            shapes[i] = shape;
            Shape.count++;
        }
        bases = new Base[baseCount];
        for (int i = 0; i < baseCount; i++) {
            bases[i] = new Base();
            bases[i].baseId = i;
            bases[i].baseRef = shapes.length > 0 ? shapes[i % shapes.length] : null;
            Base.created++;
        }
        longs = new long[100][];
        for (int i = 0; i < longs.length; i++) {
            longs[i] = new long[333];
            longs[i][i] = i;
        }
        cube = new short[3][4][5];
        text = new char[12345];
        System.out.println("ready");
        System.out.flush();
        while (System.in.read() != -1) {
            // wait for the test to close stdin
        }
        // No string concatenation: invokedynamic would build method handles at exit, and
        // the heap at exit should be the heap the test compared while waiting.
        System.out.print("kept ");
        System.out.print(shapes.length);
        System.out.print(' ');
        System.out.println(bases.length);
    }
}
