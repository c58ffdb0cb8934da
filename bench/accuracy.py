#!/usr/bin/env python3
"""The accuracy referee: how much of a known delay each profiler puts where it is, on real programs.

For each target, a method of a real program, the program runs once with `delay=` putting a
busy delay of known cost into that method (docs/options.md: the agent counts the delays and
the thread CPU time they took), under each profiler, and once without the delay under each
profiler. A profiler that is right gives the method, in the delayed run, the share it gave it
without the delay, diluted by the added time, plus the delay's own share:

    predicted = base * (1 - s) + s,   s = delay CPU / the run's sampled CPU

where `base` is the method's self share in the profiler's own run without the delay, and the
run's sampled CPU is the profiler's sample count times its interval (each profiler against its
own total, so samples it drops alike everywhere cancel out). A method's self share counts the
samples whose leaf Java frame is the method, or the delay's code (`openprof.Delay.spin`, inlined
or not, and its natives) called from it. The error is measured minus predicted, in points of the total; the table
gives it per target and the mean absolute error per profiler. This is the approach of Burchell,
Humphrey and Marr ("Divining Profiler Accuracy", PACMPL 2025): slow a method down by a known
amount and check that the profiler sees exactly that much more of it.

Profilers: openprof (cpu=samples,interval=1, its own stack walker, the default; with
--asgct-walker also with walker=asgct, HotSpot's AsyncGetCallTrace) and async-profiler (event=cpu,interval=1ms, its
default walker), each in a JVM of its own; with --jfr also the JDK's JFR sampler
(jdk.ExecutionSample every 1 ms, JDK 17+), whose shares are printed but whose prediction is not
yet right: JFR does not take one sample per millisecond of CPU (on javac its delays came to
85-112 % of "sampled CPU"), so its sampled CPU needs another measure than its sample count. The delay is put in by openprof's agent in every
delayed run: alone (`delay=` profiles nothing by itself) beside async-profiler and JFR.

The delay is chosen from a first run that counts the calls (`delay=...:1ns`): so that the
delays take about --share of the run's CPU, each at least --min-delay long; a method called too
often for that gets the delay in one call of N (`delay=...:every=N`). Then every call counts
itself, a cost of its own in a method called a hundred million times, so such a target's base
run is not the plain one but one with the same `every=N` and a delay of 1 ns. A target whose delays
would make the run longer than --max-slowdown times the undelayed one is skipped and said so.

async-profiler is not part of openprof: build it in a directory of its own, e.g.
  git clone https://github.com/async-profiler/async-profiler /tmp/async-profiler && make -C /tmp/async-profiler
and pass --async-profiler /tmp/async-profiler/build/lib/libasyncProfiler.so.

Usage: bench/accuracy.py --async-profiler LIB [--targets h2,javac,...] [--rounds N] [--asgct-walker] [--jfr] [--agent LIB]
Needs: cargo build --release; Debian's libh2-java, libjetty9-java, rhino, clojure (as
bench/real_apps.py).
"""
import argparse
import collections
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, jdk_tool
from real_apps import APPS, JETTY_JARS, SHARE, command_of
from stack_walk import JAVA_SUFFIXES, async_profile, java_method, java_name, openprof_profile

# The agent library, a list of one so that --agent can change it.
AGENT = [os.path.join(ROOT, "target", "release", "libopenprof_agent.so")]
DELAY_CLASS = "openprof.Delay."

# (program, method as class.method): the H2 method the profilers disagree on (its inlined
# scope), a method of each program's hot path, and some that run less often. Jetty's run on
# its server's threads, beside our client threads in the same JVM.
TARGETS = [
    ("h2", "org.h2.command.query.SelectGroups.setCurrentGroupExprData"),
    ("h2", "org.h2.command.query.SelectGroups.getCurrentGroupExprData"),
    ("h2", "org.h2.mvstore.type.LongDataType.binarySearch"),
    ("h2", "org.h2.expression.aggregate.Aggregate.updateAggregate"),
    ("h2", "org.h2.value.ValueBigint.get"),
    ("jetty", "org.eclipse.jetty.http.HttpParser.parseFields"),
    ("jetty", "org.eclipse.jetty.server.HttpChannel.handle"),
    ("jetty", "org.eclipse.jetty.http.HttpGenerator.generateResponse"),
    ("javac", "com.sun.tools.javac.parser.JavaTokenizer.readToken"),
    ("javac", "com.sun.tools.javac.comp.Attr.attribTree"),
    ("javac", "com.sun.tools.javac.comp.Attr.visitIdent"),
    ("javac", "com.sun.tools.javac.code.Types.isSubtype"),
    ("rhino", "org.mozilla.javascript.ScriptRuntime.add"),
    ("rhino", "org.mozilla.javascript.ScriptRuntime.setObjectElem"),
    ("rhino", "org.mozilla.javascript.ScriptRuntime.getObjectElem"),
    ("clojure", "clojure.lang.Numbers.ops"),
    ("clojure", "clojure.lang.RT.first"),
    ("clojure", "clojure.lang.PersistentHashMap.assoc"),
]
class NothingDelayed(Exception):
    """The target has no method with code by that name: the agent delayed nothing."""


