#!/usr/bin/env python3
"""What walking native frames costs, side by side in one run.

Runs java/workloads/NativeDeflate.java (the main thread compresses with java.util.zip.Deflater,
so nearly all its CPU is in zlib under a JNI method: every sample has native frames) for a fixed
amount of its own CPU time, without a profiler, with openprof at interval=1 with `cstack=no`
(Java frames only), with `cstack=fp` (native frames by frame pointers) and with `cstack=dwarf`
(native frames by the libraries' call frame information too), and, with --async-profiler LIB,
with async-profiler (`event=cpu,interval=1ms`, its default native stack walking), in a shuffled
order over several rounds. Reported per configuration: the work done per CPU-second of the
main thread against the run without a profiler of the same round (median of those ratios and
their range), and for openprof the time its signal handler took per sample (the CPU SAMPLER
record's cost.handler_us over its samples), the CPU of its agent thread (cost.agent_thread_us)
and the time spent building unwind tables (cost.unwind_tables_us, cstack=dwarf only).

Usage: bench/native_overhead.py [--rounds N] [--seconds S] [--async-profiler LIB]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--async-profiler", help="libasyncProfiler.so, built outside openprof")
    options = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("native_overhead: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-native-")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "NativeDeflate.java")],
                   check=True)
    profile = os.path.join(work, "profile.txt")
    configs = {
        "none": [],
        "openprof cstack=no": [f"-agentpath:{agent}=cpu=samples,interval=1,cstack=no,verbose=n,file={profile}"],
        "openprof cstack=fp": [f"-agentpath:{agent}=cpu=samples,interval=1,cstack=fp,verbose=n,file={profile}"],
        "openprof cstack=dwarf": [
            f"-agentpath:{agent}=cpu=samples,interval=1,cstack=dwarf,verbose=n,file={profile}"],
    }
    if options.async_profiler:
        configs["async-profiler"] = [
            f"-agentpath:{options.async_profiler}=start,event=cpu,interval=1ms,collapsed,file={work}/ap.txt"]
    rates = {name: [] for name in configs}
    handler_us = {name: [] for name in configs}
    agent_thread_ms = {name: [] for name in configs}
    tables_ms = {name: [] for name in configs}
    for round_number in range(options.rounds):
        order = list(configs)
        random.shuffle(order)
        for name in order:
            command = [jdk_tool("java"), *configs[name], "-cp", work, "NativeDeflate", str(options.seconds)]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            found = re.search(r"inputs=(\d+) cpu_ns=(\d+)", output)
            rates[name].append(int(found.group(1)) * (1 << 20) / (int(found.group(2)) / 1e9))
            if name.startswith("openprof"):
                text = open(profile).read()
                spent = sum(map(int, re.findall(r"^cost\.handler_us (\d+)$", text, re.M)))
                samples = sum(map(int, re.findall(r"CPU SAMPLES BEGIN \(total = (\d+)\)", text)))
                handler_us[name].append(spent / max(samples, 1))
                agent_thread_ms[name].append(
                    sum(map(int, re.findall(r"^cost\.agent_thread_us (\d+)$", text, re.M))) / 1000)
                tables = re.findall(r"^cost\.unwind_tables_us (\d+)$", text, re.M)
                if tables:
                    tables_ms[name].append(sum(map(int, tables)) / 1000)
            print(f"round {round_number + 1} {name:22} {rates[name][-1] / 1e6:.1f} MB/CPU-s", file=sys.stderr)
    print(f"rounds={options.rounds} seconds={options.seconds}")
    print(f"{'configuration':22} {'MB/CPU-s':>9} {'ratio':>7} {'range':>12}  handler µs/sample"
          f"  agent thread ms  tables ms")
    for name, values in rates.items():
        ratios = [value / base for value, base in zip(values, rates["none"])]
        handler = f"{statistics.median(handler_us[name]):.1f}" if handler_us[name] else ""
        agent_thread = f"{statistics.median(agent_thread_ms[name]):.1f}" if agent_thread_ms[name] else ""
        tables = f"{statistics.median(tables_ms[name]):.1f}" if tables_ms[name] else ""
        print(f"{name:22} {statistics.median(values) / 1e6:9.1f} {statistics.median(ratios):7.4f}"
              f" {min(ratios):5.3f}-{max(ratios):5.3f}  {handler:>17}  {agent_thread:>15}  {tables:>9}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
