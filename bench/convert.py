#!/usr/bin/env python3
"""openprof convert's throughput, and async-profiler's jfrconv on the same JFR file, in one run.

Inputs, made here:
- an HPROF text profile of javac compiling --classes generated classes under openprof
  (cpu=samples,interval=1,depth=256,cutoff=0, thread=y);
- a JFR recording of the same javac job by the JDK's Flight Recorder (settings=profile, execution
  samples every 1 ms);
- synthetic HPROF text profiles of --stacks distinct stacks (default 10,000 and 100,000), each 20
  to 60 frames deep over a pool of 5,000 methods, which is what a large real profile looks like to
  the converter.

Each input is converted to every output openprof writes (folded stacks, HTML, pprof, speedscope),
--rounds times; reported: the median wall time, stacks/s (distinct stacks in the input), MB/s of
input, and the converter's peak resident memory (GNU time). The JFR file is also converted by
async-profiler's jfrconv (--jfrconv PATH, built outside openprof) to collapsed and HTML. Each HTML
page is then opened in headless Chromium (the test suite's Playwright driver) and the time until
the flame graph is drawn is reported, median of --rounds.

Usage: bench/convert.py [--jfrconv PATH] [--rounds N] [--classes N] [--stacks N ...]
Needs: cargo build --release, a JDK (JAVA_HOME or PATH), /usr/bin/time; for the load times,
Chromium and target/browser-tests (made by the test suite's first HTML test).
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, javac_sources, jdk_tool

OUTPUTS = ["collapsed", "html", "pb.gz", "json"]


def synthetic_hprof(path, stacks, seed=1, max_count=50):
    """An HPROF text profile of `stacks` distinct traces, CPU SAMPLES listing every one, each
    with 1 to `max_count` samples."""
    rng = random.Random(seed)
    methods = [f"com.example.p{i % 50}.Class{i % 700}.method{i}" for i in range(5000)]
    with open(path, "w") as out:
        out.write("JAVA PROFILE 1.0.1, created Mon Nov 23 10:00:00 2026\n\n--------\n\n")
        counts = []
        for index in range(stacks):
            serial = 300001 + index
            depth = rng.randint(20, 60)
            # Shared roots, diverging leaves: as real stacks are.
            frames = [methods[(index * 7919 + level * 104729) % 5000 if level > 8 else level]
                      for level in range(depth)]
            out.write(f"TRACE {serial}:\n")
            for level, method in enumerate(reversed(frames)):
                out.write(f"\t{method}(Source.java:{10 + level})\n")
            counts.append((serial, rng.randint(1, max_count)))
        total = sum(count for _, count in counts)
        counts.sort(key=lambda pair: -pair[1])
        out.write(f"CPU SAMPLES BEGIN (total = {total}) Mon Nov 23 10:00:10 2026\n")
        out.write("rank   self  accum   count trace method\n")
        accum = 0.0
        for rank, (serial, count) in enumerate(counts, 1):
            share = 100.0 * count / total
            accum += share
            out.write(f"{rank:4} {share:5.2f}% {accum:5.2f}% {count:7} {serial} method\n")
        out.write("CPU SAMPLES END\n")


def timed(command):
    """(seconds, peak RSS in MiB) of a command, which must succeed."""
    started = time.monotonic()
    result = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()[-500:]}")
    peak_kib = int(result.stderr.strip().splitlines()[-1])
    return elapsed, peak_kib / 1024


BROWSER_DEPS = os.path.join(ROOT, "target", "browser-tests")
DRIVER = os.path.join(ROOT, "crates", "cli", "tests", "browser", "flamegraph.mjs")


def load_millis(page, rounds):
    """Median time until the page's flame graph is drawn in headless Chromium, or None."""
    if not os.path.isdir(os.path.join(BROWSER_DEPS, "node_modules")):
        return None
    times = []
    for _ in range(rounds):
        result = subprocess.run(["node", DRIVER, page], capture_output=True, text=True,
                                env={**os.environ, "OPENPROF_BROWSER_DEPS": BROWSER_DEPS})
        if result.returncode != 0:
            return None
        times.append(json.loads(result.stdout)["loadMillis"])
    return statistics.median(times)


