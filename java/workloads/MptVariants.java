/**
 * Ground truth for method parameter tracing's variants and for patterns that leave the return
 * type out (docs/mpt.md): a class, a subclass that inherits its method and one that overrides
 * it, and a covariant override with its bridge method. Each call passes a VariantValue numbering
 * the call, so `field:call` tells which calls a specification traced:
 *   Call 1: new VariantArrays().run(value 1)    runs VariantArrays.run
 *   Call 2: new VariantArrays2().run(value 2)   runs VariantArrays.run (VariantArrays2 inherits it)
 *   Call 3: new VariantArrays3().run(value 3)   runs VariantArrays3.run, which calls super.run
 * Call N is made N times. For covariant returns (a pattern without return type):
 *   Call 1: a VariantA through VariantA's method, once
 *   Call 2: a VariantB through VariantA's descriptor (the bridge, which calls the override), twice
 *   Call 3: a VariantB through VariantB's descriptor, four times
 */
public class MptVariants {
    public static void main(String[] args) {
        VariantArrays[] receivers = {new VariantArrays(), new VariantArrays2(), new VariantArrays3()};
        for (int call = 1; call <= 3; call++) {
            for (int time = 0; time < call; time++) {
                receivers[call - 1].run(new VariantValue(call));
            }
        }
        VariantA one = new VariantA();
        VariantA two = new VariantB();
        VariantB three = new VariantB();
        one.exampleMethod();
        for (int time = 0; time < 2; time++) {
            two.exampleMethod();
        }
        for (int time = 0; time < 4; time++) {
            three.exampleMethod();
        }
        System.out.println("done");
    }
}

class VariantValue {
    final int call;

    VariantValue(int call) {
        this.call = call;
    }
}

class VariantResult {
    final int call;

    VariantResult(int call) {
        this.call = call;
    }
}

class VariantArrays {
    VariantResult run(VariantValue value) {
        return new VariantResult(value.call);
    }
}

class VariantArrays2 extends VariantArrays {
}

class VariantArrays3 extends VariantArrays2 {
    @Override
    VariantResult run(VariantValue value) {
        // A super call runs VariantArrays.run for a VariantArrays3: not another traced call.
        return super.run(value);
    }
}

class VariantA {
    VariantArrays2 exampleMethod() {
        return new VariantArrays2();
    }
}

class VariantB extends VariantA {
    @Override
    VariantArrays3 exampleMethod() {
        return new VariantArrays3();
    }
}
