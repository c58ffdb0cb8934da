#!/usr/bin/env python3
"""`openprof profile`'s cost on a running JVM, against asprof's, in one run.

java/workloads/Throughput.java (--threads threads hashing, sorting and looking up) warms up for
--warmup seconds, then counts its operations for --seconds. Each round runs it these ways,
alternating:
- without a profiler;
- openprof, idle: during the warm-up `openprof profile PID -d 1 -e cpu,wall` loads the agent,
  profiles for a second and stops; the measured seconds run with the agent loaded and idle;
- async-profiler, idle: the same with `asprof -d 1 -e cpu PID` (async-profiler profiles one
  event at a time from asprof, with `--wall` beside it);
- openprof, profiling: `openprof profile start PID -e cpu,wall` during the warm-up, stopped
  after the measured seconds (cpu every 10 ms of each thread's CPU, wall every 10 ms);
- async-profiler, profiling: `asprof start -e cpu --wall 10ms PID`, stopped after.
Reported per way: the median operations over --rounds runs and their ratio to the runs without
a profiler.

async-profiler is not part of openprof: build it in a directory of its own, e.g.
  git clone https://github.com/async-profiler/async-profiler /tmp/async-profiler && make -C /tmp/async-profiler
and pass that directory with --async-profiler /tmp/async-profiler (its build/bin/asprof is used).

Usage: bench/profile.py --async-profiler DIR [--rounds N] [--threads N] [--warmup S] [--seconds S]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

from benchlib import ROOT, jdk_tool


def measure(java, classes, work, options, before):
    """Runs Throughput, with `before(pid)` during its warm-up; returns its operations."""
    process = subprocess.Popen(
        [java, "-cp", classes, "Throughput", str(options.threads), str(options.warmup),
         str(options.seconds)],
        cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    if before:
        time.sleep(0.5)
        before(process.pid)
        if time.monotonic() - started > options.warmup:
            raise RuntimeError("the profiler's start took longer than the warm-up")
    out, err = process.communicate(timeout=600)
    if process.returncode != 0:
        raise RuntimeError(f"Throughput: {err[-500:]}")
    return int(re.search(r"ops=(\d+)", out).group(1))


def run(command, work):
    result = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stdout[-300:]} {result.stderr[-500:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--async-profiler", required=True, help="async-profiler's directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--seconds", type=float, default=10)
    options = parser.parse_args()
    openprof = os.path.join(ROOT, "target", "release", "openprof")
    asprof = os.path.join(options.async_profiler, "build", "bin", "asprof")
    work = tempfile.mkdtemp(prefix="openprof-profile-")
    classes = os.path.join(work, "classes")
    subprocess.run([jdk_tool("javac"), "-d", classes,
                    os.path.join(ROOT, "java", "workloads", "Throughput.java")], check=True)
    java = jdk_tool("java")
    out = os.path.join(work, "out")

    # Throughput exits once it has printed its result: the sessions still running then end
    # with the JVM.
    ways = {
        "no profiler": None,
        "openprof, idle after a 1 s profile":
            lambda pid: run([openprof, "profile", str(pid), "-d", "1", "-e", "cpu,wall",
                             "-f", out + ".collapsed"], work),
        "async-profiler, idle after a 1 s profile":
            lambda pid: run([asprof, "-d", "1", "-e", "cpu", "-f", out + ".txt", str(pid)], work),
        "openprof, profiling cpu,wall":
            lambda pid: run([openprof, "profile", "start", str(pid), "-e", "cpu,wall"], work),
        "async-profiler, profiling cpu,wall":
            lambda pid: run([asprof, "start", "-e", "cpu", "--wall", "10ms", "-f",
                             out + ".jfr", str(pid)], work),
    }
    results = {name: [] for name in ways}
    for _ in range(options.rounds):
        for name, before in ways.items():
            results[name].append(measure(java, classes, work, options, before))
    base = statistics.median(results["no profiler"])
    print(f"Throughput, {options.threads} threads, {options.seconds:g} s measured after "
          f"{options.warmup:g} s, {options.rounds} rounds (median operations, ratio to none)")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(f"  {name:45} {median:>12.0f}  {median / base:.3f}  runs {runs}")


if __name__ == "__main__":
    main()
