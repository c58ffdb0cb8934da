#!/usr/bin/env python3
"""The collector's memory while its ClickHouse forwarder reads hostile streams: a collector
forwarding to a ClickHouse of its own gets each named hostile agent in turn
(crates/collector/examples/hostile_agents.rs: huge-record, endless-text, ...), and its
resident memory (VmRSS), peak (VmHWM) and the bytes its malloc holds in use (asked through
gdb) are printed after each.

Usage: bench/forwarder_memory.py [KIND ...]   (default: endless-text huge-record, 3 rounds)
Needs: cargo build --release --workspace --lib --bins --examples, Debian's clickhouse-server, gdb.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, ClickHouseServer, malloc_in_use_mb

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
HOSTILE = os.path.join(ROOT, "target", "release", "examples", "hostile_agents")
TOKEN = "forwarder-memory-token"


def memory(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
    return fields


def main():
    kinds = sys.argv[1:] or ["endless-text", "huge-record"] * 3
    for path in (OPENPROF, HOSTILE):
        if not os.path.isfile(path):
            sys.exit(f"forwarder_memory: {path} is missing: cargo build --release --workspace --lib --bins --examples")
    work = tempfile.mkdtemp(prefix="openprof-forwarder-memory-")
    clickhouse = ClickHouseServer(os.path.join(work, "clickhouse"))
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", os.path.join(work, "store"),
                              "--clickhouse", clickhouse.url, "--database", "forwarder_memory"],
                             stdout=subprocess.PIPE, stderr=open(os.path.join(work, "serve.log"), "w"), text=True,
                             env=dict(os.environ, OPENPROF_TOKEN=TOKEN))
    log_path = os.path.join(work, "serve.log")
    address = serve.stdout.readline().split()[-1]
    start = memory(serve.pid)
    print(f"{'after':24} {'RSS MB':>8} {'peak MB':>8} {'in use MB':>9}")
    print(f"{'start':24} {start['VmRSS']:8.1f} {start['VmHWM']:8.1f} {malloc_in_use_mb(serve.pid, log_path):9.1f}")
    for kind in kinds:
        said = subprocess.run([HOSTILE, kind, address, TOKEN], capture_output=True, text=True)
        # The forwarder looks every second; give it a few passes to read and drop the stream.
        time.sleep(8)
        now = memory(serve.pid)
        held = malloc_in_use_mb(serve.pid, log_path)
        print(f"{kind:24} {now['VmRSS']:8.1f} {now['VmHWM']:8.1f} {held:9.1f}   {said.stdout.strip()}")
    serve.terminate()
    serve.wait()
    clickhouse.stop()
    log = open(os.path.join(work, "serve.log")).read()
    print(f"refusals logged: {log.count('are not forwarded')}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
