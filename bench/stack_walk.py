#!/usr/bin/env python3
"""Stack walking on real code: samples delivered and lost, openprof against async-profiler, in one run.

Two workloads, each run with openprof (cpu=samples,interval=1) and with async-profiler
(event=cpu, interval=1ms, collapsed output with frame types), alternating, for --rounds rounds:
- java/workloads/Megamorphic.java: an interface call over four implementations in a hot loop,
  so most CPU time is in itable dispatch stubs and the short methods' entries. Reported: samples
  delivered and failed, and each area() implementation's share of all samples.
- javac compiling --classes generated classes (the JDK's own compiler as the profiled program).
  Reported: samples delivered and failed, and the ten hottest Java methods (self samples).

openprof's failures are the CPU SAMPLER record's `failed`; async-profiler's are its samples whose
leaf frame is one of its markers of a failed walk ([unknown...], [not_walkable...], [break_...],
[deoptimization]).

async-profiler is not part of openprof: build it in a directory of its own, e.g.
  git clone https://github.com/async-profiler/async-profiler /tmp/async-profiler && make -C /tmp/async-profiler
and pass its library with --async-profiler /tmp/async-profiler/build/lib/libasyncProfiler.so.

With --vmthreads, javac also runs with openprof's vmthreads=y (the JVM's own threads sampled
too) against async-profiler's samples of every thread: the shares of Java threads, of the JIT
compilers (stacks through CompileBroker::compiler_thread_loop) and of the JVM's other threads
(GC, VM thread), with what the sampling cost openprof.

Usage: bench/stack_walk.py --async-profiler LIB [--rounds N] [--seconds S] [--classes N] [--vmthreads]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchlib import ROOT, javac_sources, jdk_tool

FAILED_MARKERS = ("[unknown", "[not_walkable", "[break_", "[deoptimization")
# async-profiler's `ann` suffixes of Java frames: compiled, inlined, interpreted, C1.
JAVA_SUFFIXES = ("_[j]", "_[i]", "_[0]", "_[1]")


def openprof_profile(path):
    """(delivered, failed, {leaf method: samples}, {trace: frames}) from an HPROF text profile."""
    text = open(path).read()
    failed = sum(int(n) for n in re.findall(r"^failed (\d+)$", text, re.M))
    traces, current = {}, None
    for line in text.splitlines():
        found = re.match(r"TRACE (\d+):", line)
        if found:
            current = int(found.group(1))
            traces[current] = []
        elif current is not None and line.startswith("\t"):
            traces[current].append(line.strip())
        else:
            current = None
    samples = collections.Counter()
    for found in re.finditer(r"^\s*\d+\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+(\d+)\s", text, re.M):
        samples[int(found.group(2))] += int(found.group(1))
    # Failed walks are kept as samples with a marked frame; `failed` counts them.
    return sum(samples.values()) - failed, failed, samples, traces


def java_method(frame):
    """The Java method of an HPROF text frame line, or None for native code, a failed walk's mark
    or a JVM thread's or a virtual thread's root."""
    if frame.endswith((":native)", "(failed walk)", "(vm thread)", "(virtual thread)")):
        return None
    return frame.split("(")[0]


def costs(path):
    """The CPU SAMPLER record's cost lines, in ms."""
    text = open(path).read()
    return {name: int(us) / 1000 for name, us in re.findall(r"^cost\.(\w+)_us (\d+)$", text, re.M)}


JIT_LOOP = "CompileBroker::compiler_thread_loop"


def thread_kind(has_java_frame, frames):
    """Java, JIT (a stack through the compile broker's loop) or other JVM (GC, VM thread)."""
    if has_java_frame:
        return "Java"
    return "JIT" if any(JIT_LOOP in frame for frame in frames) else "other JVM"


def thread_kinds_openprof(samples, traces):
    """Samples of Java threads, of the JIT compilers and of the JVM's other threads."""
    kinds = collections.Counter()
    for trace, count in samples.items():
        frames = traces.get(trace, [])
        kinds[thread_kind(any(java_method(frame) for frame in frames), frames)] += count
    return kinds


