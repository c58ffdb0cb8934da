#!/usr/bin/env python3
"""CPU-sampling overhead, measured side by side in one run.

Runs java/workloads/Throughput.java (a CPU-bound workload on every core) without a profiler,
with openprof's agent at interval=10 and interval=1, and with the JDK's own sampler (Java Flight
Recorder, `profile` settings: execution samples every 10 ms), interleaved over several rounds in
a shuffled order. Each configuration is compared with the run without a profiler of the same
round (a paired ratio, which cancels the machine's drift between rounds); the report gives the
median of those ratios, their spread, and the sampling rate openprof reached. A second ratio,
operations per CPU-second of the whole JVM during the measured window, is steadier on a shared
machine: it counts the profiler's own CPU (signal handlers, agent thread) but not time the
machine took away from the JVM. Third, the direct cost the agent reports in its CPU SAMPLER
records (time in the signal handler, on its own thread, dumping) over the JVM's whole CPU time
(from wait4): steady, but blind to indirect costs such as the kernel's signal delivery and caches.

With `--baseline-agent LIB`, another build of the agent (an earlier commit's
target/release/libopenprof_agent.so) runs in the same rounds, so that a change to the agent is
measured against the code before it side by side. With `--cstack-no`, openprof also runs with
`cstack=no` (Java frames only), so the cost of walking native frames shows as the difference;
with `--walker-asgct`, with `walker=asgct`, so our walker's cost shows against
AsyncGetCallTrace's.

Usage: bench/cpu_overhead.py [--rounds N] [--seconds S] [--warmup W] [--threads T] [--baseline-agent LIB] [--cstack-no] [--walker-asgct]
Needs: cargo build --release (for target/release/libopenprof_agent.so) and a JDK (JAVA_HOME or PATH).
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--baseline-agent", help="another build of the agent library to compare with")
    parser.add_argument("--cstack-no", action="store_true", help="also run openprof with cstack=no")
    parser.add_argument("--walker-asgct", action="store_true",
                        help="also run openprof with walker=asgct (HotSpot's AsyncGetCallTrace)")
    args = parser.parse_args()

    agent = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
    if not os.path.isfile(agent):
        sys.exit("cpu_overhead: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-bench-")
    subprocess.run([jdk_tool("javac"), "-d", work, os.path.join(ROOT, "java", "workloads", "Throughput.java")], check=True)

    # configuration → (JVM arguments, the agent's profile file or None)
    configs = {
        "none": ([], None),
        "JFR settings=profile (10 ms)": ([f"-XX:StartFlightRecording=settings=profile,filename={work}/rec.jfr"], None),
    }
    agents = [("openprof", agent)]
    if args.baseline_agent:
        if not os.path.isfile(args.baseline_agent):
            sys.exit(f"cpu_overhead: no agent library at {args.baseline_agent}")
        agents.append(("baseline", os.path.abspath(args.baseline_agent)))
    variants = ([("", "")] + ([(" cstack=no", ",cstack=no")] if args.cstack_no else [])
                + ([(" walker=asgct", ",walker=asgct")] if args.walker_asgct else []))
    for label, library in agents:
        for interval in (10, 1):
            for suffix, extra in variants if label == "openprof" else [("", "")]:
                profile = f"{work}/{label}{interval}{extra.replace(',', '_').replace('=', '_')}.txt"
                configs[f"{label} interval={interval}{suffix}"] = (
                    [f"-agentpath:{library}=cpu=samples,interval={interval}{extra},verbose=n,file={profile}"],
                    profile)
    results = {name: [] for name in configs}
    efficiency = {name: [] for name in configs}
    samples = {name: [] for name in configs}
    direct = {name: [] for name in configs}
    for round_number in range(args.rounds):
        order = list(configs)
        random.shuffle(order)
        for name in order:
            jvm_arguments, profile = configs[name]
            command = [jdk_tool("java"), *jvm_arguments, "-cp", work, "Throughput",
                       str(args.threads), str(args.warmup), str(args.seconds)]
            with tempfile.TemporaryFile() as stdout:
                child = subprocess.Popen(command, stdout=stdout, stderr=subprocess.DEVNULL)
                _, status, usage = os.wait4(child.pid, 0)
                child.returncode = os.waitstatus_to_exitcode(status)
                if child.returncode != 0:
                    sys.exit(f"cpu_overhead: {' '.join(command)} failed with {child.returncode}")
                stdout.seek(0)
                output = stdout.read().decode()
            jvm_cpu_us = (usage.ru_utime + usage.ru_stime) * 1e6
            found = re.search(r"ops=(\d+) cpu_ns=(\d+)", output)
            ops, cpu_ns = int(found.group(1)), int(found.group(2))
            results[name].append(ops)
            efficiency[name].append(ops / cpu_ns)
            if profile:
                with open(profile) as text:
                    content = text.read()
                totals = re.findall(r"CPU SAMPLES BEGIN \(total = (\d+)\)", content)
                samples[name].append(sum(map(int, totals)))
                costs = re.findall(r"^cost\.\w+_us (\d+)$", content, re.MULTILINE)
                direct[name].append(sum(map(int, costs)) / jvm_cpu_us)
            print(f"round {round_number + 1} {name:30} ops={ops}", file=sys.stderr)

    cpu_seconds = args.threads * (args.warmup + args.seconds)
    print(f"rounds={args.rounds} seconds={args.seconds} warmup={args.warmup} threads={args.threads}")
    print(f"{'configuration':30} {'median ops':>11} {'ratio':>7} {'loss':>7} {'range':>12}"
          f" {'ops/CPU ratio':>14} {'loss':>7} {'range':>12}  samples/CPU-s  direct cost")
    for name, values in results.items():
        ratios = [value / base for value, base in zip(values, results["none"])]
        cpu_ratios = [value / base for value, base in zip(efficiency[name], efficiency["none"])]
        ratio, cpu_ratio = statistics.median(ratios), statistics.median(cpu_ratios)
        rate, cost = "", ""
        if samples[name]:
            rate = f"{statistics.median(samples[name]) / cpu_seconds:.0f}"
            cost = f"{100 * statistics.median(direct[name]):.3f}%"
        print(f"{name:30} {statistics.median(values):11.0f} {ratio:7.4f} {100 * (1 - ratio):6.2f}%"
              f" {min(ratios):5.3f}-{max(ratios):5.3f} {cpu_ratio:14.4f} {100 * (1 - cpu_ratio):6.2f}%"
              f" {min(cpu_ratios):5.3f}-{max(cpu_ratios):5.3f}  {rate:>13}  {cost:>11}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
