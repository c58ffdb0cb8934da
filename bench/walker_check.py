#!/usr/bin/env python3
"""Our stack walker against AsyncGetCallTrace, sample by sample, on real applications.

Each application of bench/real_apps.py runs under `cpu=samples,interval=1,walker=check`: the
signal handler walks every sample twice, with HotSpot's AsyncGetCallTrace (whose walk is
recorded) and with openprof's own walker, and counts how the two walks compared (the
`walker.*` lines of the CPU SAMPLER record; docs/decisions.md explains each kind). The program
must still end with its own correct output. Printed: per application and JDK, the samples and
the share of each kind, in a table for BENCHMARKS.md.

Kinds:
  same                 the same frames, methods and bytecode indices
  other_top_line       the same methods; the top frame's bytecode index differs (compiled)
  other_top_line_interpreted  the same, the top frame interpreted
  other_lines          the same methods; a bytecode index below the top differs
  other_inlined_leaf   the leaf frames differ within the top compiled frame's inlined methods
                       (either walk with more of them), the frames below agree
  vm_shorter           ours is AsyncGetCallTrace's with frames missing at the bottom
  asgct_shorter        AsyncGetCallTrace's is ours with frames missing at the bottom
  asgct_no_debug_point AsyncGetCallTrace's top frame is at no debug point (bytecode index -1),
                       in a method of ours' top compiled frame; its frames below are not ours
  asgct_lost_at_exit   ours found the top method in its return (frame taken down) and went on
                       from the return address; AsyncGetCallTrace's frames below are not ours
  vm_over_stub         ours stepped over a stub on top of the stack; the walks differ below
  asgct_missing_top    AsyncGetCallTrace's walk is ours without its top frames (it began at an
                       older frame); vm_missing_top the other way round
  vm_entry_on_top      ours has one more frame on top (a method at its entry), the rest the same
  asgct_extra_on_top   AsyncGetCallTrace's has one more frame on top, the rest the same
  vm_virtual_thread_end  ours ended at a virtual thread's continuation (the frames its carrier
                       holds), AsyncGetCallTrace went on into the carrier's frames
  vm_unreported_code   frames differ where ours walked compiled code JVMTI had not reported yet
                       (ours knows its method, not the methods inlined into it)
  other_frames         frames differ elsewhere
  only_vm_walked       AsyncGetCallTrace failed, ours walked
  only_asgct_walked    ours failed (walker.failed.* says why), AsyncGetCallTrace walked
  both_failed          neither walked (a thread outside Java code)

With --cost, each application also runs under walker=asgct and walker=vm (no check), and the
handler's CPU per sample (the record's cost.handler_us over the samples; the median of
--rounds runs) is printed for each:
what walking with ours instead of AsyncGetCallTrace costs.

With --cost and --async-profiler LIB, each application also runs without a profiler, under
openprof (walker=asgct and walker=vm) and under async-profiler (event=cpu,interval=1ms, its
default walker), --rounds times each, in turn: the process's CPU time beyond the run without a
profiler, over the samples the profiler took, is what a sample costs all in (the handler, the
agent's own thread, the output), the one measure both profilers can be given (async-profiler
does not time its handler). The median over the rounds is printed.

Each run's record also keeps two examples of each kind of disagreement (`walker.example`); those
of the --examples kinds are printed, both walks side by side, leaf first.

Usage: bench/walker_check.py [--apps h2,javac,...] [--jdk 17,25] [--cost [--rounds N] [--async-profiler LIB]] [--examples KINDS] [--keep DIR]
Needs: cargo build --release; the Debian packages of bench/real_apps.py.
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
from real_apps import APPS, JETTY_JARS, SHARE, command_of, java_home_of, jdk25_default, modules_of

AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
WALKER_LINE = re.compile(r"^walker\.(\S+) (\d+)$", re.M)
HANDLER_LINE = re.compile(r"^cost\.handler_us (\d+)$", re.M)
SAMPLES_LINE = re.compile(r"^CPU SAMPLES BEGIN \(total = (\d+)\)", re.M)
EXAMPLE_LINE = re.compile(r"^walker\.example (\S+) at=(\d+) vm_walk=(\S+) vm=(\S+) asgct=(\S+)$", re.M)


def run(app, java, drivers, work, walker="check"):
    """The walker's counts of one run, summed over the run's CPU SAMPLER records, with
    `handler_us` and `samples` among them."""
    work = tempfile.mkdtemp(dir=work)
    profile = os.path.join(work, "profile.txt")
    args, stdin_text, check = command_of(app, java, drivers, work)
    options = f"cpu=samples,interval=1,depth=2048,walker={walker},verbose=n,file={profile}"
    done = subprocess.run([java, f"-agentpath:{AGENT}={options}", *args], input=stdin_text,
                          capture_output=True, text=True, cwd=work, timeout=1800)
    problem = check(done.stdout, work) if done.returncode == 0 else f"exit {done.returncode}"
    if problem:
        raise SystemExit(f"walker_check: {app.name} under {java}: {problem}\n{done.stderr[-2000:]}")
    if "walker=check is off" in done.stderr:
        raise SystemExit(f"walker_check: {app.name}: {done.stderr.strip()}")
    counts = collections.Counter()
    with open(profile) as file:
        text = file.read()
    for kind, count in WALKER_LINE.findall(text):
        counts[kind] += int(count)
    counts["handler_us"] = sum(int(micros) for micros in HANDLER_LINE.findall(text))
    counts["samples"] = sum(int(total) for total in SAMPLES_LINE.findall(text))
    counts.examples = [(kind, int(first), how, [] if vm == "-" else vm.split(";"),
                        [] if asgct == "-" else asgct.split(";"))
                       for kind, first, how, vm, asgct in EXAMPLE_LINE.findall(text)]
    return counts


def run_all_in(app, java, drivers, work, profiler, async_lib):
    """(the process's CPU seconds, the samples taken) of one run under `profiler` (None, an
    openprof walker, or "async-profiler")."""
    work = tempfile.mkdtemp(dir=work)
    args, stdin_text, check = command_of(app, java, drivers, work)
    options = []
    output = os.path.join(work, "profile")
    if profiler == "async-profiler":
        options = [f"-agentpath:{async_lib}=start,event=cpu,interval=1ms,collapsed,file={output}"]
    elif profiler is not None:
        options = [f"-agentpath:{AGENT}=cpu=samples,interval=1,depth=2048,walker={profiler},"
                   f"verbose=n,file={output}"]
    started = os.times()
    done = subprocess.run([java, *options, *args], input=stdin_text, capture_output=True,
                          text=True, cwd=work, timeout=1800)
    ended = os.times()
    cpu = (ended.children_user - started.children_user) + (ended.children_system - started.children_system)
    stdout = "".join(line for line in done.stdout.splitlines(keepends=True) if line != "Profiling started\n")
    problem = check(stdout, work) if done.returncode == 0 else f"exit {done.returncode}"
    if problem:
        raise SystemExit(f"walker_check: {app.name} under {profiler}: {problem}\n{done.stderr[-2000:]}")
    if profiler is None:
        samples = 0
    elif profiler == "async-profiler":
        samples = sum(int(line.rpartition(" ")[2]) for line in open(output) if line.strip())
    else:
        samples = sum(int(total) for total in SAMPLES_LINE.findall(open(output).read()))
    return cpu, samples


def all_in_costs(app, java, drivers, work, async_lib, rounds):
    """µs of the process's CPU per sample beyond the run without a profiler, the median over
    `rounds`, by profiler; the runs of one round in turn, so that the machine's drift falls on
    all alike."""
    profilers = ["asgct", "vm", "async-profiler"]
    per_sample = collections.defaultdict(list)
    for _ in range(rounds):
        bare, _ = run_all_in(app, java, drivers, work, None, async_lib)
        for profiler in profilers:
            cpu, samples = run_all_in(app, java, drivers, work, profiler, async_lib)
            per_sample[profiler].append(1e6 * (cpu - bare) / max(samples, 1))
    return {profiler: statistics.median(values) for profiler, values in per_sample.items()}


def print_example(kind, first, how, vm, asgct):
    """One kept disagreement: both walks side by side from frame `first` (the leaf is 0)."""
    print(f"  {kind}: ours walked {how}; from frame {first}")
    for index in range(max(len(vm), len(asgct))):
        ours = vm[index] if index < len(vm) else ""
        theirs = asgct[index] if index < len(asgct) else ""
        print(f"    {'=' if ours == theirs else '≠'} {ours:<70} {theirs}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", default="h2,jetty,javac,jshell,clojure,rhino")
    parser.add_argument("--jdk", default="17,25")
    parser.add_argument("--cost", action="store_true",
                        help="also the handler's CPU per sample under walker=asgct and walker=vm")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs per walker for --cost; the median is printed")
    parser.add_argument("--async-profiler", default=None,
                        help="libasyncProfiler.so, built outside openprof: with --cost, also the "
                             "all-in CPU per sample of openprof and async-profiler")
    parser.add_argument("--keep", default=None, help="the directory for the runs' files")
    parser.add_argument("--examples", default="other_frames,other_inlined_leaf,vm_shorter,asgct_shorter",
                        help="the kinds whose kept examples (walker.example lines) are printed")
    args = parser.parse_args()
    if not os.path.isfile(AGENT):
        sys.exit("walker_check: build first: cargo build --release")
    homes = {}
    for version in args.jdk.split(","):
        if version == "17":
            homes["17"] = [java_home_of(jdk_tool("java"))]
        elif version == "25":
            full = sorted(home for home in glob.glob("/usr/lib/jvm/*25*")
                          if os.path.exists(os.path.join(home, "bin", "jshell")))
            homes["25"] = [home for home in [jdk25_default(), *full] if home]
        else:
            sys.exit(f"walker_check: --jdk takes 17 and 25, not {version}")
    work_root = args.keep or tempfile.mkdtemp(prefix="openprof-walker-check-")
    drivers = os.path.join(work_root, "drivers")
    subprocess.run([jdk_tool("javac"), "--release", "11", "-d", drivers, "-cp",
                    ":".join([f"{SHARE}/h2.jar"] + JETTY_JARS),
                    *glob.glob(os.path.join(ROOT, "java", "realapps", "*.java"))], check=True)
    rows = []
    costs = []
    all_in_rows = []
    for version, candidates in homes.items():
        modules = {home: modules_of(home) for home in candidates}
        for name in args.apps.split(","):
            app = APPS[name]
            home = next((home for home in candidates
                         if app.module is None or app.module in modules[home]), None)
            if home is None:
                print(f"{name} on JDK {version}: no JDK here has {app.module}: skipped", flush=True)
                continue
            counts = run(app, os.path.join(home, "bin", "java"), drivers, work_root)
            compared = sum(count for kind, count in counts.items() if kind.startswith("check."))
            rows.append((version, name, compared, counts))
            if args.cost:
                per_sample = {}
                for walker in ("asgct", "vm", "check"):
                    runs = [counts] if walker == "check" else []
                    while len(runs) < args.rounds:
                        runs.append(run(app, os.path.join(home, "bin", "java"), drivers, work_root, walker))
                    per_sample[walker] = statistics.median(
                        walked["handler_us"] / max(walked["samples"], 1) for walked in runs)
                costs.append((version, name, per_sample))
                print(f"JDK {version} {name}: handler µs per sample: " + ", ".join(
                    f"{walker} {micros:.2f}" for walker, micros in per_sample.items()), flush=True)
                if args.async_profiler:
                    all_in = all_in_costs(app, os.path.join(home, "bin", "java"), drivers,
                                          work_root, args.async_profiler, args.rounds)
                    all_in_rows.append((version, name, all_in))
                    print(f"JDK {version} {name}: all-in µs of CPU per sample: " + ", ".join(
                        f"{profiler} {micros:.1f}" for profiler, micros in all_in.items()), flush=True)
            print(f"JDK {version} {name}: {compared} samples: " + ", ".join(
                f"{kind} {count}" for kind, count in sorted(counts.items())), flush=True)
            wanted = set(args.examples.split(","))
            for kind, first, how, vm, asgct in counts.examples:
                if kind in wanted:
                    print_example(kind, first, how, vm, asgct)
    print()
    print("| JDK | program | samples | same | other top line: compiled, interpreted | other lines | ours: entry on top; theirs: extra on top | ours: unreported code | other inlined leaf | AsyncGetCallTrace lost: no debug point, at a return | shorter: ours, theirs | ours over a stub on top | missing top frames: theirs, ours | other frames "
          "| only AsyncGetCallTrace walked | only ours walked "
          "| ours failed, by why |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for version, name, compared, counts in rows:
        def share(*kinds):
            count = sum(counts.get(f"check.{kind}", 0) for kind in kinds)
            return f"{100 * count / max(compared, 1):.2f} %"
        failed = ", ".join(f"{kind[len('failed.'):]} {count}" for kind, count in sorted(counts.items())
                           if kind.startswith("failed."))
        print(f"| {version} | {name} | {compared} | {share('same')} | {share('other_top_line')}, "
              f"{share('other_top_line_interpreted')} | "
              f"{share('other_lines')} | {share('vm_entry_on_top')}; {share('asgct_extra_on_top')} | "
              f"{share('vm_unreported_code')} | {share('other_inlined_leaf')} | {share('asgct_no_debug_point')}, {share('asgct_lost_at_exit')} | {share('vm_shorter')}, {share('asgct_shorter')} | {share('vm_over_stub')} | {share('asgct_missing_top')}, {share('vm_missing_top')} | {share('other_frames')} | "
              f"{share('only_asgct_walked')} | {share('only_vm_walked')} | "
              f"{failed or '-'} |")
    if costs:
        print()
        print("| JDK | program | handler µs per sample: AsyncGetCallTrace | ours | both (check) |")
        print("|---|---|---|---|---|")
        for version, name, per_sample in costs:
            print(f"| {version} | {name} | {per_sample['asgct']:.2f} | {per_sample['vm']:.2f} | "
                  f"{per_sample['check']:.2f} |")
    if all_in_rows:
        print()
        print("| JDK | program | all-in µs of CPU per sample: openprof, AsyncGetCallTrace | openprof, ours "
              "| async-profiler | openprof ours / async-profiler |")
        print("|---|---|---|---|---|---|")
        for version, name, all_in in all_in_rows:
            ratio = all_in["vm"] / all_in["async-profiler"] if all_in["async-profiler"] > 0 else float("nan")
            print(f"| {version} | {name} | {all_in['asgct']:.1f} | {all_in['vm']:.1f} | "
                  f"{all_in['async-profiler']:.1f} | {ratio:.2f} |")
    if not args.keep:
        shutil.rmtree(work_root, ignore_errors=True)


if __name__ == "__main__":
    main()
