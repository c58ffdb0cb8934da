/**
 * Ground truth for method parameter tracing's variants and for patterns that leave the return
 * type out (docs/mpt.md): a class, a subclass that inherits its method and one that overrides
 * it, and a covariant override with its bridge method. Each call passes a SeedValue numbering
 * the call, so `field:call` tells which calls a specification traced:
 *   Call 1: new SeedArrays().run(value 1)    runs SeedArrays.run
 *   Call 2: new SeedArrays2().run(value 2)   runs SeedArrays.run (SeedArrays2 inherits it)
 *   Call 3: new SeedArrays3().run(value 3)   runs SeedArrays3.run, which calls super.run
 * Call N is made N times. For covariant returns (a pattern without return type):
 *   Call 1: a SeedA through SeedA's method, once
 *   Call 2: a SeedB through SeedA's descriptor (the bridge, which calls the override), twice
 *   Call 3: a SeedB through SeedB's descriptor, four times
 */
public class MptSeed {
    public static void main(String[] args) {
        SeedArrays[] receivers = {new SeedArrays(), new SeedArrays2(), new SeedArrays3()};
        for (int call = 1; call <= 3; call++) {
            for (int time = 0; time < call; time++) {
                receivers[call - 1].run(new SeedValue(call));
            }
        }
        SeedA one = new SeedA();
        SeedA two = new SeedB();
        SeedB three = new SeedB();
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

class SeedValue {
    final int call;

    SeedValue(int call) {
        this.call = call;
    }
}

class SeedResult {
    final int call;

    SeedResult(int call) {
        this.call = call;
    }
}

class SeedArrays {
    SeedResult run(SeedValue value) {
        return new SeedResult(value.call);
    }
}

class SeedArrays2 extends SeedArrays {
}

class SeedArrays3 extends SeedArrays2 {
    @Override
    SeedResult run(SeedValue value) {
        // A super call runs SeedArrays.run for a SeedArrays3: not another traced call.
        return super.run(value);
    }
}

class SeedA {
    SeedArrays2 exampleMethod() {
        return new SeedArrays2();
    }
}

class SeedB extends SeedA {
    @Override
    SeedArrays3 exampleMethod() {
        return new SeedArrays3();
    }
}
