#!/usr/bin/env python3
"""Wall-clock profiling's cost: openprof's wall= against async-profiler's event=wall, in one run.

java/workloads/IdleCrowd.java: --idle threads waiting the whole run beside --busy threads that
loop over two methods for --seconds; it prints the busy threads' rounds, the throughput a
profiler's cost lowers. Each round runs the workload three ways, alternating:
- without a profiler;
- with openprof (`wall=10`: at most 16 threads signalled per 10 ms);
- with async-profiler (`event=wall,interval=10ms`, collapsed output).
Reported per way: the median rounds over --rounds runs, their ratio to the run without a
profiler, and for openprof the WALL SAMPLER record's samples taken and thread-intervals skipped.

async-profiler is not part of openprof: build it in a directory of its own, e.g.
  git clone https://github.com/async-profiler/async-profiler /tmp/async-profiler && make -C /tmp/async-profiler
and pass its library with --async-profiler /tmp/async-profiler/build/lib/libasyncProfiler.so.

Usage: bench/wall.py --async-profiler LIB [--rounds N] [--idle N] [--busy N] [--seconds S]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import re
import statistics
import tempfile

from benchlib import ROOT, compile_workload, jdk_tool, run_workload


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--async-profiler", required=True, help="libasyncProfiler.so")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10)
    options = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    work = tempfile.mkdtemp(prefix="openprof-wall-")
    classes = compile_workload("IdleCrowd", work)
    args = [str(options.idle), str(options.busy), str(options.seconds)]
    ways = {
        "no profiler": None,
        "openprof wall=10": f"-agentpath:{agent}=wall=10,depth=64,file=openprof.txt",
        "async-profiler event=wall,interval=10ms":
            f"-agentpath:{options.async_profiler}=start,event=wall,interval=10ms,file=ap.collapsed",
    }
    rounds = {way: [] for way in ways}
    sampled, skipped = [], []
    java = jdk_tool("java")
    for _ in range(options.rounds):
        for way, agent_option in ways.items():
            figures = run_workload(java, classes, work, agent_option, "IdleCrowd", args)
            rounds[way].append(figures["rounds"])
            if agent_option and "openprof" in way:
                text = open(os.path.join(work, "openprof.txt")).read()
                sampled.append(sum(int(n) for n in re.findall(r"^sampled (\d+)$", text, re.M)))
                skipped.append(sum(int(n) for n in re.findall(r"^skipped (\d+)$", text, re.M)))
    base = statistics.median(rounds["no profiler"])
    print(f"IdleCrowd {options.idle} idle + {options.busy} busy threads, {options.seconds} s, "
          f"{options.rounds} rounds (median)")
    print(f"| way | busy rounds | ratio to no profiler |")
    print(f"|---|---|---|")
    for way, values in rounds.items():
        median = statistics.median(values)
        print(f"| {way} | {median:.0f} ({', '.join(map(str, values))}) | {median / base:.3f} |")
    print(f"openprof: {statistics.median(sampled):.0f} samples taken, "
          f"{statistics.median(skipped):.0f} thread-intervals skipped per run (median)")


if __name__ == "__main__":
    main()
