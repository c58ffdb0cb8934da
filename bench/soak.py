#!/usr/bin/env python3
"""The fleet's soak: JVMs in continuous mode for an hour, the web UI polled, ClickHouse
restarted twice, and one hostile agent or client of each kind the collector is hardened
against; the collector's memory must stay flat and nothing acknowledged may be lost.

Collector A serves the JVMs, the web UI (with its control credential) and forwards to one
ClickHouse; collector B (store capped at 400 kB by --max-store-bytes, which the flood of ids reaches) forwards to the same ClickHouse and
is where the id thief and the flood of new agent ids go. Every JVM runs Service with a light
duty cycle (--work-ms of CPU every --work-ms + --sleep-ms), in continuous mode.

Hostile, each once, spread over the run (crates/collector/examples/hostile_agents.rs and this
script): 300 idle connections to the UI's port; an HPROF record claiming 4 GiB then 300 MiB;
200 MiB of HPROF text without an END line; 3,000 handshakes with new agent ids on B; a host
name with CR/LF; a real agent's id claimed with another key on B; an agent answering commands
with 3 MB of control bytes while `openprof control` asks every agent; 200 wrong bearer tokens.

Checks (exit status 1 if one fails): every JVM agent's samples in ClickHouse equal those
collector A stored; none of the thief's samples reach ClickHouse; the broadcast command
answers every agent; the UI answered every poll (429 only to the guesser's address); A's
resident memory after the first --settle seconds grows by less than --memory-growth.
Prints A's memory over the run, which goes into BENCHMARKS.md; with --malloc-stats also what
A's malloc holds in use, which tells memory A keeps from freed memory glibc has not returned.

Usage: bench/soak.py [--jvms 50] [--duration 3600] [--window 10s] [--malloc-stats 300]
Needs: cargo build --release --workspace --lib --bins --examples, a JDK, Debian's clickhouse-server; gdb
for --malloc-stats.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from benchlib import (ROOT, ClickHouseServer, agents_in_store, jdk_tool, stored_cpu_samples,
                      wait_until_held, malloc_in_use_mb)

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
HOSTILE = os.path.join(ROOT, "target", "release", "examples", "hostile_agents")
TOKEN = "soak-agent-token"
CONTROL_TOKEN = "soak-control-token"
DATABASE = "soak"


def start_collector(work, name, clickhouse, extra):
    store = os.path.join(work, name)
    log = open(store + ".log", "w")
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", store,
                              "--clickhouse", clickhouse.url, "--database", DATABASE, *extra],
                             stdout=subprocess.PIPE, stderr=log, text=True,
                             env=dict(os.environ, OPENPROF_TOKEN=TOKEN,
                                      OPENPROF_CONTROL_TOKEN=CONTROL_TOKEN))
    address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
    web = None
    if "--http" in extra:
        web = serve.stdout.readline().strip().rsplit(" ", 1)[-1].rstrip("/")
    return {"process": serve, "address": address, "web": web, "store": store, "log": store + ".log"}


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Poller(threading.Thread):
    """A UI client polling the fleet's list every `period` seconds with the credential."""

    def __init__(self, web, period, stop):
        super().__init__(daemon=True)
        self.web, self.period, self.stop = web, period, stop
        self.polls, self.failures = 0, []

    def run(self):
        while not self.stop.is_set():
            request = urllib.request.Request(f"{self.web}/api/fleet",
                                             headers={"Authorization": f"Bearer {CONTROL_TOKEN}"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    json.load(answer)
                self.polls += 1
            except (urllib.error.URLError, OSError, ValueError) as error:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {error}")
            self.stop.wait(self.period)


def idle_connections(web, count, hold):
    """`count` connections from 127.0.0.2 to the UI's port that send nothing, held `hold` seconds."""
    host, port = web.split("//", 1)[1].rsplit(":", 1)
    sockets = []
    for _ in range(count):
        try:
            # From another address than the pollers: the per-address cap is for such a client.
            sockets.append(socket.create_connection((host, int(port)), timeout=5,
                                                    source_address=("127.0.0.2", 0)))
        except OSError:
            break
    time.sleep(hold)
    for held in sockets:
        held.close()
    return len(sockets)


def guess(web, tries):
    """Wrong bearer tokens from 127.0.0.2; returns the statuses seen."""
    host, port = web.split("//", 1)[1].rsplit(":", 1)
    statuses = {}
    for attempt in range(tries):
        try:
            with socket.create_connection((host, int(port)), timeout=10,
                                          source_address=("127.0.0.2", 0)) as conn:
                conn.sendall(f"GET /api/fleet HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-{attempt}"
                             f"\r\nConnection: close\r\n\r\n".encode())
                status = conn.recv(64).split(b" ")[1].decode()
        except OSError as error:
            status = type(error).__name__
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def hostile(kind, address, *args):
    run = subprocess.run([HOSTILE, kind, address, TOKEN, *map(str, args)], capture_output=True,
                         text=True, timeout=900)
    return run.returncode, (run.stdout + run.stderr).strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jvms", type=int, default=50)
    parser.add_argument("--duration", type=float, default=3600, help="seconds the JVMs run")
    parser.add_argument("--window", default="10s", help="the agents' continuous= window")
    parser.add_argument("--work-ms", type=int, default=2)
    parser.add_argument("--sleep-ms", type=int, default=198)
    parser.add_argument("--pollers", type=int, default=2)
    parser.add_argument("--settle", type=float, default=None,
                        help="seconds before the memory must stay flat (default: 30 %% of the run, "
                             "after the hostile streams, which the decoder may hold 64 MiB of)")
    parser.add_argument("--malloc-stats", type=float, default=0, metavar="SECONDS",
                        help="every SECONDS, also ask A's malloc how many bytes it holds in use "
                             "(through gdb), to tell held memory from memory glibc keeps freed")
    parser.add_argument("--memory-growth", type=float, default=0.25,
                        help="the most A's memory may grow after --settle, as a share")
    args = parser.parse_args()
    if args.settle is None:
        args.settle = 0.3 * args.duration
    for path in (OPENPROF, AGENT, HOSTILE):
        if not os.path.isfile(path):
            sys.exit(f"soak: {path} is missing: cargo build --release --workspace --lib --bins --examples")
    work = tempfile.mkdtemp(prefix="openprof-soak-")
    classes = os.path.join(work, "classes")
    subprocess.run([jdk_tool("javac"), "-d", classes, os.path.join(ROOT, "java", "workloads", "Service.java")],
                   check=True)
    clickhouse = ClickHouseServer(os.path.join(work, "clickhouse"))
    a = start_collector(work, "store-a", clickhouse, ["--http", "127.0.0.1:0"])
    b = start_collector(work, "store-b", clickhouse, ["--max-store-bytes", "400k"])
    started = time.time()
    at = lambda: time.time() - started  # noqa: E731
    jvms = []
    for index in range(args.jvms):
        options = (f"cpu=samples,interval=10,format=b,doe=n,verbose=n,continuous={args.window},"
                   f"label=service:soak,net={a['address']},token={TOKEN}")
        jvms.append(subprocess.Popen([jdk_tool("java"), "-Xmx32m", "-XX:TieredStopAtLevel=1",
                                      "-XX:CICompilerCount=1", f"-agentpath:{AGENT}={options}",
                                      "-cp", classes, "Service", str(args.work_ms), str(args.sleep_ms)],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True))
        # One a second: fifty JVMs starting at once would be a minute of nothing else.
        time.sleep(1)
    print(f"{len(jvms)} JVMs started in {at():.0f} s", flush=True)
    stop = threading.Event()
    pollers = [Poller(a["web"], 2, stop) for _ in range(args.pollers)]
    for poller in pollers:
        poller.start()

    memory = []  # (seconds, MB)
    failed = []
    notes = []
    span = args.duration
    # What happens when, as shares of the run.
    events = [
        (0.10, "idle UI connections"), (0.15, "huge record"), (0.20, "endless text"),
        (0.25, "steal an id"), (0.30, "CR/LF host name"), (0.33, "ClickHouse restart"),
        (0.40, "new ids"), (0.45, "huge reply"), (0.50, "guessing"),
        (0.66, "ClickHouse restart"),
    ]
    next_memory = 0.0
    next_malloc = 0.0
    in_use = []
    for share, name in events + [(1.0, "end")]:
        while at() < share * span:
            if at() >= next_memory:
                memory.append((at(), rss_mb(a["process"].pid)))
                next_memory += 10
            if args.malloc_stats and at() >= next_malloc:
                in_use.append((at(), rss_mb(a["process"].pid), malloc_in_use_mb(a["process"].pid, a["log"])))
                next_malloc += args.malloc_stats
            time.sleep(1)
        if name == "end":
            break
        print(f"{at():6.0f} s {name}", flush=True)
        if name == "idle UI connections":
            held = idle_connections(a["web"], 300, 20)
            notes.append(f"300 idle connections to the UI's port: {held} opened, held 20 s")
        elif name == "huge record":
            notes.append(hostile("huge-record", a["address"])[1])
        elif name == "endless text":
            notes.append(hostile("endless-text", a["address"])[1])
        elif name == "new ids":
            notes.append(hostile("new-ids", b["address"], 3000)[1])
        elif name == "CR/LF host name":
            notes.append(hostile("crlf-host", a["address"])[1])
        elif name == "ClickHouse restart":
            clickhouse.stop()
            time.sleep(15)
            clickhouse.start()
            notes.append(f"ClickHouse stopped for 15 s at {at():.0f} s")
        elif name == "steal an id":
            victim = agents_in_store(a["store"])[0]
            notes.append(hostile("steal-id", b["address"], victim)[1])
        elif name == "huge reply":
            replier = threading.Thread(target=lambda: notes.append(hostile("huge-reply", a["address"], 60)[1]))
            replier.start()
            time.sleep(5)
            control = subprocess.run([OPENPROF, "control", "--collector", a["address"], "heap-summary"],
                                     capture_output=True, text=True, timeout=300,
                                     env=dict(os.environ, OPENPROF_CONTROL_TOKEN=CONTROL_TOKEN))
            answered = control.stdout.count("\n")
            notes.append(f"`openprof control heap-summary` to every agent beside the huge replier: exit "
                         f"{control.returncode}, {answered} lines, {len(control.stdout)} bytes")
            if answered < args.jvms:
                failed.append(f"the broadcast answered {answered} lines for {args.jvms} JVMs: "
                              f"{control.stderr[-300:]}")
            replier.join()
        elif name == "guessing":
            statuses = guess(a["web"], 200)
            notes.append(f"200 wrong bearer tokens from 127.0.0.2: {statuses}")
    print(f"{at():6.0f} s ending the JVMs", flush=True)
    for jvm in jvms:
        jvm.stdin.close()
    for jvm in jvms:
        jvm.wait(timeout=300)
        if jvm.returncode != 0:
            failed.append(f"a JVM failed: {jvm.stderr.read()[-300:]}")
    memory.append((at(), rss_mb(a["process"].pid)))
    if args.malloc_stats:
        in_use.append((at(), rss_mb(a["process"].pid), malloc_in_use_mb(a["process"].pid, a["log"])))
    stop.set()

    # Nothing lost: every JVM agent's samples in ClickHouse as A stored them.
    def clickhouse_samples(agent):
        answer = clickhouse.query(f"SELECT sum(count) FROM {DATABASE}.samples WHERE agent = '{agent}' "
                                  f"AND event = 'cpu'").strip()
        return int(answer or 0)

    stored = {}
    for agent in agents_in_store(a["store"]):
        samples = stored_cpu_samples(work, a["store"], agent)
        if samples:
            stored[agent] = samples
    arrival = wait_until_held(stored, clickhouse_samples, 300, 2)
    failed.extend(arrival)
    complete = len(stored) - sum("never held" in line for line in arrival)
    forged = clickhouse.query(f"SELECT count() FROM {DATABASE}.stacks WHERE has(frames, 'Forged.work')").strip()
    if forged != "0":
        failed.append(f"the thief's stack reached ClickHouse ({forged} rows)")
    log_a = open(a["log"]).read()
    log_b = open(b["log"]).read()
    if "forged line" in log_a and "\n2026-01-01T00:00:00Z  WARN forged line" in log_a:
        failed.append("a host name forged a line in A's log")
    poll_failures = [failure for poller in pollers for failure in poller.failures]
    polls = sum(poller.polls for poller in pollers)
    if poll_failures:
        failed.append(f"{len(poll_failures)} UI polls failed: {poll_failures[:5]}")

    settled = [mb for seconds, mb in memory if seconds >= args.settle]
    baseline = settled[0] if settled else memory[-1][1]
    peak_after = max(settled) if settled else memory[-1][1]
    print()
    print(f"{len(jvms)} JVMs for {args.duration:.0f} s, window {args.window}; "
          f"{sum(stored.values())} CPU samples of {len(stored)} agents stored by A, "
          f"{complete} complete in ClickHouse; {polls} UI polls")
    for note in notes:
        print(f"  {note}")
    print(f"A's resident memory (MB): at {args.settle:.0f} s {baseline:.1f}, peak after it "
          f"{peak_after:.1f}, at the end {memory[-1][1]:.1f}, peak overall {max(mb for _, mb in memory):.1f}")
    for seconds, mb in memory[:: max(1, len(memory) // 12)]:
        print(f"  {seconds:7.0f} s {mb:8.1f} MB")
    if in_use:
        print("A's resident memory and malloc's bytes in use (MB):")
        for seconds, mb, held in in_use:
            print(f"  {seconds:7.0f} s {mb:8.1f} resident {held if held is not None else float('nan'):8.1f} in use")
    print(f"thief refused in ClickHouse: {'another collector' in log_b}; "
          f"outages logged by A: {log_a.count('windows wait in the store')}, "
          f"recoveries: {log_a.count('takes windows again')}")
    if peak_after > baseline * (1 + args.memory_growth):
        failed.append(f"A's memory grew from {baseline:.1f} MB to {peak_after:.1f} MB after {args.settle:.0f} s")
    for collector in (a, b):
        collector["process"].terminate()
        collector["process"].wait()
    clickhouse.stop()
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        print(f"(work directory kept: {work})")
        sys.exit(1)
    print("all checks passed")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
