// Runs the class rewriter's test classes once their methods call the call hook, then prints
// what the hook was told. Not instrumented itself.
public class RunInstrumented {
    public static void main(String[] args) {
        Rewritten.main(args);
        Constructed.main(args);
        System.out.print(openprof.CallHook.report());
    }
}
