package dev.openprof;

import java.util.concurrent.Callable;

/**
 * Labels for the samples of a piece of work: {@code Context.run("user", "alice", () -> serve(request))}
 * runs the body, and while it runs every CPU and wall-clock sample openprof takes on this thread
 * carries the label {@code user=alice} (in continuous mode, where profile windows go to a
 * collector). Contexts nest: the inner body's samples carry both labels.
 *
 * Without the agent, or without continuous mode, the body simply runs: the class has no native
 * code and no dependency; the agent finds the calls by tracing this class's methods.
 */
public final class Context {
    private Context() {}

    /** Runs {@code body} with the label {@code name=value} on this thread's samples. */
    public static void run(String name, String value, Runnable body) {
        body.run();
    }

    /** Calls {@code body} with the label {@code name=value} on this thread's samples. */
    public static <T> T call(String name, String value, Callable<T> body) throws Exception {
        return body.call();
    }
}
