#!/usr/bin/env python3
"""Trace format benchmarks (BENCHMARKS.md, "The trace format"), in one run.

1. Records a trace of at least 1M elements with the agent (java/workloads/Calls.java under
   format=x,cpu=times), then times openprof's trace reader and writer over it on one core
   (cargo bench -p openprof-format --bench trace_throughput).
2. Measures what tracing costs a running program, as throughput ratios, configurations
   interleaved over rounds: java/workloads/Throughput.java (calls that do real work) and
   java/workloads/CallRate.java (calls that do almost nothing) without the agent, with cpu=times
   filtered to a class the workload never uses (its own classes untouched), with cpu=times in
   HPROF text filtered to the workload's class (its methods rewritten to report every call),
   with format=x and format=x,cpu=times (Throughput only), and, given --async-profiler, with
   async-profiler's tracing of the workload's hot method (event=Class.method, a stack recorded
   per call). (The JDK no longer ships a per-call tracer: HPROF's cpu=times left with JDK 9,
   and JFR does not trace calls.)

Usage: bench/trace_bench.py [--rounds N] [--seconds S] [--async-profiler LIB]
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
    parser.add_argument("--async-profiler", metavar="LIB",
                        help="async-profiler's libasyncProfiler.so, built outside openprof: its "
                             "method tracing (event=Class.method) side by side")
    args = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("trace_bench: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-trace-bench-")
    workloads = os.path.join(ROOT, "java", "workloads")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(workloads, "Calls.java"),
                    os.path.join(workloads, "Throughput.java"),
                    os.path.join(workloads, "CallRate.java")], check=True)

    trace = os.path.join(work, "recorded.xml")
    subprocess.run([jdk_tool("java"), f"-agentpath:{agent}=format=x,cpu=times,filter=+Calls;-*,file={trace}",
                    "-cp", work, "Calls", "500000", "1000"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cargo", "bench", "-q", "-p", "openprof-format", "--bench", "trace_throughput", "--", trace],
                   cwd=ROOT, check=True)

    # Two workloads: Throughput's operation() does real work (a few microseconds a call);
    # CallRate's step() and mix() do almost nothing, so a call's own cost is all there is.
    # format=x is left out on CallRate: at millions of calls a second it would write gigabytes.
    workloads = {
        "Throughput": ("Throughput.operation", True),
        "CallRate": ("CallRate.mix", False),
    }
    print(f"\nrounds={args.rounds} seconds={args.seconds} threads=1")
    print(f"{'workload':11} {'configuration':44} {'median ops':>13} {'ratio':>8} {'slowdown':>9}")
    for workload, (method, with_trace) in workloads.items():
        filt = f"filter=+{workload};-*"
        configs = {
            "none": [],
            # The filter names a class the workload never uses: its classes stay untouched.
            "cpu=times, the workload's classes left out": [
                f"-agentpath:{agent}=cpu=times,filter=+java.util.zip.Adler32;-*,verbose=n,file={work}/u.txt"],
            "cpu=times (text)": [f"-agentpath:{agent}=cpu=times,{filt},verbose=n,file={work}/t.txt"],
        }
        if with_trace:
            configs["format=x"] = [f"-agentpath:{agent}=format=x,file={work}/x.xml"]
            configs["format=x,cpu=times"] = [
                f"-agentpath:{agent}=format=x,cpu=times,{filt},file={work}/xt.xml"]
        if args.async_profiler:
            configs[f"async-profiler event={method}"] = [
                f"-agentpath:{args.async_profiler}=start,event={method},collapsed,file={work}/ap.txt"]
        results = {name: [] for name in configs}
        for round_number in range(args.rounds):
            order = list(configs)
            random.shuffle(order)
            for name in order:
                command = [jdk_tool("java"), *configs[name], "-cp", work, workload, "1", "1",
                           str(args.seconds)]
                out = subprocess.run(command, capture_output=True, text=True, check=True)
                results[name].append(int(re.search(r"ops=(\d+)", out.stdout).group(1)))
                print(f"round {round_number + 1} {workload} {name:44} ops={results[name][-1]}",
                      file=sys.stderr)
        for name, values in results.items():
            ratio = statistics.median([v / b for v, b in zip(values, results["none"])])
            print(f"{workload:11} {name:44} {statistics.median(values):13.0f} {ratio:8.4f} "
                  f"{1 / ratio:8.1f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
