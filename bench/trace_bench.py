#!/usr/bin/env python3
"""Trace format benchmarks (BENCHMARKS.md, "The trace format"), in one run.

1. Records a trace of at least 1M elements with the agent (java/workloads/Calls.java under
   format=x,cpu=times), then times openprof's trace reader and writer over it on one core
   (cargo bench -p openprof-format --bench trace_throughput).
2. Measures what tracing costs a running program: java/workloads/Throughput.java without the
   agent, with format=x (threads, classes, GC, exceptions), with format=x,cpu=times (method entry
   and exit through JVMTI events) and with cpu=times in HPROF text, filtered to the workload's
   class, interleaved over rounds, as throughput ratios. (The JDK no longer ships a per-call
   tracer to compare with: HPROF's cpu=times left with JDK 9, and JFR does not trace calls.)

Usage: bench/trace_bench.py [--rounds N] [--seconds S]
Needs: cargo build --release, a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, jdk_tool



def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4)
    args = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("trace_bench: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-trace-bench-")
    workloads = os.path.join(ROOT, "java", "workloads")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(workloads, "Calls.java"),
                    os.path.join(workloads, "Throughput.java")], check=True)

    trace = os.path.join(work, "recorded.xml")
    subprocess.run([jdk_tool("java"), f"-agentpath:{agent}=format=x,cpu=times,filter=+Calls;-*,file={trace}",
                    "-cp", work, "Calls", "500000", "1000"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cargo", "bench", "-q", "-p", "openprof-format", "--bench", "trace_throughput", "--", trace],
                   cwd=ROOT, check=True)

    filt = "filter=+Throughput;-*"
    configs = {
        "none": [],
        "format=x": [f"-agentpath:{agent}=format=x,file={work}/x.xml"],
        "format=x,cpu=times": [f"-agentpath:{agent}=format=x,cpu=times,{filt},file={work}/xt.xml"],
        "cpu=times (text)": [f"-agentpath:{agent}=cpu=times,{filt},verbose=n,file={work}/t.txt"],
    }
    results = {name: [] for name in configs}
    for round_number in range(args.rounds):
        order = list(configs)
        random.shuffle(order)
        for name in order:
            command = [jdk_tool("java"), *configs[name], "-cp", work, "Throughput", "1", "1", str(args.seconds)]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            results[name].append(int(re.search(r"ops=(\d+)", out.stdout).group(1)))
            print(f"round {round_number + 1} {name:22} ops={results[name][-1]}", file=sys.stderr)
    print(f"\nrounds={args.rounds} seconds={args.seconds} threads=1")
    print(f"{'configuration':22} {'median ops':>11} {'ratio':>8} {'slowdown':>9}")
    for name, values in results.items():
        ratio = statistics.median([v / b for v, b in zip(values, results["none"])])
        print(f"{name:22} {statistics.median(values):11.0f} {ratio:8.4f} {1 / ratio:8.1f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
