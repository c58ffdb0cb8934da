#!/usr/bin/env python3
"""The agent's memory over a long run with class churn, side by side with the same JVM without it.

java/workloads/ClassChurn.java loads a new class every couple of milliseconds (each with new
methods to sample) and lets the JVM unload them. Two JVMs run it at once for --minutes of their
main thread's CPU time (on an idle machine, as long in wall time), with the same heap and
metaspace limits: one without an agent, one with openprof sampling CPU every
millisecond in continuous mode (a window every second, streamed to `openprof serve` on
loopback). Every --every seconds the resident set of both is read from /proc; reported: both
and their difference over time, and how much the difference grew after the first fifth of the
run (the agent's tables filling up then stay, a leak keeps growing).

With --nmt both JVMs run with HotSpot's Native Memory Tracking, and every sample also reads
`jcmd PID VM.native_memory summary`: at the end, each NMT category's committed memory with and
without the agent, and how the difference grew, tell in which part of the JVM a growth sits
(the agent's own mallocs count under "Other"; jmethodIDs are "Class" mallocs).

Usage: bench/agent_memory.py [--minutes M] [--every S] [--nmt]
Needs: cargo build --release and a JDK (JAVA_HOME or PATH).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, jdk_tool

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
TOKEN = "bench-token"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def nmt_committed_kib(pid):
    """Committed KiB by NMT category (and the total) of a JVM running with -XX:NativeMemoryTracking."""
    answer = subprocess.run([jdk_tool("jcmd"), str(pid), "VM.native_memory", "summary"],
                            capture_output=True, text=True).stdout
    categories = {}
    for line in answer.splitlines():
        line = line.strip()
        if line.startswith("Total:") or line.startswith("-"):
            name = "Total" if line.startswith("Total:") else line.lstrip("- ").split("(")[0].strip()
            committed = line.split("committed=", 1)
            if len(committed) == 2:
                digits = committed[1].split("KB")[0]
                if digits.isdigit():
                    categories[name] = int(digits)
    return categories


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--every", type=float, default=60)
    parser.add_argument("--nmt", action="store_true", help="read HotSpot's native memory tracking too")
    args = parser.parse_args()
    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent) or not os.path.isfile(OPENPROF):
        sys.exit("agent_memory: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-memory-")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "ClassChurn.java")],
                   check=True)
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", os.path.join(work, "store")],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=dict(os.environ, OPENPROF_TOKEN=TOKEN))
    address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
    seconds = int(args.minutes * 60)
    flags = ["-Xms256m", "-Xmx256m", "-XX:MaxMetaspaceSize=64m"]
    if args.nmt:
        flags.append("-XX:NativeMemoryTracking=summary")
    options = f"cpu=samples,interval=1,depth=16,format=b,continuous=1s,verbose=n,net={address},token={TOKEN}"
    runs = {
        "without": subprocess.Popen([jdk_tool("java"), *flags, "-cp", work, "ClassChurn", str(seconds)],
                                    stdout=subprocess.PIPE, text=True),
        "with": subprocess.Popen([jdk_tool("java"), *flags, f"-agentpath:{agent}={options}", "-cp", work,
                                  "ClassChurn", str(seconds)], stdout=subprocess.PIPE, text=True),
    }
    started = time.time()
    rows = []
    nmt_rows = []
    print(f"{'minute':>7} {'without MiB':>12} {'with MiB':>9} {'difference MiB':>15}", flush=True)
    while all(run.poll() is None for run in runs.values()):
        try:
            without, with_agent = rss_kib(runs["without"].pid), rss_kib(runs["with"].pid)
        except FileNotFoundError:
            break
        minute = (time.time() - started) / 60
        rows.append((minute, without, with_agent))
        if args.nmt:
            nmt_rows.append((minute, {name: nmt_committed_kib(run.pid) for name, run in runs.items()}))
        print(f"{minute:7.1f} {without / 1024:12.1f} {with_agent / 1024:9.1f} {(with_agent - without) / 1024:15.1f}",
              flush=True)
        time.sleep(args.every)
    outputs = {name: run.communicate()[0].strip() for name, run in runs.items()}
    serve.terminate()
    serve.wait()
    for name, output in outputs.items():
        print(f"{name} the agent: {output}")
    fifth = [row for row in rows if row[0] >= args.minutes / 5]
    if len(fifth) >= 2:
        first, last = fifth[0], fifth[-1]
        growth = ((last[2] - last[1]) - (first[2] - first[1])) / 1024
        print(f"difference grew {growth:+.1f} MiB from minute {first[0]:.1f} to minute {last[0]:.1f}")
    nmt_fifth = [row for row in nmt_rows if row[0] >= args.minutes / 5 and row[1]["with"] and row[1]["without"]]
    if len(nmt_fifth) >= 2:
        (first_minute, first), (last_minute, last) = nmt_fifth[0], nmt_fifth[-1]
        print(f"NMT committed MiB by category, minute {first_minute:.1f} and {last_minute:.1f}:")
        print(f"{'category':<28} {'without':>9} {'with':>9} {'without':>9} {'with':>9} {'difference grew':>16}")
        categories = sorted(set(last["with"]) | set(last["without"]))
        for category in categories:
            figures = [sample[name].get(category, 0) / 1024 for sample in (first, last) for name in ("without", "with")]
            grew = (figures[3] - figures[2]) - (figures[1] - figures[0])
            print(f"{category:<28} {figures[0]:9.1f} {figures[1]:9.1f} {figures[2]:9.1f} {figures[3]:9.1f} {grew:+16.1f}")


if __name__ == "__main__":
    main()
