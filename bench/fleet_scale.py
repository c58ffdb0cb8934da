#!/usr/bin/env python3
"""The fleet at scale: 20 JVMs in continuous mode streaming to two collectors that forward into
one ClickHouse, which is killed and restarted mid-run; then every window is checked to be stored
once and each service's flame graph, summed in ClickHouse, to show its workload's split.

Four services of five JVMs each, each workload with a known split:
  split-a, split-b  CpuSplit: heavy 75 %, light 25 % of the samples in the two
  component         ComponentSplit: self CPU in split.app 50 %, split.db 33.3 %, split.web 16.7 %
  joined            MptJoined: in lookup(key), slowBranch 80 % (key "slow"), and 75 % of the
                    labelled CPU under the Context label user=alice
The JVMs alternate between the two collectors. ClickHouse is killed --outage-at seconds in and
started again --outage seconds later; the windows wait in the collectors' stores meanwhile.

Checks (exit status 1 if one fails): per agent, the samples in ClickHouse equal those its
collector stored (and no window twice); per service, the split within --tolerance points.
Reports the time each `openprof fleet` query took.

Usage: bench/fleet_scale.py [--jvms-per-service N] [--cpu-seconds S] [--window 10s]
Needs: cargo build --release, a JDK, Debian's clickhouse-server, 2+ GiB of memory free.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import (ROOT, ClickHouseServer, agents_in_store, jdk_tool, stored_cpu_samples,
                      wait_until_held)

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
TOKEN = "bench-token"
DATABASE = "fleet_scale"
LOOKUP_SPEC = "MptJoined.lookup(java.lang.String) 1"


def start_collector(store, clickhouse):
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", store,
                              "--clickhouse", clickhouse.url, "--database", DATABASE],
                             stdout=subprocess.PIPE, stderr=open(store + ".log", "w"), text=True,
                             env=dict(os.environ, OPENPROF_TOKEN=TOKEN))
    address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
    return serve, address


def folded(path):
    """Folded stacks as [(frames, count)]."""
    stacks = []
    with open(path) as lines:
        for line in lines:
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            stacks.append((stack.split(";"), int(count)))
    return stacks


def fleet(work, selection):
    """`openprof fleet` as folded stacks, and the seconds it took; None if it found nothing."""
    output = os.path.join(work, "fleet.collapsed")
    started = time.time()
    run = subprocess.run([OPENPROF, "fleet", "--clickhouse", CLICKHOUSE.url, "--database", DATABASE,
                          "--since", "1h", "-o", output, *selection], capture_output=True, text=True)
    took = time.time() - started
    if run.returncode != 0:
        return None, took
    return folded(output), took


def share(stacks, numerator, denominator):
    top = sum(count for frames, count in stacks if numerator(frames))
    bottom = sum(count for frames, count in stacks if denominator(frames))
    return (top / bottom if bottom else float("nan")), bottom


def main():
    global CLICKHOUSE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jvms-per-service", type=int, default=5)
    parser.add_argument("--cpu-seconds", type=int, default=5,
                        help="CPU seconds of CpuSplit and ComponentSplit each")
    parser.add_argument("--joined-seconds", type=int, default=60, help="the CPU seconds MptJoined runs for")
    parser.add_argument("--window", default="10s", help="the agents' continuous= window")
    parser.add_argument("--interval", type=int, default=2, help="the agents' sampling interval, ms")
    parser.add_argument("--outage-at", type=float, default=20)
    parser.add_argument("--outage", type=float, default=10)
    parser.add_argument("--tolerance", type=float, default=0.02)
    args = parser.parse_args()
    if not os.path.isfile(AGENT) or not os.path.isfile(OPENPROF):
        sys.exit("fleet_scale: build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="openprof-fleet-scale-")
    classes = os.path.join(work, "classes")
    workloads = os.path.join(ROOT, "java", "workloads")
    subprocess.run([jdk_tool("javac"), "-d", classes,
                    *(os.path.join(workloads, name) for name in
                      ["CpuSplit.java", "ComponentSplit.java", "SplitWeb.java", "SplitDb.java", "MptJoined.java"]),
                    os.path.join(ROOT, "java", "api", "dev", "openprof", "Context.java")], check=True)
    specs = os.path.join(work, "lookup.mpt")
    with open(specs, "w") as out:
        out.write(LOOKUP_SPEC + "\n")
    CLICKHOUSE = ClickHouseServer(os.path.join(work, "clickhouse"))
    stores = [os.path.join(work, "store-a"), os.path.join(work, "store-b")]
    collectors = [start_collector(store, CLICKHOUSE) for store in stores]
    services = {
        "split-a": ["CpuSplit", str(args.cpu_seconds)],
        "split-b": ["CpuSplit", str(args.cpu_seconds)],
        "component": ["split.app.ComponentSplit", str(args.cpu_seconds)],
        "joined": ["MptJoined", str(args.joined_seconds)],
    }
    jvms = []
    started = time.time()
    for round_number in range(args.jvms_per_service):
        for service, command in services.items():
            address = collectors[len(jvms) % 2][1]
            options = (f"cpu=samples,interval={args.interval},format=b,doe=n,verbose=n,"
                       f"continuous={args.window},label=service:{service},net={address},token={TOKEN}")
            if service == "joined":
                options += f",mpt=@{specs}"
            jvms.append(subprocess.Popen([jdk_tool("java"), "-Xmx64m", f"-agentpath:{AGENT}={options}",
                                          "-cp", classes, *command],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    print(f"{len(jvms)} JVMs started in {time.time() - started:.1f} s", flush=True)
    time.sleep(max(0, args.outage_at - (time.time() - started)))
    CLICKHOUSE.stop()
    killed_at = int(time.time())
    print(f"ClickHouse killed at {time.time() - started:.1f} s", flush=True)
    time.sleep(args.outage)
    CLICKHOUSE.start()
    print(f"ClickHouse started again at {time.time() - started:.1f} s", flush=True)
    failed = []
    for jvm in jvms:
        _, errors = jvm.communicate(timeout=900)
        if jvm.returncode != 0:
            failed.append(f"a JVM failed: {errors[-500:]}")
    print(f"the JVMs ended at {time.time() - started:.1f} s", flush=True)

    # Every agent's samples in ClickHouse, once: as many as its collector stored.
    stored = {agent: stored_cpu_samples(work, store, agent)
              for store in stores for agent in agents_in_store(store)}
    for agent in [agent for agent, samples in stored.items() if samples is None]:
        failed.append(f"agent {agent}: its collector's store holds no readable profile")
        del stored[agent]

    def held_of(agent):
        stacks, _ = fleet(work, ["--agent", agent])
        return sum(count for _, count in stacks or [])

    arrival = wait_until_held(stored, held_of, 120, 1)
    failed.extend(arrival)
    complete = len(stored) - sum("never held" in line for line in arrival)
    twice = CLICKHOUSE.query(
        f"SELECT count() FROM (SELECT agent, sequence, window, stack, labels, count() AS rows "
        f"FROM {DATABASE}.samples GROUP BY agent, sequence, window, stack, labels HAVING rows > 1)").strip()
    windows = CLICKHOUSE.query(
        f"SELECT uniqExact(agent, sequence, window) FROM {DATABASE}.samples").strip()
    print(f"{len(stored)} agents, {sum(stored.values())} samples stored, {windows} windows in ClickHouse, "
          f"{twice} stored twice, {complete} agents complete")
    if twice != "0":
        failed.append(f"{twice} rows stored twice")
    logs = "".join(open(store + ".log").read() for store in stores)
    # The forwarders batch a pass's windows of all their agents: count the INSERTs since the
    # restart against the windows received since the kill (all inserted after the restart).
    inserts = CLICKHOUSE.query("SELECT value FROM system.events WHERE event = 'InsertQuery'").strip()
    since_kill = CLICKHOUSE.query(
        f"SELECT uniqExact(agent, sequence, window) FROM {DATABASE}.samples "
        f"WHERE time >= toDateTime({killed_at})").strip()
    print(f"{inserts} INSERT statements since ClickHouse restarted, for {since_kill} windows received "
          f"since it was killed (stacks, samples and agents each have their own INSERTs)")
    print(f"the collectors logged the outage: {'windows wait in the store' in logs}, "
          f"the recovery: {'takes windows again' in logs}")

    # Each service's split, summed in ClickHouse.
    print(f"{'service':10} {'what':42} {'expected':>8} {'measured':>8} {'samples':>8} {'query s':>8}")

    def check(service, what, expected, measured, samples, took):
        print(f"{service:10} {what:42} {expected:8.3f} {measured:8.3f} {samples:8} {took:8.3f}")
        if not abs(measured - expected) <= args.tolerance:
            failed.append(f"{service}: {what} {measured:.3f}, expected {expected:.3f} ± {args.tolerance}")

    for service in ["split-a", "split-b"]:
        stacks, took = fleet(work, ["--service", service])
        measured, samples = share(stacks or [], lambda f: f[-1] == "CpuSplit.heavy",
                                  lambda f: f[-1] in ("CpuSplit.heavy", "CpuSplit.light"))
        check(service, "heavy / (heavy + light)", 0.75, measured, samples, took)
    stacks, took = fleet(work, ["--service", "component"])
    for package, expected in [("split.app.", 0.5), ("split.db.", 1 / 3), ("split.web.", 1 / 6)]:
        measured, samples = share(stacks or [], lambda f: f[-1].startswith(package),
                                  lambda f: f[-1].startswith("split."))
        check("component", f"self CPU in {package}*", expected, measured, samples, took)
    stacks, took = fleet(work, ["--service", "joined"])
    measured, samples = share(stacks or [], lambda f: "MptJoined.slowBranch" in f,
                              lambda f: "MptJoined.lookup" in f)
    check("joined", "slowBranch / lookup", 0.8, measured, samples, took)
    slow, took = fleet(work, ["--service", "joined", "--label", f"{LOOKUP_SPEC}=slow"])
    measured, samples = share(slow or [], lambda f: "MptJoined.fastBranch" in f, lambda f: True)
    check("joined", "fastBranch in label lookup key=slow", 0.0, measured, samples, took)
    alice, took_alice = fleet(work, ["--service", "joined", "--label", "user=alice"])
    bob, took_bob = fleet(work, ["--service", "joined", "--label", "user=bob"])
    alice_samples = sum(count for _, count in alice or [])
    bob_samples = sum(count for _, count in bob or [])
    check("joined", "user=alice / (alice + bob)", 0.75,
          alice_samples / max(1, alice_samples + bob_samples), alice_samples + bob_samples,
          (took_alice + took_bob) / 2)

    for serve, _ in collectors:
        serve.terminate()
        serve.wait()
    CLICKHOUSE.stop()
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        sys.exit(1)
    print("all checks passed")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
