#!/usr/bin/env python3
"""Heap benchmarks, side by side in one run.

1. Heap dump: java/workloads/HeapFill.java keeps about --megabytes of live objects. Each round
   runs two such JVMs, and in each the JDK's own dumper (`jcmd PID GC.heap_dump`, which
   reports its time) and one of openprof's write a dump of the same heap, in alternating order:
   - heap=dump,format=b,file=: SIGQUIT; HotSpot's dumper reached in-process (the agent
     reports its time);
   - heap=dump,format=b,net=: DUMP HEAP from a collector (`openprof serve` on loopback,
     `openprof control dump-heap`); the agent's own JVMTI walk, streamed as it walks (the
     agent reports its time, objects included; the collector stores every byte).
   Reported: the times (all include the full GC each does first), the ratios ours/jcmd, the
   sizes. Dirty pages are written back (sync) before each dump.
2. Allocation sampling: java/workloads/AllocChurn.java (small short-lived objects in a loop)
   without an agent, with heap=sites at the default alloc_interval (512 KiB), and with the JDK's
   own allocation sampling (JFR's jdk.ObjectAllocationSample, `profile` settings), paired per
   round in shuffled order; reported: the median throughput ratio against the run without.

Usage: bench/heap_bench.py [--megabytes MB] [--rounds N] [--alloc-rounds N] [--seconds S]
       [--skip-alloc]
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

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
TOKEN = "bench-token"
CONTROL_TOKEN = "bench-control-token"
# The end of the agent's "Dumping Java heap ... done (...)" once its dump is written (other
# lines may come between): the JVM's dumper, or its own walk.
HOTSPOT_DONE = re.compile(r" done \(the JVM's dumper: (\d+) bytes in (\d+) ms\)")
WALK_DONE = re.compile(r" done \((\d+) objects, (\d+) bytes, \d+ classes in (\d+) ms\)")


def wait_for(path, pattern):
    deadline = time.time() + 900
    while time.time() < deadline:
        match = pattern.search(open(path).read())
        if match:
            return match
        time.sleep(0.2)
    sys.exit(f"heap_bench: no heap dump from the agent; see {path}")


def start_collector(work):
    store = tempfile.mkdtemp(prefix="store-", dir=work)
    env = dict(os.environ, OPENPROF_TOKEN=TOKEN, OPENPROF_CONTROL_TOKEN=CONTROL_TOKEN)
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", store],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
    return serve, address, store


def dump_round(agent, work, megabytes, first, mode):
    """One JVM: jcmd's dump and ours (mode "file": HotSpot's dumper; "net": our walk)."""
    ours_file = os.path.join(work, "ours.hprof")
    jcmd_file = os.path.join(work, "jcmd.hprof")
    for path in (ours_file, jcmd_file):
        if os.path.exists(path):
            os.remove(path)
    serve = None
    if mode == "net":
        serve, address, store = start_collector(work)
        options = f"heap=dump,format=b,doe=n,net={address},token={TOKEN},commands=heap"
    else:
        options = f"heap=dump,format=b,doe=n,file={ours_file}"
    stderr_path = os.path.join(work, "stderr.txt")
    with open(stderr_path, "w") as stderr:
        java = subprocess.Popen(
            [jdk_tool("java"), "-Xmx4g", "-Xms4g", f"-agentpath:{agent}={options}",
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
        if mode == "net":
            env = dict(os.environ, OPENPROF_CONTROL_TOKEN=CONTROL_TOKEN)
            deadline = time.time() + 30
            while subprocess.run([OPENPROF, "control", "--collector", address, "dump-heap"],
                                 env=env, capture_output=True).returncode != 0:
                if time.time() > deadline:
                    sys.exit("heap_bench: the agent did not connect to the collector")
                time.sleep(0.2)
            match = wait_for(stderr_path, WALK_DONE)
            results["ours"] = (int(match.group(3)) / 1000.0, int(match.group(2)), int(match.group(1)))
        else:
            os.kill(java.pid, signal.SIGQUIT)
            match = wait_for(stderr_path, HOTSPOT_DONE)
            results["ours"] = (int(match.group(2)) / 1000.0, int(match.group(1)), None)

    for step in ((jcmd, ours) if first == "jcmd" else (ours, jcmd)):
        # The other dump's dirty pages are written back first, so that neither dump pays for
        # the other's (otherwise the second dump of a round is the slower one, whichever it is).
        os.sync()
        step()
    java.stdin.close()
    java.wait(timeout=300)
    if serve:
        serve.terminate()
        serve.wait()
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
    parser.add_argument("--skip-alloc", action="store_true", help="heap dumps only")
    args = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("heap_bench: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-heap-bench-")
    sources = [os.path.join(ROOT, "java", "workloads", name) for name in ("HeapFill.java", "AllocChurn.java")]
    subprocess.run([jdk_tool("javac"), "-d", work, *sources], check=True)

    print(f"Heap dump of ~{args.megabytes} MB of live objects, {args.rounds} rounds")
    ratios = {"file": [], "net": []}
    times = {"file": ([], []), "net": ([], [])}
    names = {"file": "HotSpot's dumper (file=)", "net": "our walk, streamed (net=)"}
    for round_number in range(args.rounds):
        first = "jcmd" if round_number % 2 == 0 else "ours"
        for mode in ("file", "net"):
            results = dump_round(agent, work, args.megabytes, first, mode)
            jcmd_time, jcmd_size = results["jcmd"]
            ours_time, ours_size, objects = results["ours"]
            ratios[mode].append(ours_time / jcmd_time)
            times[mode][0].append(jcmd_time)
            times[mode][1].append(ours_time)
            # For the walk the agent reports its objects' shallow sizes, not a file's size.
            counted = f" of objects, {objects} objects" if objects else ""
            print(f"  round {round_number + 1} {names[mode]} ({first} first): jcmd {jcmd_time:.2f} s "
                  f"{jcmd_size / 1e6:.0f} MB; openprof {ours_time:.2f} s {ours_size / 1e6:.0f} MB{counted}; "
                  f"ratio {ours_time / jcmd_time:.2f}", flush=True)
    # The second dump of a JVM is often the slower, whichever tool makes it: the order
    # alternates, and with an even number of rounds the medians of the times weigh both alike.
    for mode, values in ratios.items():
        jcmd_median, ours_median = (statistics.median(series) for series in times[mode])
        print(f"  {names[mode]}: median time jcmd {jcmd_median:.2f} s, openprof {ours_median:.2f} s, "
              f"ratio {ours_median / jcmd_median:.2f}; median of the rounds' ratios "
              f"{statistics.median(values):.2f}")
    if args.skip_alloc:
        return

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
