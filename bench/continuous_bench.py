#!/usr/bin/env python3
"""The cost of continuous mode, side by side in one run.

Runs java/workloads/Throughput.java (CPU-bound, on every core) in rounds of shuffled
configurations, each compared with the run without a profiler of the same round (a paired
ratio of operations, and of operations per CPU-second of the whole JVM):
- openprof cpu=samples (interval=10, the default) streaming to a collector (`openprof serve`
  on loopback), its profile at exit only;
- the same with continuous=10s and continuous=1s: a profile window every 10 s or every second,
  shipped to the collector;
- async-profiler's agent, event=cpu, interval=10ms, loop=10s and loop=1s: a JFR file per period
  (its continuous mode), with --async-profiler LIB.
Reported: medians of the paired ratios, their range, and the windows the collector stored.

Usage: bench/continuous_bench.py [--rounds N] [--seconds S] [--warmup W] [--threads T]
       [--async-profiler LIB]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
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

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
TOKEN = "bench-token"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--async-profiler", help="async-profiler's libasyncProfiler.so")
    args = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent) or not os.path.isfile(OPENPROF):
        sys.exit("continuous_bench: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-continuous-")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "Throughput.java")],
                   check=True)
    store = os.path.join(work, "store")
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", store],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=dict(os.environ, OPENPROF_TOKEN=TOKEN))
    address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
    net = f"net={address},token={TOKEN},verbose=n"
    configs = {
        "none": [],
        "openprof cpu=samples, at exit": [f"-agentpath:{agent}=cpu=samples,format=b,{net}"],
        "openprof continuous=10s": [f"-agentpath:{agent}=cpu=samples,format=b,continuous=10s,{net}"],
        "openprof continuous=1s": [f"-agentpath:{agent}=cpu=samples,format=b,continuous=1s,{net}"],
    }
    if args.async_profiler:
        for loop in ("10s", "1s"):
            jfr = os.path.join(work, f"ap-{loop}-%t.jfr")
            configs[f"async-profiler loop={loop}"] = [
                f"-agentpath:{args.async_profiler}=start,event=cpu,interval=10ms,loop={loop},file={jfr}"]
    results = {name: [] for name in configs}
    efficiency = {name: [] for name in configs}
    for round_number in range(args.rounds):
        order = list(configs)
        random.shuffle(order)
        for name in order:
            command = [jdk_tool("java"), *configs[name], "-cp", work, "Throughput",
                       str(args.threads), str(args.warmup), str(args.seconds)]
            output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600).stdout
            found = re.search(r"ops=(\d+) cpu_ns=(\d+)", output)
            ops, cpu_ns = int(found.group(1)), int(found.group(2))
            results[name].append(ops)
            efficiency[name].append(ops / cpu_ns)
            print(f"round {round_number + 1} {name:32} ops={ops}", file=sys.stderr)
    serve.terminate()
    serve.wait()
    listed = subprocess.run([OPENPROF, "ls", "--store", store], capture_output=True, text=True).stdout
    frames = sum(int(count) for count in re.findall(r": (\d+) frames", listed))

    print(f"rounds={args.rounds} seconds={args.seconds} warmup={args.warmup} threads={args.threads}")
    print(f"{'configuration':32} {'median ops':>11} {'ratio':>7} {'range':>12} {'ops/CPU ratio':>14} {'range':>12}")
    for name, values in results.items():
        ratios = [value / base for value, base in zip(values, results["none"])]
        cpu_ratios = [value / base for value, base in zip(efficiency[name], efficiency["none"])]
        print(f"{name:32} {statistics.median(values):11.0f} {statistics.median(ratios):7.4f}"
              f" {min(ratios):5.3f}-{max(ratios):5.3f} {statistics.median(cpu_ratios):14.4f}"
              f" {min(cpu_ratios):5.3f}-{max(cpu_ratios):5.3f}")
    print(f"the collector stored {frames} frames from {listed.count('agent ')} agents")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
