#!/usr/bin/env python3
"""Heap benchmarks, side by side in one run.

1. Heap dump: java/workloads/HeapFill.java keeps about --megabytes of live objects; in the same
   JVM the JDK's own dumper (`jcmd PID GC.heap_dump`, which reports its time) and openprof's
   (heap=dump,format=b, triggered by SIGQUIT; the agent reports its time) each write a dump,
   in alternating order over --rounds rounds. Reported: the times (both include the full GC
   each does first), the ratio ours/jcmd, the file sizes.
2. Allocation sampling: java/workloads/AllocChurn.java (small short-lived objects in a loop)
   without an agent, with heap=sites at the default alloc_interval (512 KiB), and with the JDK's
   own allocation sampling (JFR's jdk.ObjectAllocationSample, `profile` settings), paired per
   round in shuffled order; reported: the median throughput ratio against the run without.

Usage: bench/heap_bench.py [--megabytes MB] [--rounds N] [--alloc-rounds N] [--seconds S]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, jdk_tool



def dump_round(agent, work, megabytes, first):
    ours_file = os.path.join(work, "ours.hprof")
    jcmd_file = os.path.join(work, "jcmd.hprof")
    for path in (ours_file, jcmd_file):
        if os.path.exists(path):
            os.remove(path)
    stderr_path = os.path.join(work, "stderr.txt")
    with open(stderr_path, "w") as stderr:
        java = subprocess.Popen(
            [jdk_tool("java"), "-Xmx4g", "-Xms4g", f"-agentpath:{agent}=heap=dump,format=b,doe=n,file={ours_file}",
             "-cp", work, "HeapFill", str(megabytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert java.stdout.readline().strip() == "ready"
    results = {}

    def jcmd():
        out = subprocess.run([jdk_tool("jcmd"), str(java.pid), "GC.heap_dump", jcmd_file],
                             check=True, capture_output=True, text=True).stdout
        match = re.search(r"\[(\d+) bytes in ([0-9.]+) secs\]", out)
        results["jcmd"] = (float(match.group(2)), os.path.getsize(jcmd_file))

    def ours():
        os.kill(java.pid, signal.SIGQUIT)
        deadline = time.time() + 600
        while time.time() < deadline:
            text = open(stderr_path).read()
            match = re.search(r"Dumping Java heap \.\.\. done \((\d+) objects, \d+ bytes, \d+ classes in (\d+) ms\)", text)
            if match:
                results["ours"] = (int(match.group(2)) / 1000.0, os.path.getsize(ours_file), int(match.group(1)))
                return
            time.sleep(0.2)
        sys.exit("heap_bench: no heap dump from the agent")

    for step in ((jcmd, ours) if first == "jcmd" else (ours, jcmd)):
        step()
    java.stdin.close()
    java.wait(timeout=120)
    return results


def churn(configs, work, seconds):
    out = subprocess.run([jdk_tool("java"), *configs, "-cp", work, "AllocChurn", str(seconds)],
                         check=True, capture_output=True, text=True).stdout
    return int(re.search(r"ops=(\d+)", out).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--alloc-rounds", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("heap_bench: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-heap-bench-")
    sources = [os.path.join(ROOT, "java", "workloads", name) for name in ("HeapFill.java", "AllocChurn.java")]
    subprocess.run([jdk_tool("javac"), "-d", work, *sources], check=True)

    print(f"Heap dump of ~{args.megabytes} MB of live objects, {args.rounds} rounds")
    ratios = []
    for round_number in range(args.rounds):
        first = "jcmd" if round_number % 2 == 0 else "ours"
        results = dump_round(agent, work, args.megabytes, first)
        jcmd_time, jcmd_size = results["jcmd"]
        ours_time, ours_size, objects = results["ours"]
        ratios.append(ours_time / jcmd_time)
        print(f"  round {round_number + 1} ({first} first): jcmd {jcmd_time:.2f} s {jcmd_size / 1e6:.0f} MB; "
              f"openprof {ours_time:.2f} s {ours_size / 1e6:.0f} MB, {objects} objects; ratio {ours_time / jcmd_time:.2f}")
    print(f"  median time ratio openprof/jcmd: {statistics.median(ratios):.2f}")

    print(f"Allocation sampling on AllocChurn, {args.alloc_rounds} rounds of {args.seconds} s")
    configs = {
        "openprof heap=sites (512 KiB)": [f"-agentpath:{agent}=heap=sites,verbose=n,file={work}/sites.txt"],
        "JFR profile (ObjectAllocationSample)": [f"-XX:StartFlightRecording=settings=profile,filename={work}/rec.jfr"],
    }
    paired = {name: [] for name in configs}
    for _ in range(args.alloc_rounds):
        order = ["none", *configs]
        random.shuffle(order)
        ops = {name: churn(configs.get(name, []), work, args.seconds) for name in order}
        for name in configs:
            paired[name].append(ops[name] / ops["none"])
    for name, values in paired.items():
        print(f"  {name}: median throughput ratio {statistics.median(values):.4f} "
              f"(min {min(values):.4f}, max {max(values):.4f})")


if __name__ == "__main__":
    main()