class RunFailed(Exception):
    """A run did not end with the program's own correct output."""


DELAY_LINE = re.compile(r"openprof: delay=\S+: (\d+) delays took (\d+) ns in all \((\d+) methods")


def profiler_options(profiler, output, async_lib):
    """The JVM options that load a profiler writing to `output`, and the `delay=` to add to
    openprof's own options (or None when openprof's agent carries only the delay)."""
    if profiler is None:
        return [], None
    if profiler == "openprof":
        return [], f"cpu=samples,interval=1,depth=2048,cutoff=0,verbose=n,file={output}"
    if profiler == "openprof-asgct":
        return [], f"cpu=samples,interval=1,depth=2048,cutoff=0,verbose=n,walker=asgct,file={output}"
    if profiler == "async-profiler":
        return [f"-agentpath:{async_lib}=start,event=cpu,interval=1ms,ann,collapsed,file={output}"], None
    return [f"-XX:StartFlightRecording:filename={output},jdk.ExecutionSample#period=1ms"], None


def run_program(app, java, drivers, work, profiler, async_lib, delay):
    """Runs the program under `profiler` with `delay` (`class.method:duration`, or None):
    (samples by leaf Java method with delays charged to their method, total samples, the
    delays' (count, CPU ns) or None, CPU seconds of the process)."""
    os.makedirs(work, exist_ok=True)
    # A directory of its own: programs write files there (javac its sources and classes).
    work = tempfile.mkdtemp(dir=work)
    output = os.path.join(work, {None: "none", "openprof": "profile.txt", "openprof-asgct": "profile.txt",
                                 "async-profiler": "profile.collapsed", "jfr": "profile.jfr"}[profiler])
    if os.path.exists(output):
        os.remove(output)
    jvm_options, openprof_options = profiler_options(profiler, output, async_lib)
    agent_options = [part for part in (openprof_options, delay and f"delay={delay}") if part]
    if agent_options:
        jvm_options = jvm_options + [f"-agentpath:{AGENT[0]}={','.join(agent_options)}"]
    args, stdin_text, check = command_of(app, java, drivers, work)
    started = os.times()
    run = subprocess.run([java, *jvm_options, *args], input=stdin_text, capture_output=True,
                         text=True, cwd=work, timeout=1800)
    ended = os.times()
    cpu = (ended.children_user - started.children_user) + (ended.children_system - started.children_system)
    # async-profiler says "Profiling started" on the program's standard output.
    stdout = "".join(line for line in run.stdout.splitlines(keepends=True)
                     if line != "Profiling started\n")
    problem = check(stdout, work) if run.returncode == 0 else f"exit {run.returncode}"
    if problem:
        raise RunFailed(f"{app.name} under {profiler} with delay={delay}: {problem}\n{run.stderr[-2000:]}")
    delays = None
    if delay:
        found = DELAY_LINE.search(run.stderr)
        if not found or found.group(3) == "0":
            raise NothingDelayed(run.stderr[-500:])
        delays = (int(found.group(1)), int(found.group(2)))
    if profiler is None:
        return Leaves(), 0, delays, cpu
    by_leaf, total = leaf_samples(profiler, output, java)
    return by_leaf, total, delays, cpu


def charge(java_frames_leaf_first):
    """The method a sample counts to: its leaf Java frame, or for a sample in the delay (the
    spin or its natives, which read the thread's CPU clock), the delayed method that called it."""
    for frame in java_frames_leaf_first:
        if not frame.startswith(DELAY_CLASS):
            return frame
    return java_frames_leaf_first[0] if java_frames_leaf_first else None


class Leaves(collections.Counter):
    """Samples by the method they count to (see `charge`); `in_delay` the part of them that was
    in the delay itself (its frames on top), by the method that called it."""

    def __init__(self):
        super().__init__()
        self.in_delay = collections.Counter()

    def add(self, java_frames_leaf_first, count):
        method = charge(java_frames_leaf_first)
        self[method] += count
        if java_frames_leaf_first and java_frames_leaf_first[0].startswith(DELAY_CLASS):
            self.in_delay[method] += count


