#!/usr/bin/env python3
"""Heap dump analysis: openprof heap against VisualVM's heap library, on the same dump.

java/workloads/HeapFill.java keeps about --megabytes of live objects; the JDK's dumper
(`jcmd PID GC.heap_dump`) writes them to one file (or --dump names a dump to use). Then, in
alternating order over --rounds rounds, each tool reads the dump and computes the dominator
tree and every retained size:

- openprof: `openprof heap DUMP --dominators 5 --top 5` (reading, dominators, retained sizes
  of objects, the exact retained sizes of the top 5 classes);
- VisualVM: java/heapcheck/VisualVmRetained.java `top 5` on Debian's visualvm heap library
  (HeapFactory.createHeap, then getBiggestObjectsByRetainedSize: its index, dominator tree and
  retained sizes), run headless with -Xmx4g; its cache files removed between rounds.

Each run's wall time and peak resident memory come from /usr/bin/time -f '%e %M'. Reported: each
round, the medians, and the ratio of peak memory to the dump's size. With --memory-limit, an
extra openprof run with that limit (its references spilled to disk).

Usage: bench/heap_analysis.py [--megabytes MB] [--rounds N] [--dump FILE] [--memory-limit SIZE]
Needs: cargo build --release -p openprof-cli, a JDK, /usr/bin/time, Debian's visualvm.
"""
import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, jdk_tool

LIBRARY_GLOB = "/usr/share/visualvm/visualvm/modules/*jfluid-heap*.jar"


def make_dump(work, megabytes):
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "HeapFill.java")],
                   check=True)
    java = subprocess.Popen([jdk_tool("java"), "-Xmx4g", "-Xms4g", "-cp", work, "HeapFill", str(megabytes)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert java.stdout.readline().strip() == "ready"
    dump = os.path.join(work, "fill.hprof")
    subprocess.run([jdk_tool("jcmd"), str(java.pid), "GC.heap_dump", dump], check=True, capture_output=True)
    java.stdin.close()
    java.wait(timeout=120)
    return dump


def timed(command, log):
    """Runs a command under /usr/bin/time; returns (seconds, peak KB)."""
    with open(log, "w") as out:
        result = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *command], stdout=out,
                                stderr=subprocess.STDOUT)
    text = open(log).read()
    if result.returncode != 0:
        sys.exit(f"heap_analysis: {' '.join(command)} failed:\n{text[-2000:]}")
    seconds, kilobytes = re.findall(r"TIME ([0-9.]+) (\d+)", text)[-1]
    return float(seconds), int(kilobytes)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dump")
    parser.add_argument("--memory-limit")
    args = parser.parse_args()
    openprof = os.path.join(ROOT, "target", "release", "openprof")
    if not os.path.isfile(openprof):
        sys.exit("heap_analysis: build first: cargo build --release -p openprof-cli")
    libraries = sorted(glob.glob(LIBRARY_GLOB))
    if not libraries:
        sys.exit("heap_analysis: VisualVM's heap library is missing: apt-get install visualvm")
    work = tempfile.mkdtemp(prefix="openprof-heap-analysis-")
    subprocess.run([jdk_tool("javac"), "-cp", libraries[0], "-d", work,
                    os.path.join(ROOT, "java", "heapcheck", "VisualVmRetained.java")], check=True)
    dump = args.dump or make_dump(work, args.megabytes)
    dump_bytes = os.path.getsize(dump)
    print(f"Dump {dump}: {dump_bytes / 1e6:.0f} MB; {args.rounds} rounds")

    def ours():
        return timed([openprof, "heap", dump, "--dominators", "5", "--top", "5"], os.path.join(work, "ours.log"))

    def visualvm():
        # The library keeps its index beside the dump (DUMP.hwcache): each round starts cold.
        for cache in glob.glob(dump + ".hwcache") + glob.glob(os.path.join(os.path.dirname(dump), "*.nps")):
            os.remove(cache) if os.path.isfile(cache) else shutil.rmtree(cache)
        return timed([jdk_tool("java"), "-Xmx4g", "-Djava.awt.headless=true", "-cp",
                      f"{libraries[0]}:{work}", "VisualVmRetained", dump, "top", "5"],
                     os.path.join(work, "visualvm.log"))

    results = {"openprof": [], "visualvm": []}
    for round_number in range(args.rounds):
        order = [("openprof", ours), ("visualvm", visualvm)]
        if round_number % 2:
            order.reverse()
        for name, run in order:
            seconds, kilobytes = run()
            results[name].append((seconds, kilobytes))
            print(f"  round {round_number + 1}: {name} {seconds:.1f} s, peak {kilobytes / 1024:.0f} MiB")
    for name, runs in results.items():
        seconds = statistics.median(run[0] for run in runs)
        kilobytes = statistics.median(run[1] for run in runs)
        print(f"  median {name}: {seconds:.1f} s, peak {kilobytes / 1024:.0f} MiB "
              f"({kilobytes * 1024 / dump_bytes:.2f}x the dump)")
    print("  openprof's top:")
    print("".join("    " + line for line in open(os.path.join(work, "ours.log")).readlines()[:12]))
    print("  VisualVM's top:")
    print("".join("    " + line for line in open(os.path.join(work, "visualvm.log")).readlines()))
    if args.memory_limit:
        seconds, kilobytes = timed([openprof, "heap", dump, "--top", "5", "--memory-limit", args.memory_limit],
                                   os.path.join(work, "limited.log"))
        print(f"  openprof --memory-limit {args.memory_limit}: {seconds:.1f} s, peak {kilobytes / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
