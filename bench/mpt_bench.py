#!/usr/bin/env python3
"""Method parameter tracing benchmarks, side by side in one run (java/workloads/MptBench.java).

1. Cost of a traced call: MptBench calls plain(int) and chained(Key) --calls times each, without
   the agent and with mpt= tracing "MptBench.plain(int) 1" (no modifier) and
   "MptBench.chained(Key) 1 field:name" (a chain: a field read, then a String's contents).
   Reported per round: ns per call with and without, and the difference (the cost of tracing).
   The agent writes HPROF text (format=a): values are aggregated in the agent.
2. Untraced code: MptBench's hash loop for --seconds, without the agent and with the agent
   tracing the two methods above (which the loop never calls), in shuffled order per round.
   Reported: the median throughput ratio (goal: within 1 %).

With --sampled, the agent also runs with CPU sampling (cpu=samples,interval=10) as "sampled":
each traced call then also tags its thread's samples with its values (MPT SAMPLES), so
"sampled" against "with" is what that tagging (and the sampling) costs a traced call.

With --baseline-agent LIB, another build of the agent (an earlier commit's
target/release/libopenprof_agent.so) runs in the same rounds as "baseline", so a change to the
agent is measured against the code before it side by side.

Usage: bench/mpt_bench.py [--calls N] [--rounds N] [--seconds S] [--sampled] [--baseline-agent LIB]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, jdk_tool

SPECS = "MptBench.plain(int) 1\nMptBench.chained(Key) 1 field:name\n"


def run(work, agent, args):
    command = [jdk_tool("java")]
    if agent:
        command.append(f"-agentpath:{agent}")
    command += ["-cp", work, "MptBench"] + args
    out = subprocess.run(command, cwd=work, check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.split() if "=" in line)


def mpt_calls(profile):
    """The finished calls the profile's last MPT record counts (each call once per spec)."""
    calls = None
    with open(profile) as file:
        for line in file:
            match = re.match(r"MPT BEGIN \(tables = \d+, calls = (\d+),", line)
            if match:
                calls = int(match.group(1))
    return calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--sampled", action="store_true",
                        help="also run the agent with cpu=samples (traced calls tag their samples)")
    parser.add_argument("--baseline-agent", help="another build of the agent library to compare with")
    options = parser.parse_args()
    library = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.exists(library):
        sys.exit("build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-mpt-bench-")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "MptBench.java")],
                   check=True)
    specs = os.path.join(work, "bench.mpt")
    with open(specs, "w") as file:
        file.write(SPECS)
    # (name, -agentpath value, the profile it writes)
    agents = [("with", f"{library}=mpt=@{specs},file={os.path.join(work, 'out.txt')}",
               os.path.join(work, "out.txt"))]
    if options.sampled:
        sampled = os.path.join(work, "sampled.txt")
        agents.append(("sampled", f"{library}=mpt=@{specs},cpu=samples,interval=10,file={sampled}",
                       sampled))
    if options.baseline_agent:
        if not os.path.exists(options.baseline_agent):
            sys.exit(f"no agent library at {options.baseline_agent}")
        baseline = os.path.abspath(options.baseline_agent)
        agents.append(("baseline", f"{baseline}=mpt=@{specs},file={os.path.join(work, 'base.txt')}",
                       os.path.join(work, "base.txt")))
    variants = [("without", None)] + [(name, agent) for name, agent, _ in agents]

    print(f"1. traced calls: {options.calls:,} calls of each method per run, {options.rounds} rounds")
    costs = {(name, method): [] for name, _, _ in agents for method in ("plain", "chained")}
    for round_number in range(options.rounds):
        order = list(variants)
        random.shuffle(order)
        results = {name: run(work, agent, ["calls", str(options.calls)]) for name, agent in order}
        for name, _, profile in agents:
            traced_calls = mpt_calls(profile)
            if traced_calls != 2 * options.calls:
                sys.exit(f"the agent ({name}) traced {traced_calls:,} calls, not {2 * options.calls:,}: "
                         "the figures would not be those of traced calls")
        line = []
        for method in ("plain", "chained"):
            without = int(results["without"][f"{method}_ns"]) / options.calls
            for name, _, _ in agents:
                with_agent = int(results[name][f"{method}_ns"]) / options.calls
                costs[(name, method)].append(with_agent - without)
                line.append(f"{method}: {without:.1f} -> {with_agent:.1f} ns/call ({name})")
        print(f"   round {round_number + 1}: " + "; ".join(line))
    for (name, method), values in costs.items():
        print(f"   {method} ({name}): median cost of tracing {statistics.median(values):.0f} ns per call")

    print(f"2. untraced code: hash loop for {options.seconds} s, {options.rounds} rounds")
    ratios = {name: [] for name, _, _ in agents}
    for round_number in range(options.rounds):
        order = list(variants)
        random.shuffle(order)
        rounds = {name: int(run(work, agent, ["compute", str(options.seconds)])["rounds"])
                  for name, agent in order}
        line = [f"without {rounds['without']:,}"]
        for name in ratios:
            ratio = rounds[name] / rounds["without"]
            ratios[name].append(ratio)
            line.append(f"{name} {rounds[name]:,}: ratio {ratio:.4f}")
        print(f"   round {round_number + 1}: " + ", ".join(line))
    for name, values in ratios.items():
        print(f"   median throughput {name}/without: {statistics.median(values):.4f} "
              f"(range {min(values):.4f}-{max(values):.4f})")


if __name__ == "__main__":
    main()
