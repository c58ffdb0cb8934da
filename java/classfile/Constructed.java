// Constructors the class rewriter must instrument with call hooks: `this(...)` and `super(...)`
// calls after branches, calls and allocations in their arguments, exceptions thrown before
// and after `this` is initialized, and by the superclass's constructor. main prints how many objects were made (the rewriter's test
// checks what the hook was told against these constructors' known calls).
public class Constructed {
    static int made;
    final int value;

    Constructed(int value) {
        super();
        this.value = value;
        made++;
    }

    Constructed() {
        this(7);
    }

    Constructed(String text) {
        this(text == null ? -1 : text.length());
    }

    Constructed(int[] values) {
        this(sum(values));
    }

    Constructed(boolean fail) {
        this(check(fail));
    }

    Constructed(long late) {
        this((int) late);
        if (late < 0) {
            throw new IllegalArgumentException("late");
        }
    }

    Constructed(Constructed other) {
        this(new Constructed(other.value + 1).value);
    }

    static int sum(int[] values) {
        int sum = 0;
        for (int value : values) {
            sum += value;
        }
        return sum;
    }

    static int check(boolean fail) {
        if (fail) {
            throw new IllegalStateException("early");
        }
        return 1;
    }

    static class Child extends Constructed {
        final String name;

        Child(String name) {
            super(name.length() > 3 ? name.length() : 3);
            this.name = name;
        }

        Child() {
            this("child");
        }
    }

    static class Base {
        Base(int x) {
            if (x < 0) {
                throw new IllegalArgumentException("base");
            }
        }
    }

    // What Base's constructor throws leaves Sub's through its super(...) call, which no
    // handler may cover.
    static class Sub extends Base {
        Sub(int x) {
            super(x);
        }
    }

    public static void main(String[] args) {
        new Constructed();
        new Constructed("abc");
        new Constructed((String) null);
        new Constructed(new int[] {1, 2, 3});
        try {
            new Constructed(true);
        } catch (IllegalStateException expected) {
            // thrown before this(...) completed
        }
        new Constructed(false);
        try {
            new Constructed(-5L);
        } catch (IllegalArgumentException expected) {
            // thrown after this(...)
        }
        new Constructed(new Constructed(1));
        new Child();
        new Child("ab");
        new Sub(1);
        try {
            new Sub(-1);
        } catch (IllegalArgumentException expected) {
            // thrown inside super(...)
        }
        System.out.println("made " + made);
    }
}