def distinct_stacks(collapsed_path):
    with open(collapsed_path) as lines:
        return sum(1 for _ in lines)


def measure(label, command_for, input_path, stacks, rounds):
    size_mb = os.path.getsize(input_path) / 1e6
    runs = [timed(command_for()) for _ in range(rounds)]
    seconds = statistics.median(run[0] for run in runs)
    peak = max(run[1] for run in runs)
    print(f"| {label} | {size_mb:.1f} | {stacks:,} | {seconds:.2f} | {stacks / seconds:,.0f} | "
          f"{size_mb / seconds:.1f} | {peak:.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jfrconv", help="async-profiler's jfrconv, built outside openprof")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--classes", type=int, default=400)
    parser.add_argument("--stacks", type=int, nargs="*", default=[10_000, 100_000])
    options = parser.parse_args()
    openprof = os.path.join(ROOT, "target", "release", "openprof")
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not (os.path.isfile(openprof) and os.path.isfile(agent)):
        sys.exit("convert: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-convert-bench-")
    files = javac_sources(work, options.classes)
    hprof = os.path.join(work, "javac.hprof.txt")
    subprocess.run([jdk_tool("javac"), f"-J-agentpath:{agent}=cpu=samples,interval=1,depth=256,"
                    f"cutoff=0,thread=y,verbose=n,file={hprof}", "-d", os.path.join(work, "c1"),
                    *files], check=True, capture_output=True)
    jfr = os.path.join(work, "javac.jfr")
    subprocess.run([jdk_tool("javac"), f"-J-XX:StartFlightRecording=filename={jfr},settings=profile,"
                    "jdk.ExecutionSample#period=1ms",
                    "-d", os.path.join(work, "c2"), *files], check=True, capture_output=True)
    inputs = [("javac, HPROF text", hprof), ("javac, JFR", jfr)]
    for stacks in options.stacks:
        path = os.path.join(work, f"synthetic-{stacks}.hprof.txt")
        synthetic_hprof(path, stacks)
        inputs.append((f"synthetic, {stacks:,} stacks, HPROF text", path))
    print("| input → output | input MB | distinct stacks | seconds (median) | stacks/s | MB/s | "
          "peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, path in inputs:
        for output in OUTPUTS:
            if os.path.exists(os.path.join(work, f"out.{output}")):
                os.remove(os.path.join(work, f"out.{output}"))
        folded = os.path.join(work, "count.collapsed")
        try:
            subprocess.run([openprof, "convert", path, "-o", folded], check=True,
                           capture_output=True, text=True)
        except subprocess.CalledProcessError as error:
            print(f"| {name} | (not read: {error.stderr.strip()[:120]}) |||||")
            continue
        stacks = distinct_stacks(folded)
        for output in OUTPUTS:
            target = os.path.join(work, f"out.{output}")
            try:
                measure(f"{name} → openprof .{output}",
                        lambda: [openprof, "convert", path, "-o", target], path, stacks,
                        options.rounds)
            except RuntimeError as error:
                print(f"| {name} → openprof .{output} | (refused: {str(error)[-120:]}) |||||")
        page = os.path.join(work, "out.html")
        if os.path.isfile(page):
            millis = load_millis(page, options.rounds)
            size = os.path.getsize(page) / 1e6
            print(f"| {name} → openprof .html opened in Chromium | page {size:.1f} MB | {stacks:,} | "
                  f"drawn in {millis} ms |||", flush=True)
        if path.endswith(".jfr") and options.jfrconv:
            for output in ("collapsed", "html"):
                target = os.path.join(work, f"ap.{output}")
                measure(f"{name} → jfrconv .{output}",
                        lambda: [options.jfrconv, "-o", output, path, target], path, stacks,
                        options.rounds)

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