def leaf_samples(profiler, output, java):
    by_leaf = Leaves()
    if profiler in ("openprof", "openprof-asgct"):
        delivered, failed, samples, traces = openprof_profile(output)
        for trace, count in samples.items():
            frames = [method for method in map(java_method, traces.get(trace, [])) if method]
            by_leaf.add(frames, count)
        return by_leaf, delivered + failed
    if profiler == "async-profiler":
        delivered, failed, stacks = async_profile(output)
        for frames, count in stacks:
            java_frames = [java_name(frame) for frame in reversed(frames) if frame.endswith(JAVA_SUFFIXES)]
            by_leaf.add(java_frames, count)
        return by_leaf, delivered + failed
    # JFR: `jfr print` lists each sample's stack, leaf first.
    jfr = os.path.join(os.path.dirname(java), "jfr")
    printed = subprocess.run([jfr, "print", "--events", "jdk.ExecutionSample", "--stack-depth", "8", output],
                             capture_output=True, text=True, check=True).stdout
    total = 0
    for event in printed.split("jdk.ExecutionSample")[1:]:
        frames = re.findall(r"^\s+([\w$.<>]+)\(", event.split("stackTrace = [", 1)[-1], re.M)
        total += 1
        by_leaf.add(frames, 1)
    return by_leaf, total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--async-profiler", required=True, help="libasyncProfiler.so, built outside openprof")
    parser.add_argument("--targets", default=None, help="programs to take targets from (default: all)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--asgct-walker", action="store_true",
                        help="also openprof with HotSpot's AsyncGetCallTrace (walker=asgct)")
    parser.add_argument("--jfr", action="store_true",
                        help="also the JDK's JFR sampler (its prediction is not yet right, see above)")
    parser.add_argument("--share", type=float, default=0.10, help="the delays' share of the run to aim at")
    parser.add_argument("--min-delay", type=int, default=200000,
                        help="the shortest delay, in ns: the clock reads and native calls around "
                             "each delay cost some 0.3-1 us that the delay's own count leaves out")
    parser.add_argument("--max-slowdown", type=float, default=3.0)
    parser.add_argument("--keep", default=None, help="the directory for the runs' files")
    parser.add_argument("--agent", default=AGENT[0],
                        help="the agent library (default: the release build's)")
    args = parser.parse_args()
    AGENT[0] = args.agent
    if not os.path.isfile(AGENT[0]):
        sys.exit("accuracy: build first: cargo build --release")
    if not os.path.isfile(args.async_profiler):
        sys.exit(f"accuracy: no async-profiler library at {args.async_profiler}")
    programs = args.targets.split(",") if args.targets else sorted({program for program, _ in TARGETS})
    targets = [(program, method) for program, method in TARGETS if program in programs]
    profilers = (["openprof"] + (["openprof-asgct"] if args.asgct_walker else []) + ["async-profiler"]
                 + (["jfr"] if args.jfr else []))
    java = jdk_tool("java")
    work_root = args.keep or tempfile.mkdtemp(prefix="openprof-accuracy-")
    drivers = os.path.join(work_root, "drivers")
    subprocess.run([jdk_tool("javac"), "--release", "11", "-d", drivers, "-cp",
                    ":".join([f"{SHARE}/h2.jar"] + JETTY_JARS),
                    *glob.glob(os.path.join(ROOT, "java", "realapps", "*.java"))], check=True)

    errors = collections.defaultdict(list)  # profiler → [measured − predicted, points]
    delay_errors = collections.defaultdict(list)  # profiler → [in the delay − its share, points]
    rows = []
    for round_number in range(args.rounds):
        base = {}  # (program, profiler) → (by_leaf, total, cpu)
        for program, method in targets:
            app = APPS[program]
            work = os.path.join(work_root, f"{program}-{round_number}")
            for profiler in profilers:
                if (program, profiler) not in base:
                    by_leaf, total, _, cpu = run_program(app, java, drivers, work, profiler,
                                                         args.async_profiler, None)
                    base[(program, profiler)] = (by_leaf, total, cpu)
            # The calls, counted by a run with the shortest delay and no profiler.
            try:
                calls, _ = run_program(app, java, drivers, work, None, args.async_profiler,
                                       f"{method}:1ns")[2]
            except NothingDelayed as said:
                print(f"{program} {method}: nothing delayed: {said}", flush=True)
                continue
            base_cpu = base[(program, "openprof")][2]
            # The delays should take about --share of the run: each at least --min-delay long
            # (so that the clock reads around it cost little beside it) and at most 10 ms (the
            # longest delay=), in every call, or in one call of `every` when the method is
            # called too often for that.
            wanted_ns = args.share * base_cpu * 1e9
            every = max(1, round(calls * args.min_delay / wanted_ns))
            per_call = min(10_000_000, max(args.min_delay, int(wanted_ns * every / max(calls, 1))))
            delay = f"{method}:{per_call}ns" + (f":every={every}" if every > 1 else "")
            if calls // every * per_call > (args.max_slowdown - 1) * base_cpu * 1e9:
                print(f"{program} {method}: {calls} calls; delays of {per_call} ns in one of "
                      f"{every} would make the run more than {args.max_slowdown}x as long: skipped",
                      flush=True)
                continue
            row = [program, method, calls, f"{per_call}" + (f" / {every}" if every > 1 else "")]
            for profiler in profilers:
                try:
                    by_leaf, total, delays, _ = run_program(app, java, drivers, work, profiler,
                                                            args.async_profiler, delay)
                    if every > 1:
                        # Every call of the method now counts itself, one in `every` spins: the
                        # count costs a few ns a call, which a method called a hundred million
                        # times turns into seconds of its own. The base run pays it too, with
                        # the same `every` and a delay of 1 ns, so the prediction holds it.
                        base_leaf, base_total, _, _ = run_program(
                            app, java, drivers, work, profiler, args.async_profiler,
                            f"{method}:1ns:every={every}")
                    else:
                        base_leaf, base_total, _ = base[(program, profiler)]
                except RunFailed as failed:
                    print(f"{program} {method}: FAILED: {failed}", flush=True)
                    break
                base_share = base_leaf[method] / max(base_total, 1)
                s = delays[1] / 1e6 / max(total, 1)  # delay CPU (ms) over sampled CPU (1 ms a sample)
                predicted = base_share * (1 - s) + s
                measured = by_leaf[method] / max(total, 1)
                error = 100 * (measured - predicted)
                # The delay alone: its own samples against its share, whatever the JIT made of
                # the rest of the method in this run.
                in_delay = by_leaf.in_delay[method] / max(total, 1)
                row.append((100 * base_share, 100 * s, 100 * predicted, 100 * measured, error,
                            100 * in_delay, 100 * (in_delay - s)))
            if len(row) < 4 + len(profilers):
                continue
            for profiler, cells in zip(profilers, row[4:]):
                errors[profiler].append(cells[4])
                delay_errors[profiler].append(cells[6])
            rows.append(row)
            print(f"{program} {method}: {calls} calls, {per_call} ns in one of {every}; " + "; ".join(
                f"{profiler} base {cells[0]:.1f} %, delay {cells[1]:.1f} %, predicted {cells[2]:.1f} %, "
                f"measured {cells[3]:.1f} %, error {cells[4]:+.1f}, in the delay {cells[5]:.1f} % "
                f"({cells[6]:+.1f})"
                for profiler, cells in zip(profilers, row[4:])), flush=True)

    print()
    print("| program | method | calls | delay ns | " + " | ".join(
        f"{profiler}: predicted → measured (error)" for profiler in profilers) + " |")
    print("|---|---|---|---|" + "---|" * len(profilers))
    for row in rows:
        program, method, calls, per_call = row[:4]
        print(f"| {program} | `{method.rsplit('.', 2)[-2]}.{method.rsplit('.', 1)[-1]}` | {calls} | "
              f"{per_call} | " + " | ".join(
                  f"{cells[2]:.1f} → {cells[3]:.1f} ({cells[4]:+.1f})" for cells in row[4:]) + " |")
    print()
    for profiler in profilers:
        if errors[profiler]:
            absolute = [abs(error) for error in errors[profiler]]
            print(f"{profiler}: mean absolute error {statistics.mean(absolute):.2f} points, "
                  f"largest {max(absolute):.2f}, over {len(absolute)} delayed runs")
    print()
    print("The delay alone (samples with the delay's frames on top over the delayed method, "
          "against the delay's share):")
    print("| program | method | " + " | ".join(
        f"{profiler}: share → in the delay (error)" for profiler in profilers) + " |")
    print("|---|---|" + "---|" * len(profilers))
    for row in rows:
        program, method = row[:2]
        print(f"| {program} | `{method.rsplit('.', 2)[-2]}.{method.rsplit('.', 1)[-1]}` | " + " | ".join(
            f"{cells[1]:.1f} → {cells[5]:.1f} ({cells[6]:+.1f})" for cells in row[4:]) + " |")
    for profiler in profilers:
        if delay_errors[profiler]:
            absolute = [abs(error) for error in delay_errors[profiler]]
            print(f"{profiler}: the delay alone, mean absolute error {statistics.mean(absolute):.2f} "
                  f"points, largest {max(absolute):.2f}")
    if not args.keep:
        shutil.rmtree(work_root, ignore_errors=True)
    else:
        for run_dir in glob.glob(os.path.join(work_root, "*", "tmp*")):
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