def thread_kinds_async(path):
    kinds = collections.Counter()
    for line in open(path):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")
        kinds[thread_kind(any(frame.endswith(JAVA_SUFFIXES) for frame in frames), frames)] += int(count)
    return kinds


def async_profile(path):
    """(delivered, failed, [(frames root first, samples)]) from async-profiler's collapsed output,
    counting only the samples of Java threads (stacks with a Java frame, or a failed walk), as
    openprof samples only those: async-profiler also samples the JIT compilers and GC."""
    stacks, delivered, failed = [], 0, 0
    for line in open(path):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        frames, count = stack.split(";"), int(count)
        if any(frame.startswith(FAILED_MARKERS) for frame in frames):
            failed += count
        elif any(frame.endswith(JAVA_SUFFIXES) for frame in frames):
            delivered += count
        else:
            continue
        stacks.append((frames, count))
    return delivered, failed, stacks


def java_name(frame):
    """async-profiler's frame name in openprof's spelling (dots, nested classes with $)."""
    for suffix in JAVA_SUFFIXES:
        frame = frame.removesuffix(suffix)
    return frame.replace("/", ".")


def area_shares_openprof(samples, traces, total):
    shares = collections.Counter()
    for trace, count in samples.items():
        for frame in filter(None, map(java_method, traces.get(trace, []))):
            found = re.search(r"Megamorphic\$(\w+)\.area", frame)
            if found:
                shares[found.group(1)] += count
                break
    return {name: 100 * count / max(total, 1) for name, count in shares.items()}


def area_shares_async(stacks, total):
    shares = collections.Counter()
    for frames, count in stacks:
        for frame in reversed(frames):
            found = re.search(r"Megamorphic\$(\w+)\.area", java_name(frame))
            if found:
                shares[found.group(1)] += count
                break
    return {name: 100 * count / max(total, 1) for name, count in shares.items()}


def self_openprof(samples, traces):
    """Samples by leaf Java method."""
    self_samples = collections.Counter()
    for trace, count in samples.items():
        java = [method for method in map(java_method, traces.get(trace, [])) if method]
        if java:
            self_samples[java[0]] += count
    return self_samples


def self_async(stacks):
    """Samples by leaf Java method."""
    self_samples = collections.Counter()
    for frames, count in stacks:
        # The leaf Java frame: async-profiler puts native and stub frames above it.
        java = [frame for frame in frames if frame.endswith(JAVA_SUFFIXES)]
        if java:
            self_samples[java_name(java[-1])] += count
    return self_samples


def top(self_samples, n):
    return [name for name, _ in self_samples.most_common(n)]


