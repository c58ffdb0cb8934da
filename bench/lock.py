#!/usr/bin/env python3
"""Lock profiling's cost: openprof's lock= against async-profiler's event=lock, in one run.

java/workloads/LockStorm.java, in three phases of --seconds each: --lockers threads take turns
on one fair ReentrantLock, holding it for --work steps of arithmetic (enough that nearly every
turn is a park and an unpark), --monitors threads on one synchronized monitor the same way, then
--pairs producer-consumer pairs hand numbers through a SynchronousQueue; it prints the lock
turns, monitor enters and hand-overs made, the throughput a profiler's cost lowers. Each round runs the workload these ways, in a shuffled order:
- without a profiler;
- openprof `lock=0` (every contended monitor enter and every park timed and recorded);
- openprof `lock=0,lockowner=y` (and the owner's stack taken at each wait's start);
- openprof `lock=1ms` (every wait timed, only those of 1 ms or more recorded);
- async-profiler `event=lock,lock=0` (every contended monitor enter, and the parks of
  ReentrantLock, ReentrantReadWriteLock and Semaphore, recorded; collapsed output).
Each way's figures are compared with the run without a profiler of the same round (a paired
ratio, which cancels the machine's drift between rounds). Reported per way and figure: the
median of those ratios and their range, and the waits each profile recorded (its counts) in the
last round.

A wait is recorded on the waiting thread once it has the lock, so what recording costs is
spent inside the critical section: the fair lock's turns show it whole. HotSpot's monitors spin
before they block and are not fair, and SynchronousQueue spins before it parks: fewer of the
monitor enters and hand-overs wait, and their figures show what timing costs those that do.
With short critical sections (a small --work) a fair lock's throughput swings between runs by
a factor of several, profiler or not: keep --work large enough that turns always park.

async-profiler is not part of openprof: build it in a directory of its own, e.g.
  git clone https://github.com/async-profiler/async-profiler /tmp/async-profiler && make -C /tmp/async-profiler
and pass its library with --async-profiler /tmp/async-profiler/build/lib/libasyncProfiler.so.

Usage: bench/lock.py --async-profiler LIB [--rounds N] [--lockers N] [--monitors N] [--pairs N]
                     [--seconds S] [--work STEPS]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import random
import re
import statistics
import tempfile

from benchlib import ROOT, compile_workload, jdk_tool, run_workload

FIGURES = ("turns", "enters", "handovers")


def openprof_waits(path):
    """Waits recorded in an HPROF text's MONITOR TIME and PARK TIME tables."""
    waits, table = 0, None
    for line in open(path):
        if line.startswith(("MONITOR TIME BEGIN", "PARK TIME BEGIN")):
            table = True
        elif line.startswith(("MONITOR TIME END", "PARK TIME END")):
            table = None
        elif table and re.match(r"\s*\d+ ", line):
            waits += int(line.split()[3])
    return waits


def async_profiler_waits(path):
    """Samples in async-profiler's collapsed output (with lock=0, one a wait): its counts."""
    return sum(int(line.rsplit(" ", 1)[1]) for line in open(path) if line.strip())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--async-profiler", required=True, help="libasyncProfiler.so")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lockers", type=int, default=6)
    parser.add_argument("--monitors", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--work", type=int, default=20000)
    options = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    work = tempfile.mkdtemp(prefix="openprof-lock-")
    classes = compile_workload("LockStorm", work)
    args = [str(options.lockers), str(options.monitors), str(options.pairs),
            str(options.seconds), str(options.work)]
    openprof = f"-agentpath:{agent}=depth=64,file=openprof.txt,"
    ways = {
        "no profiler": None,
        "openprof `lock=0`": openprof + "lock=0",
        "openprof `lock=0,lockowner=y`": openprof + "lock=0,lockowner=y",
        "openprof `lock=1ms`": openprof + "lock=1ms",
        "async-profiler `event=lock,lock=0`":
            f"-agentpath:{options.async_profiler}=start,event=lock,lock=0,file=ap.collapsed",
    }
    figures = {way: [] for way in ways}
    recorded = {}
    java = jdk_tool("java")
    order = list(ways)
    for _ in range(options.rounds):
        random.shuffle(order)
        for way in order:
            agent_option = ways[way]
            figures[way].append(run_workload(java, classes, work, agent_option, "LockStorm", args))
            if agent_option and "openprof" in way:
                recorded[way] = openprof_waits(os.path.join(work, "openprof.txt"))
            elif agent_option:
                recorded[way] = async_profiler_waits(os.path.join(work, "ap.collapsed"))
    base = figures["no profiler"]
    print(f"LockStorm {options.lockers} lockers, {options.monitors} monitor threads, "
          f"{options.pairs} queue pairs, {options.seconds} s each, {options.work} steps of work, "
          f"{options.rounds} rounds: median ratio to no profiler (range), paired by round")
    print("| way | lock turns | monitor enters | hand-overs | waits recorded (last round) |")
    print("|---|---|---|---|---|")
    for way, runs in figures.items():
        cells = []
        for name in FIGURES:
            if way == "no profiler":
                values = [run[name] for run in runs]
                cells.append(f"{statistics.median(values):.0f} ({min(values)}-{max(values)})")
                continue
            ratios = [run[name] / paired[name] for run, paired in zip(runs, base)]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        print(f"| {way} | {' | '.join(cells)} | {recorded.get(way, '')} |")


if __name__ == "__main__":
    main()
