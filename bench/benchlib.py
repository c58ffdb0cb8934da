"""What the benchmark scripts share: the workspace root and the JDK's tools."""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def jdk_tool(name):
    """A JDK tool (java, javac, jcmd) from JAVA_HOME, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.join(home, "bin", name)
    found = shutil.which(name)
    if not found:
        sys.exit(f"{os.path.basename(sys.argv[0])}: no {name}: set JAVA_HOME or put a JDK on PATH")
    return found


def compile_workload(workload, work):
    """Compiles java/workloads/WORKLOAD.java into WORK/classes; returns that directory."""
    classes = os.path.join(work, "classes")
    subprocess.run([jdk_tool("javac"), "-d", classes,
                    os.path.join(ROOT, "java", "workloads", f"{workload}.java")], check=True)
    return classes


def run_workload(java, classes, work, agent_option, workload, args):
    """Runs a workload (with `agent_option`, e.g. an -agentpath, unless None) in `work`; returns
    the figures it printed as NAME=NUMBER, by name."""
    command = [java, "-cp", classes]
    if agent_option:
        command.insert(1, agent_option)
    result = subprocess.run(command + [workload, *args], capture_output=True, text=True,
                            cwd=work, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr[-500:]}")
    return {name: int(value) for name, value in re.findall(r"(\w+)=(\d+)\b", result.stdout)}


def javac_sources(work, classes):
    """Writes `classes` generated classes under WORK/generated for javac to compile (each 20
    methods of collections, string building and boxing); returns their paths."""
    sources = os.path.join(work, "generated")
    os.makedirs(sources)
    for i in range(classes):
        with open(os.path.join(sources, f"Generated{i}.java"), "w") as out:
            out.write(f"import java.util.*;\npublic class Generated{i} {{\n")
            for m in range(20):
                out.write(f"  public List<String> m{m}(Map<String, Integer> in) {{\n"
                          f"    List<String> out = new ArrayList<>();\n"
                          f"    for (Map.Entry<String, Integer> e : in.entrySet())\n"
                          f"      if (e.getValue() > {m}) out.add(e.getKey() + \"{i}\" + e.getValue());\n"
                          f"    return out;\n  }}\n")
            out.write("}\n")
    return sorted(os.path.join(sources, name) for name in os.listdir(sources))


class ClickHouseServer:
    """Debian's clickhouse-server on loopback ports of its own, its config, data and logs in
    `directory`; stopped by stop() (or at exit of a `with` block)."""

    SERVER = "/usr/sbin/clickhouse-server"

    def __init__(self, directory):
        import socket
        import time
        if not os.path.exists(self.SERVER):
            sys.exit(f"{os.path.basename(sys.argv[0])}: {self.SERVER} is missing: apt-get install clickhouse-server")

        def free_port():
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                return probe.getsockname()[1]

        self.directory = directory
        self.http_port, tcp_port = free_port(), free_port()
        data = os.path.join(directory, "data")
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(ROOT, "scripts", "clickhouse-server.xml")) as template:
            config = template.read()
        for name, value in [("@DIR@", directory), ("@DATA@", data), ("@HTTP_PORT@", self.http_port),
                            ("@TCP_PORT@", tcp_port)]:
            config = config.replace(name, str(value))
        with open(os.path.join(directory, "config.xml"), "w") as out:
            out.write(config)
        self.process = None
        self.start()
        self._time = time

    def start(self):
        import socket
        import time
        self.process = subprocess.Popen([self.SERVER, f"--config-file={self.directory}/config.xml"],
                                        cwd=self.directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.http_port), timeout=1).close()
                return
            except OSError:
                if time.time() > deadline:
                    sys.exit("clickhouse-server did not listen")
                time.sleep(0.1)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.http_port}"

    def query(self, sql):
        """Runs one statement over HTTP; returns the answer's text."""
        import urllib.request
        with urllib.request.urlopen(urllib.request.Request(self.url, data=sql.encode())) as answer:
            return answer.read().decode()

    def stop(self):
        if self.process:
            self.process.kill()
            self.process.wait()
            self.process = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()


OPENPROF = os.path.join(ROOT, "target", "release", "openprof")


def agents_in_store(store):
    """The agent ids a collector's store holds, as `openprof ls` lists them."""
    listed = subprocess.run([OPENPROF, "ls", "--store", store], capture_output=True, text=True).stdout
    return [line.split()[1] for line in listed.splitlines() if line.strip().startswith("agent ")]


def stored_cpu_samples(work, store, agent):
    """An agent's CPU samples as its collector stored them (exported, then summed by
    `openprof convert`); None when the store holds no readable profile of it."""
    exported = os.path.join(work, f"{agent}.hprof")
    converted = os.path.join(work, f"{agent}.collapsed")
    for command in ([OPENPROF, "export", "--store", store, "--agent", agent, "-o", exported],
                    [OPENPROF, "convert", exported, "--event", "cpu", "-o", converted]):
        if subprocess.run(command, capture_output=True).returncode != 0:
            return None
    with open(converted) as lines:
        return sum(int(line.rstrip("\n").rsplit(" ", 1)[1]) for line in lines)


def wait_until_held(stored, held_of, limit, period):
    """Polls `held_of(agent)` (the samples a sink holds) until it equals what each agent's
    collector `stored`, for at most `limit` seconds; returns what failed, one line each."""
    import time
    failed = []
    deadline = time.time() + limit
    pending = dict(stored)
    while pending and time.time() < deadline:
        for agent, samples in list(pending.items()):
            held = held_of(agent)
            if held == samples:
                del pending[agent]
            elif held > samples:
                failed.append(f"agent {agent}: ClickHouse holds {held} samples, its collector stored {samples}")
                del pending[agent]
        time.sleep(period)
    for agent, samples in pending.items():
        failed.append(f"agent {agent}: ClickHouse never held its {samples} samples")
    return failed


def malloc_in_use_mb(pid, log_path):
    """The bytes glibc's malloc has handed out and not taken back, asked of the live process.

    gdb makes the collector call malloc_stats(), which prints to its standard error (A's log);
    the last "Total" block's "in use bytes" is what the collector holds, without the free
    chunks glibc keeps in its arenas. The collector stops for the fraction of a second this
    takes."""
    subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "call (void) malloc_stats()"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    with open(log_path) as log:
        totals = log.read().rsplit("Total (incl. mmap):", 1)
    if len(totals) < 2:
        return None
    found = re.search(r"in use bytes\s*=\s*(\d+)", totals[1])
    return int(found.group(1)) / 1e6 if found else None
