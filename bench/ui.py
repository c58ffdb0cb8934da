#!/usr/bin/env python3
"""The web UI on a large profile: API latency, interactions in Chromium, the collector's memory.

A synthetic HPROF text profile of --stacks distinct stacks and about --samples samples (bench/
convert.py's generator) is replayed to `openprof serve --http` as an HPROF-output agent
(`openprof replay --hprof`). Then, --rounds times:
- the API's answers, timed from here: the hot methods (the first read of the profile from the
  store, then from the cache), the flame graph page, its data alone;
- the UI in headless Chromium (bench/ui_timing.mjs): login, the fleet, the flame graph's first
  render, a click to zoom, a search, the call tree, switching to the hot methods and back.
Reported: the median milliseconds of each, and the collector's resident memory before the UI
was used and at the end.

Usage: bench/ui.py [--stacks N] [--samples N] [--rounds N]
Needs: cargo build --release, Node.js with playwright-core in target/browser-tests (the test
suite installs it) and Chromium.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

from benchlib import ROOT
from convert import synthetic_hprof

TOKEN = "bench-agent-token-1"
CONTROL = "bench-control-token-2"


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def get(web, path):
    request = urllib.request.Request(f"http://{web}{path}",
                                     headers={"Authorization": f"Bearer {CONTROL}"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        body = response.read()
    return (time.monotonic() - started) * 1000, body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    openprof = os.path.join(ROOT, "target", "release", "openprof")
    work = tempfile.mkdtemp(prefix="openprof-ui-")
    profile = os.path.join(work, "large.hprof.txt")
    # Counts from 1 to max_count average (max_count + 1) / 2 per stack.
    max_count = max(1, 2 * options.samples // options.stacks - 1)
    synthetic_hprof(profile, options.stacks, max_count=max_count)
    for name, secret in (("token", TOKEN), ("control", CONTROL)):
        path = os.path.join(work, name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
            out.write(secret + "\n")
    serve = subprocess.Popen(
        [openprof, "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--store",
         os.path.join(work, "store"), "--token-file", os.path.join(work, "token"),
         "--control-token-file", os.path.join(work, "control")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        collector = serve.stdout.readline().split()[-1]
        web = serve.stdout.readline().strip().removeprefix("openprof web UI on http://").rstrip("/")
        subprocess.run([openprof, "replay", profile, "--hprof", "--collector", collector,
                        "--token-file", os.path.join(work, "token")], check=True,
                       capture_output=True)
        _, fleet = get(web, "/api/fleet")
        agent = json.loads(fleet)["agents"][0]["agent"]
        before = rss_mib(serve.pid)
        api = {"hot methods, first read": [], "hot methods, cached": [],
               "flame graph page, first": [], "flame graph page, kept": [],
               "flame graph data, first": [], "flame graph data, kept": []}
        # The browser's round 0 makes the views it asks for; later rounds find them kept.
        browser = {}
        for round_ in range(options.rounds):
            # A fresh read each round: another view's options make the profile's cache entry
            # the same, so only the first round reads the store.
            millis, _ = get(web, f"/api/methods?agent={agent}")
            api["hot methods, first read" if round_ == 0 else "hot methods, cached"].append(millis)
            millis, _ = get(web, f"/api/methods?agent={agent}")
            api["hot methods, cached"].append(millis)
            kept = "first" if round_ == 0 else "kept"
            millis, page = get(web, f"/view/flame?agent={agent}")
            api[f"flame graph page, {kept}"].append(millis)
            millis, _ = get(web, f"/api/profile?agent={agent}")
            api[f"flame graph data, {kept}"].append(millis)
            result = subprocess.run(
                ["node", os.path.join(ROOT, "bench", "ui_timing.mjs"), f"http://{web}", agent],
                capture_output=True, text=True,
                env={**os.environ, "OPENPROF_UI_TOKEN": CONTROL,
                     "OPENPROF_BROWSER_DEPS": os.path.join(ROOT, "target", "browser-tests")})
            if result.returncode != 0:
                raise RuntimeError(result.stderr[-800:])
            for name, millis in json.loads(result.stdout).items():
                browser.setdefault(name, []).append(millis)
        after = rss_mib(serve.pid)
        print(f"Profile: {options.stacks:,} distinct stacks, about {options.samples:,} samples "
              f"({os.path.getsize(profile) / 1e6:.0f} MB of HPROF text); page {len(page) / 1e6:.1f} MB")
        print("| API call | ms (median) |")
        print("|---|---|")
        for name, times in api.items():
            if times:
                print(f"| {name} | {statistics.median(times):.0f} |")
        print("| in Chromium | ms (median) |")
        print("|---|---|")
        for name, times in browser.items():
            if all(isinstance(value, bool) for value in times):
                print(f"| {name} | {'yes' if all(times) else 'no'} |")
            else:
                print(f"| {name} | {statistics.median(times):.0f} |")
        print(f"collector resident memory: {before:.0f} MiB before the UI, {after:.0f} MiB after")
    finally:
        serve.terminate()
        serve.wait()


if __name__ == "__main__":
    main()
