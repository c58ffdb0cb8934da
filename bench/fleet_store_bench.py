#!/usr/bin/env python3
"""The fleet's store: ClickHouse against the collector's own SQLite store, on the same day of data.

1. Records a real JVM in continuous mode: the JDK's own javac compiling --classes generated
   classes over and over in one JVM (javax.tools, the compiler javac runs) for --record-seconds,
   under `cpu=samples,format=b,continuous=10s` streaming to `openprof serve`; exports the
   agent's HPROF stream with `openprof export --agent`.
2. Starts a ClickHouse server of its own (Debian's clickhouse-server, loopback ports, a data
   directory in the work directory).
3. Runs crates/collector/examples/fleet_bench.rs, which replays the recorded windows as
   --agents simulated JVMs (--services services) over --windows windows each (8640: a day at
   10 s) and measures, side by side on the same windows: the ingest rate into ClickHouse
   (`insert_windows`, the forwarder's path) and into the SQLite store (`Store::append`, the
   collector's path), the flame-graph queries (a service over the last hour and the day, an
   agent over the day) and the bytes on disk of each.
4. Prints the table; stops ClickHouse.

Usage: bench/fleet_store_bench.py [--agents N] [--services N] [--windows N] [--rounds N]
       [--record-seconds S] [--batch N] [--live-steps N] [--recording FILE] [--keep]
Needs: cargo build --release, a JDK (JAVA_HOME or PATH), /usr/sbin/clickhouse-server.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchlib import ROOT, ClickHouseServer, javac_sources, jdk_tool

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
EXAMPLE = os.path.join(ROOT, "target", "release", "examples", "fleet_bench")
TOKEN = "bench-token"

# The JDK's compiler, run the way javac runs it, again and again in one JVM: a real program
# with many distinct stacks (parsing, attribution, code generation), warm after the first
# rounds, as a long-lived service would be.
JAVAC_LOOP = """
import java.util.Arrays;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;

