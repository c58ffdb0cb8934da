#!/usr/bin/env python3
"""Collector ingest over loopback: a recorded trace replayed into `openprof serve`.

Records one trace (Ticker under format=x,cpu=times), then for each round starts a fresh
collector with a fresh store and replays the recording into it with `openprof replay`, which
prints elements/s, MB/s and the delay from sending a frame to its acknowledgement (the moment
the data is durable in the store). Run after `cargo build --release`.

    bench/ingest_bench.py --rounds 3 --seconds 4
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

from benchlib import ROOT, jdk_tool

OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
TOKEN = "bench-token"


def record(work, seconds):
    classes = os.path.join(work, "classes")
    subprocess.run(
        [jdk_tool("javac"), "-d", classes, os.path.join(ROOT, "java", "workloads", "Ticker.java")],
        check=True,
    )
    trace = os.path.join(work, "recording.xml")
    subprocess.run(
        [
            jdk_tool("java"),
            f"-agentpath:{AGENT}=format=x,cpu=times,filter=+Ticker,file={trace}",
            "-cp",
            classes,
            "Ticker",
            str(seconds),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return trace


def replay_once(work, trace, round_number, per_fragment):
    store = os.path.join(work, f"store-{round_number}")
    env = dict(os.environ, OPENPROF_TOKEN=TOKEN)
    serve = subprocess.Popen(
        [OPENPROF, "serve", "--listen", "127.0.0.1:0", "--store", store],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        address = serve.stdout.readline().strip().rsplit(" ", 1)[-1]
        out = subprocess.run(
            [
                OPENPROF,
                "replay",
                trace,
                "--collector",
                address,
                "--elements-per-fragment",
                str(per_fragment),
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
    finally:
        serve.terminate()
        serve.wait()
    figures = re.search(
        r"(\d+) elements in (\d+) frames, (\d+) bytes, ([\d.]+) s: (\d+) elements/s, ([\d.]+) MB/s; "
        r"acknowledged after p50 ([\d.]+) ms, p99 ([\d.]+) ms",
        out,
    )
    if not figures:
        raise SystemExit(f"unexpected replay output: {out}")
    store_bytes = sum(
        os.path.getsize(os.path.join(dirpath, name))
        for dirpath, _, names in os.walk(store)
        for name in names
    )
    return {
        "elements": int(figures.group(1)),
        "bytes": int(figures.group(3)),
        "elements_per_s": float(figures.group(5)),
        "mb_per_s": float(figures.group(6)),
        "p50_ms": float(figures.group(7)),
        "p99_ms": float(figures.group(8)),
        "store_bytes": store_bytes,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4, help="how long Ticker is recorded")
    parser.add_argument("--elements-per-fragment", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="openprof-ingest-") as work:
        trace = record(work, args.seconds)
        rounds = [
            replay_once(work, trace, n, args.elements_per_fragment) for n in range(args.rounds)
        ]
    first = rounds[0]
    print(
        f"recording: {first['elements']} elements, {first['bytes'] / 1e6:.1f} MB of frames; "
        f"store {first['store_bytes'] / 1e6:.1f} MB (zstd + catalog)"
    )
    for n, r in enumerate(rounds):
        print(
            f"round {n}: {r['elements_per_s'] / 1e6:.3f} M elements/s, {r['mb_per_s']:.1f} MB/s, "
            f"stored after p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
        )
    print(
        f"median: {statistics.median(r['elements_per_s'] for r in rounds) / 1e6:.3f} M elements/s, "
        f"{statistics.median(r['mb_per_s'] for r in rounds):.1f} MB/s, "
        f"p50 delay {statistics.median(r['p50_ms'] for r in rounds):.1f} ms, "
        f"p99 delay {statistics.median(r['p99_ms'] for r in rounds):.1f} ms"
    )


if __name__ == "__main__":
    main()