def print_agreement(ours, theirs):
    """Top 10 of both, and how far they agree (ranks looked up in each one's top 40)."""
    print("    top 10 (self), openprof:       " + ", ".join(ours[:10]))
    print("    top 10 (self), async-profiler: " + ", ".join(theirs[:10]))
    rank = lambda ranked, name: ranked.index(name) + 1 if name in ranked else None
    shared = [name for name in ours[:10] if name in theirs[:10]]
    moves = [abs(rank(ours, name) - rank(theirs, name)) for name in shared]
    print(f"    top 10 agreement: {len(shared)} of 10 shared, largest rank difference "
          f"{max(moves, default=0)}; "
          + ", ".join(f"{name.rsplit('.', 2)[-2]}.{name.rsplit('.', 1)[-1]} is "
                      f"{rank(ours, name)} / {rank(theirs, name)}"
                      for name in sorted(set(ours[:10]) ^ set(theirs[:10]))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--async-profiler", required=True, help="libasyncProfiler.so, built outside openprof")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--classes", type=int, default=400)
    parser.add_argument("--vmthreads", action="store_true",
                        help="also profile javac's every thread (openprof vmthreads=y)")
    options = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("stack_walk: build first: cargo build --release")
    if not os.path.isfile(options.async_profiler):
        sys.exit(f"stack_walk: no async-profiler library at {options.async_profiler}")
    work = tempfile.mkdtemp(prefix="openprof-stack-walk-")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "Megamorphic.java")],
                   check=True)
    files = javac_sources(work, options.classes)
    openprof_file = os.path.join(work, "openprof.txt")
    async_file = os.path.join(work, "async.collapsed")
    openprof_option = f"{agent}=cpu=samples,interval=1,verbose=n,file={openprof_file}"
    async_option = f"{options.async_profiler}=start,event=cpu,interval=1ms,ann,collapsed,file={async_file}"
    jobs = {
        "megamorphic": lambda agentpath: [jdk_tool("java"), f"-agentpath:{agentpath}", "-cp", work,
                                          "Megamorphic", str(options.seconds)],
        "javac": lambda agentpath: [jdk_tool("javac"), f"-J-agentpath:{agentpath}", "-d",
                                    os.path.join(work, "classes"), *files],
    }
    all_ours, all_theirs = collections.Counter(), collections.Counter()
    async_rounds = []
    for job, command in jobs.items():
        print(f"{job}:")
        for round_number in range(options.rounds):
            if job == "javac" and options.vmthreads:
                # All the JVM's threads: openprof with vmthreads=y against async-profiler, which
                # samples every thread.
                all_threads = f"{agent}=cpu=samples,interval=1,vmthreads=y,depth=128,cutoff=0,verbose=n,file={openprof_file}"
                subprocess.run(command(all_threads), check=True, capture_output=True)
                _, _, samples, traces = openprof_profile(openprof_file)
                ours, cost = thread_kinds_openprof(samples, traces), costs(openprof_file)
                subprocess.run(command(async_option), check=True, capture_output=True)
                theirs = thread_kinds_async(async_file)
                share = lambda kinds, kind: 100 * kinds[kind] / max(sum(kinds.values()), 1)
                print(f"  round {round_number + 1}, all threads (vmthreads=y): openprof "
                      f"{sum(ours.values())} samples, async-profiler {sum(theirs.values())}; "
                      + ", ".join(f"{kind} {share(ours, kind):.1f} / {share(theirs, kind):.1f} %"
                                  for kind in ("Java", "JIT", "other JVM"))
                      + f"; openprof's handler {cost.get('handler', 0):.0f} ms, agent thread "
                      f"{cost.get('agent_thread', 0):.0f} ms")
            subprocess.run(command(openprof_option), check=True, capture_output=True)
            delivered, failed, samples, traces = openprof_profile(openprof_file)
            cost = costs(openprof_file)
            subprocess.run(command(async_option), check=True, capture_output=True)
            ap_delivered, ap_failed, stacks = async_profile(async_file)
            print(f"  round {round_number + 1}: openprof {delivered} delivered, {failed} failed "
                  f"({100 * failed / max(delivered + failed, 1):.1f} %); async-profiler {ap_delivered} "
                  f"delivered, {ap_failed} failed ({100 * ap_failed / max(ap_delivered + ap_failed, 1):.1f} %); "
                  f"delivered ratio {delivered / max(ap_delivered, 1):.3f}; openprof's handler "
                  f"{cost.get('handler', 0):.0f} ms, agent thread {cost.get('agent_thread', 0):.0f} ms")
            if job == "megamorphic":
                ours = area_shares_openprof(samples, traces, delivered + failed)
                theirs = area_shares_async(stacks, ap_delivered + ap_failed)
                print("    area() share of all samples, openprof / async-profiler: " + ", ".join(
                    f"{name} {ours.get(name, 0):.1f} / {theirs.get(name, 0):.1f} %"
                    for name in ("Square", "Circle", "Triangle", "Hexagon")))
            else:
                ours, theirs = self_openprof(samples, traces), self_async(stacks)
                all_ours.update(ours)
                all_theirs.update(theirs)
                async_rounds.append(theirs)
                print_agreement(top(ours, 40), top(theirs, 40))
        if job == "javac" and options.rounds > 1:
            # Ranks 8 to 10 hold a few dozen samples each in one round: the rounds together
            # say more about whether the two profilers see the same hot methods.
            print(f"  all {options.rounds} rounds together:")
            print_agreement(top(all_ours, 40), top(all_theirs, 40))
            # How far async-profiler agrees with itself from one round to the next: the noise
            # floor of the comparison above.
            for first, second in zip(async_rounds, async_rounds[1:]):
                print("  async-profiler's round against its next round:")
                print_agreement(top(first, 40), top(second, 40))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