public class JavacLoop {
    public static void main(String[] args) {
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        String[] javacArgs = Arrays.copyOfRange(args, 1, args.length);
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        int rounds = 0;
        while (System.nanoTime() < end) {
            if (javac.run(null, null, null, javacArgs) != 0) throw new IllegalStateException("javac failed");
            rounds++;
        }
        System.out.println("rounds=" + rounds);
    }
}
"""


def record(work, seconds, classes):
    """Runs javac in a loop under the agent in continuous mode; returns the exported stream."""
    loop_dir = os.path.join(work, "loop")
    os.makedirs(loop_dir)
    with open(os.path.join(loop_dir, "JavacLoop.java"), "w") as out:
        out.write(JAVAC_LOOP)
    subprocess.run([jdk_tool("javac"), "-d", loop_dir, os.path.join(loop_dir, "JavacLoop.java")], check=True)
    sources = javac_sources(work, classes)
    compiled = os.path.join(work, "compiled")
    store = os.path.join(work, "record-store")
    serve = subprocess.Popen([OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", store],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=dict(os.environ, OPENPROF_TOKEN=TOKEN))
    try:
        address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
        options = (f"cpu=samples,format=b,continuous=10s,net={address},token={TOKEN},verbose=n,"
                   "label=service:javac")
        print(f"recording javac for {seconds:.0f} s ...", file=sys.stderr, flush=True)
        subprocess.run([jdk_tool("java"), f"-agentpath:{AGENT}={options}", "-cp", loop_dir, "JavacLoop",
                        str(seconds), "-d", compiled, *sources],
                       check=True, stdout=subprocess.DEVNULL, timeout=seconds + 600)
    finally:
        serve.terminate()
        serve.wait()
    listed = subprocess.run([OPENPROF, "ls", "--store", store], capture_output=True, text=True,
                            check=True).stdout
    agents = re.findall(r"agent ([0-9a-f-]{36}) .*format=b: (\d+) frames, (\d+) bytes", listed)
    if len(agents) != 1:
        sys.exit(f"fleet_store_bench: expected one agent in the recording's store:\n{listed}")
    agent, frames, stream_bytes = agents[0]
    recording = os.path.join(work, "javac.hprof")
    subprocess.run([OPENPROF, "export", agent, "--agent", "--store", store, "-o", recording], check=True)
    print(f"recorded {frames} frames, {int(stream_bytes):,} bytes", file=sys.stderr, flush=True)
    return recording


def directory_bytes(path):
    return sum(os.path.getsize(os.path.join(directory, name))
               for directory, _, names in os.walk(path) for name in names)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=100, help="simulated JVMs (default 100)")
    parser.add_argument("--services", type=int, default=10, help="services they are split into (default 10)")
    parser.add_argument("--windows", type=int, default=8640, help="windows per agent (default 8640: a day at 10 s)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the queries (default 5)")
    parser.add_argument("--batch", type=int, default=60,
                        help="windows of one agent per insert or append when loading the day (default 60)")
    parser.add_argument("--live-steps", type=int, default=3,
                        help="last windows of every agent inserted and appended one per call (default 3)")
    parser.add_argument("--record-seconds", type=float, default=300, help="how long javac is recorded (default 300)")
    parser.add_argument("--classes", type=int, default=300, help="generated classes javac compiles (default 300)")
    parser.add_argument("--recording", help="an exported recording to reuse instead of recording one")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    for path in (OPENPROF, AGENT):
        if not os.path.isfile(path):
            sys.exit("fleet_store_bench: build first: cargo build --release")
    if not os.path.isfile(ClickHouseServer.SERVER):
        sys.exit(f"fleet_store_bench: {ClickHouseServer.SERVER} is missing (Debian's clickhouse-server)")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "openprof-collector", "--example", "fleet_bench"],
                   cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="openprof-fleet-")
    server = None
    try:
        recording = args.recording or record(work, args.record_seconds, args.classes)
        server = ClickHouseServer(os.path.join(work, "clickhouse"))
        command = [EXAMPLE, "--recording", recording, "--clickhouse", server.url, "--database", "fleet",
                   "--store", os.path.join(work, "store"), "--agents", str(args.agents),
                   "--services", str(args.services), "--windows", str(args.windows),
                   "--rounds", str(args.rounds), "--batch", str(args.batch),
                   "--live-steps", str(args.live_steps), "--server-pid", str(server.process.pid)]
        print(" ".join(command), file=sys.stderr, flush=True)
        run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        if run.returncode != 0:
            sys.exit(f"fleet_store_bench: fleet_bench failed:\n{run.stdout}")
        figures = dict(re.findall(r"^([\w.]+)=(\S+)$", run.stdout, re.M))
        figures["disk.clickhouse.du_bytes"] = str(directory_bytes(os.path.join(work, "clickhouse", "data", "data",
                                                                               "fleet")))
        print_table(args, figures)
    finally:
        if server:
            server.stop()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def print_table(args, f):
    number = lambda name: float(f[name])
    print(f"recording: {f['recorded.windows']} windows of javac, {number('recorded.samples_per_window'):.0f} "
          f"samples and {number('recorded.stacks_per_window'):.0f} distinct stacks a window on average, "
          f"{f['recorded.stacks']} distinct stacks in all; its stream {number('recorded.bytes_per_window'):.0f} "
          f"bytes a window, re-encoded {number('replayed.bytes_per_window'):.0f}")
    print(f"fleet: {args.agents} agents in {args.services} services x {args.windows} windows = "
          f"{int(f['fleet.windows']):,} windows, {int(f['fleet.samples']):,} samples, "
          f"{int(f['fleet.rows']):,} rows (window x stack)")
    print()
    print(f"{'ingest':42} {'ClickHouse':>14} {'SQLite store':>14} {'ratio CH/SQLite':>16}")
    for shape, label in (("bulk", f"{args.batch} windows per call"), ("live", "one window per call")):
        for unit in ("windows_per_s", "samples_per_s"):
            ch, sq = number(f"ingest.{shape}.clickhouse.{unit}"), number(f"ingest.{shape}.sqlite.{unit}")
            print(f"{label + ', ' + unit.replace('_per_s', '/s'):42} {ch:14,.0f} {sq:14,.0f} {ch / sq:16.2f}")
        windows = {sink: number(f"ingest.{shape}.{sink}.windows_per_s") * number(f"ingest.{shape}.{sink}.seconds")
                   for sink in ("clickhouse", "sqlite")}
        ch, sq = (number(f"ingest.{shape}.{sink}.collector_cpu_s") * 1e6 / windows[sink]
                  for sink in ("clickhouse", "sqlite"))
        print(f"{label + ', collector CPU us/window':42} {ch:14,.0f} {sq:14,.0f} {ch / sq:16.2f}")
    bulk_cpu = number("ingest.bulk.clickhouse.server_cpu_s") + number("ingest.merge.clickhouse.server_cpu_s")
    bulk_windows = number("ingest.bulk.clickhouse.windows_per_s") * number("ingest.bulk.clickhouse.seconds")
    live_windows = number("ingest.live.clickhouse.windows_per_s") * number("ingest.live.clickhouse.seconds")
    print(f"ClickHouse server CPU: {bulk_cpu:.1f} s for {bulk_windows:,.0f} windows in batches (merges after "
          f"included): {bulk_windows / bulk_cpu:,.0f} windows per CPU-second; "
          f"{number('ingest.live.clickhouse.server_cpu_s'):.1f} s for {live_windows:,.0f} windows one by one: "
          f"{live_windows / max(number('ingest.live.clickhouse.server_cpu_s'), 0.01):,.0f} windows per CPU-second")
    print()
    print(f"{'query (median of ' + str(args.rounds) + ' rounds, ms)':42} {'ClickHouse':>14} {'SQLite store':>14} "
          f"{'ratio SQLite/CH':>16} {'samples':>14} {'stacks':>8} same")
    for query in ("service_hour", "service_day", "agent_day"):
        ch, sq = number(f"query.{query}.clickhouse.ms"), number(f"query.{query}.sqlite.ms")
        print(f"{query.replace('_', ' over the '):42} {ch:14,.0f} {sq:14,.0f} {sq / ch:16.1f} "
              f"{int(f[f'query.{query}.samples']):14,} {int(f[f'query.{query}.stacks']):8,} {f[f'query.{query}.same']}")
    print()
    ch, chu = number("disk.clickhouse.compressed_bytes"), number("disk.clickhouse.uncompressed_bytes")
    sq = number("disk.sqlite.bytes")
    print(f"{'disk for the run':42} {'ClickHouse':>14} {'SQLite store':>14} {'ratio CH/SQLite':>16}")
    print(f"{'bytes (ClickHouse: compressed)':42} {ch:14,.0f} {sq:14,.0f} {ch / sq:16.2f}")
    print(f"{'ClickHouse uncompressed':42} {chu:14,.0f}")
    print(f"{'bytes per window':42} {ch / number('fleet.windows'):14,.0f} {sq / number('fleet.windows'):14,.0f}")
    segments = number("disk.sqlite.segments_bytes")
    print(f"{'  SQLite: segments (zstd) per window':42} {'':14} {segments / number('fleet.windows'):14,.0f}")
    print(f"{'  SQLite: catalog per window':42} {'':14} {(sq - segments) / number('fleet.windows'):14,.0f}")
    print(f"{'  SQLite: segments per window, one a commit':42} {'':14} "
          f"{number('disk.sqlite.live_segment_bytes_per_window'):14,.0f}")
    print(f"{'ClickHouse database directory, old parts too':42} {number('disk.clickhouse.du_bytes'):14,.0f}")
    columns = sorted({name.split(".")[4] for name in f if name.startswith("disk.clickhouse.column.samples.")})
    if columns:
        rows = number("disk.clickhouse.samples.rows")
        print()
        print(f"{'samples column: bytes per row':42} {'compressed':>14} {'uncompressed':>14}")
        for column in columns:
            prefix = f"disk.clickhouse.column.samples.{column}"
            print(f"{column:42} {number(prefix + '.compressed_bytes') / rows:14.2f} "
                  f"{number(prefix + '.uncompressed_bytes') / rows:14.2f}")
    print()
    for name in sorted(f):
        if name.startswith(("disk.", "load.")) and ".column." not in name and name not in (
                "disk.clickhouse.compressed_bytes", "disk.clickhouse.uncompressed_bytes", "disk.sqlite.bytes"):
            print(f"{name} = {f[name]}")


if __name__ == "__main__":
    main()
