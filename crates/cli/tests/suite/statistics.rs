//! `openprof report --stats` on real JVMs, against what the workloads were built to do: Calls'
//! exact call counts (cpu=times, in a trace and in HPROF text), AllocMix's split of bytes between
//! its two allocating methods and what stays live (heap=sites), ThreadSplit's 3:2:1 CPU between
//! three threads, and ComponentSplit's CPU between three packages mapped to components.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use openprof_testkit::{printed_figure, run_java, Run};
use serde_json::Value;

use crate::helpers::{openprof_in, text};

const LIMIT: Duration = Duration::from_secs(180);

/// `openprof report FILE ARGS --json` in `dir`, which must succeed, as JSON.
fn stats_json(dir: &Path, file: &str, args: &[&str]) -> Value {
    let mut all = vec!["report", file];
    all.extend_from_slice(args);
    all.push("--json");
    let output = openprof_in(dir, &all);
    assert!(
        output.status.success(),
        "openprof {all:?}: {}",
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{all:?}: {error}: {}", text(&output.stdout)))
}

fn run(options: &str, main_class: &str, args: &[&str]) -> Run {
    let run = run_java(Some(options), main_class, args, LIMIT);
    assert!(run.success(), "{main_class}: {}", run.stderr());
    run
}

fn number(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

fn float(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// The rows of a JSON list by a string field.
fn by<'a>(rows: &'a Value, field: &str) -> BTreeMap<String, &'a Value> {
    rows.as_array()
        .unwrap_or_else(|| panic!("not a list: {rows}"))
        .iter()
        .map(|row| (row[field].as_str().unwrap_or_default().to_string(), row))
        .collect()
}

const CALLS: u64 = 300;
const EXCEPTIONS: u64 = 4;

/// Calls' methods with the calls its main makes: work() CALLS times, catcher() once per
/// exception, thrower() three times per exception.
fn expected_calls() -> [(&'static str, u64); 3] {
    [
        ("Calls.work", CALLS),
        ("Calls.catcher", EXCEPTIONS),
        ("Calls.thrower", 3 * EXCEPTIONS),
    ]
}

#[test]
fn calls_are_counted_exactly_and_timed_per_call() {
    let (calls, exceptions) = (CALLS.to_string(), EXCEPTIONS.to_string());
    let args = [calls.as_str(), exceptions.as_str(), "extras"];
    // A trace: every call an entry and an exit, timed.
    let traced = run(
        "format=x,cpu=times,monitor=y,filter=+Calls;-*,file=t.xml",
        "Calls",
        &args,
    );
    let stats = stats_json(
        &traced.dir,
        "t.xml",
        &["--stats", "methods", "--sort", "calls"],
    );
    assert_eq!(stats["event"], "cpu_time");
    let methods = by(&stats["methods"], "name");
    for (method, calls) in expected_calls() {
        let figures = &methods[method]["calls"];
        assert_eq!(number(&figures["calls"]), calls, "{method}: {figures}");
        let wall = &figures["wall"];
        assert_eq!(
            number(&wall["count"]),
            calls,
            "{method}: every call has a span"
        );
        let (min, mean, max) = (
            number(&wall["min_ns"]),
            number(&wall["mean_ns"]),
            number(&wall["max_ns"]),
        );
        assert!(min <= mean && mean <= max, "{method}: {wall}");
        let cpu = &figures["cpu"];
        let (min, mean, max) = (
            number(&cpu["self_min_ns"]),
            number(&cpu["self_mean_ns"]),
            number(&cpu["self_max_ns"]),
        );
        assert!(min <= mean && mean <= max, "{method}: {cpu}");
    }
    // Sorted by calls: work() first.
    assert_eq!(stats["methods"][0]["name"], "Calls.work");

    // work()'s one caller is main, for all its calls; it runs on main only.
    let work = stats_json(
        &traced.dir,
        "t.xml",
        &["--stats", "resource", "--resource", "Calls.work"],
    );
    assert_eq!(work["resource"]["kind"], "method");
    assert_eq!(
        work["loader"]
            .as_str()
            .map(|l| l.ends_with("AppClassLoader")),
        Some(true)
    );
    let callers: Vec<(&str, u64)> = work["callers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["event"] == "calls")
        .map(|row| (row["name"].as_str().unwrap(), number(&row["total_value"])))
        .collect();
    assert_eq!(callers, [("Calls.main", CALLS)]);
    let threads: Vec<&str> = work["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["name"].as_str().unwrap())
        .collect();
    assert!(threads.iter().all(|name| *name == "main"), "{threads:?}");

    // The monitor spans: main blocks once entering the lock the holder keeps; the holder waits
    // once.
    let threads = stats_json(&traced.dir, "t.xml", &["--stats", "threads"]);
    let rows = by(&threads["threads"]["threads"], "name");
    assert_eq!(number(&rows["main"]["monitor_blocked"]["count"]), 1);
    assert_eq!(number(&rows["holder"]["monitor_waited"]["count"]), 1);

    // HPROF's CPU TIME: the same counts, by trace rows (so no per-call extremes).
    let times = run(
        "cpu=times,cutoff=0,filter=+Calls;-*,file=times.txt",
        "Calls",
        &args,
    );
    let stats = stats_json(&times.dir, "times.txt", &["--stats", "methods"]);
    let methods = by(&stats["methods"], "name");
    for (method, calls) in expected_calls() {
        let figures = &methods[method]["calls"];
        assert_eq!(number(&figures["calls"]), calls, "{method}: {figures}");
        assert!(figures["wall"].is_null(), "HPROF text has no spans");
        assert!(figures["cpu"]["self_min_ns"].is_null(), "{figures}");
    }
}

/// AllocMix allocates byte[1400] in keep() (all kept) and byte[600] in temp() (dropped at once):
/// with 16-byte array headers, keep() makes 1416 / (1416 + 616) = 69.7 % of the bytes.
#[test]
fn allocations_by_method_split_as_alloc_mix_allocates() {
    const ROUNDS: f64 = 50_000.0;
    let run = run(
        "heap=sites,alloc_interval=8k,cutoff=0,file=sites.txt",
        "AllocMix",
        &["50000"],
    );
    let stats = stats_json(&run.dir, "sites.txt", &["--stats", "allocations"]);
    assert_eq!(stats["sorted_by"], "alloc_bytes");
    assert_eq!(
        stats["by_class"][0]["class"], "byte[]",
        "{}",
        stats["by_class"]
    );
    let methods = by(&stats["by_method"], "method");
    let (keep, temp) = (methods["AllocMix.keep"], methods["AllocMix.temp"]);
    let figure = |row: &Value, field: &str| float(&row[field]);
    let share =
        figure(keep, "alloc_bytes") / (figure(keep, "alloc_bytes") + figure(temp, "alloc_bytes"));
    let truth = 1416.0 / (1416.0 + 616.0);
    assert!(
        (share - truth).abs() < 0.05,
        "keep() {share:.3} of the bytes, truth {truth:.3}"
    );
    for (what, estimate) in [
        ("keep() objects", figure(keep, "alloc_objects")),
        ("temp() objects", figure(temp, "alloc_objects")),
    ] {
        assert!((estimate / ROUNDS - 1.0).abs() < 0.1, "{what}: {estimate}");
    }
    // Allocated against live: all of keep()'s stay, none of temp()'s.
    assert!(
        (figure(keep, "live_bytes") / figure(keep, "alloc_bytes") - 1.0).abs() < 0.01,
        "{keep}"
    );
    assert!(
        figure(temp, "live_bytes") <= 0.02 * figure(temp, "alloc_bytes"),
        "{temp}"
    );
    // keep()'s first site by bytes is its byte[] (a String of the JVM's own may be sampled in
    // keep() too, far behind).
    let keep_site = stats["by_site"]
        .as_array()
        .unwrap()
        .iter()
        .find(|site| site["method"] == "AllocMix.keep")
        .unwrap();
    assert_eq!(keep_site["class"], "byte[]", "{}", stats["by_site"]);

    // The class looked up: who allocates it, the same figures.
    let bytes = stats_json(
        &run.dir,
        "sites.txt",
        &[
            "--stats",
            "resource",
            "--resource",
            "class:byte[]",
            "--event",
            "alloc_bytes",
        ],
    );
    let allocators: BTreeMap<&str, u64> = bytes["allocated_by"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["event"] == "alloc_bytes" && number(&row["self_value"]) > 0)
        .map(|row| (row["name"].as_str().unwrap(), number(&row["self_value"])))
        .collect();
    let byte_sites: u64 = stats["by_site"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["class"] == "byte[]" && row["method"] == "AllocMix.keep")
        .map(|row| number(&row["alloc_bytes"]))
        .sum();
    assert_eq!(allocators["AllocMix.keep"], byte_sites);
}

/// ThreadSplit's threads split-3, split-2 and split-1 use 3:2:1 of the CPU.
#[test]
fn threads_share_the_cpu_as_thread_split_burns_it() {
    let run = run(
        "cpu=samples,interval=1,thread=y,depth=64,file=cpu.txt",
        "ThreadSplit",
        &["3"],
    );
    let stats = stats_json(&run.dir, "cpu.txt", &["--stats", "threads"]);
    let rows = by(&stats["threads"]["threads"], "name");
    let names = ["split-3", "split-2", "split-1"];
    let samples: Vec<f64> = names
        .iter()
        .map(|name| float(&rows[*name]["cpu_samples"]))
        .collect();
    let all: f64 = samples.iter().sum();
    for (name, samples) in names.iter().zip(&samples) {
        let share = samples / all;
        let truth = printed_figure(
            &run.stdout(),
            &format!("{}_cpu_share", name.replace('-', "_")),
        );
        assert!(
            (share - truth).abs() <= 0.05,
            "{name}: {share:.3} of the three's CPU samples, measured {truth:.3}"
        );
    }
    // The three spin in the same method: split by thread, its rows follow the same split.
    let methods = stats_json(&run.dir, "cpu.txt", &["--stats", "methods", "--threads"]);
    let spin: BTreeMap<&str, u64> = methods["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["name"] == "ThreadSplit.spin")
        .map(|row| {
            (
                row["thread"]["name"].as_str().unwrap(),
                number(&row["self_value"]),
            )
        })
        .collect();
    assert!(
        spin["split-3"] > spin["split-2"] && spin["split-2"] > spin["split-1"],
        "{spin:?}"
    );
    let thread = stats_json(
        &run.dir,
        "cpu.txt",
        &["--stats", "resource", "--resource", "thread:split-3"],
    );
    assert_eq!(thread["resource"]["kind"], "thread");
    let hottest = thread["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["event"] == "cpu")
        .max_by_key(|row| number(&row["self_value"]))
        .unwrap();
    assert_eq!(hottest["name"], "ThreadSplit.spin");
    assert_eq!(number(&hottest["self_value"]), spin["split-3"]);
}

/// ComponentSplit's packages: app computes 3 units, web 1 and calls db for 2.
#[test]
fn components_share_the_cpu_as_component_split_spends_it() {
    let run = run(
        "cpu=samples,interval=1,depth=64,file=cpu.txt",
        "split.app.ComponentSplit",
        &["3"],
    );
    let map = "# ComponentSplit's packages\napp = split.app\nweb = split.web.*\ndb = split.db\n";
    std::fs::write(run.dir.join("components.map"), map).unwrap();
    let stats = stats_json(
        &run.dir,
        "cpu.txt",
        &["--stats", "components", "--components", "components.map"],
    );
    let components = by(&stats["components"], "name");
    let self_of = |name: &str| float(&components[name]["self_value"]);
    let named = self_of("app") + self_of("web") + self_of("db");
    for name in ["app", "web", "db"] {
        let share = self_of(name) / named;
        let truth = printed_figure(&run.stdout(), &format!("{name}_cpu_share"));
        assert!(
            (share - truth).abs() <= 0.05,
            "{name}: {share:.3} of the three's self samples, measured {truth:.3}"
        );
    }
    // Where the CPU passes: every database call is made from web; main is on every stack.
    let total_of = |name: &str| number(&components[name]["total_value"]);
    assert!(total_of("web") >= self_of("web") as u64 + total_of("db"));
    assert!(total_of("app") >= self_of("app") as u64 + total_of("web"));
    let packages = by(&stats["packages"], "name");
    assert_eq!(
        float(&packages["split.db"]["self_value"]),
        self_of("db"),
        "db is one package"
    );
    assert!(stats["loaders"].is_null());
    assert!(stats["loaders_note"]
        .as_str()
        .is_some_and(|note| note.contains("does not tell class loaders")));

    // Against CpuSplit, which has none of these packages: each component's change is all of
    // its share.
    let cpu_split = run_java(
        Some("cpu=samples,interval=1,depth=64,file=base.txt"),
        "CpuSplit",
        &["1"],
        LIMIT,
    );
    assert!(cpu_split.success(), "{}", cpu_split.stderr());
    std::fs::copy(cpu_split.dir.join("base.txt"), run.dir.join("base.txt")).unwrap();
    let diff = stats_json(
        &run.dir,
        "cpu.txt",
        &[
            "--stats",
            "components",
            "--components",
            "components.map",
            "--diff",
            "base.txt",
        ],
    );
    let rows = by(&diff["rows"], "name");
    for name in ["app", "web", "db"] {
        assert_eq!(float(&rows[name]["base_self_percent"]), 0.0);
        assert_eq!(
            float(&rows[name]["self_percent_change"]),
            float(&components[name]["self_percent"]),
            "{name}"
        );
    }
    assert_eq!(float(&rows["other"]["base_self_percent"]), 100.0);

    // A bad map: its line and column, nothing printed.
    std::fs::write(
        run.dir.join("bad.map"),
        "app = split.app\nweb = split.web*\n",
    )
    .unwrap();
    let output = openprof_in(
        &run.dir,
        &[
            "report",
            "cpu.txt",
            "--stats",
            "components",
            "--components",
            "bad.map",
        ],
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad component map bad.map: line 2, column 13: \"split.web*\": a * stands for a whole package name"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

/// A JFR recording names each class's loader: the workload's classes are the application class
/// loader's, the JDK's the bootstrap loader's.
#[test]
fn class_loaders_from_a_jfr_recording() {
    let (recording, _) =
        crate::views_jfr::record("components", "", &[], "split.app.ComponentSplit", &["1"]);
    let dir = recording.parent().unwrap();
    let file = recording.file_name().unwrap().to_str().unwrap();
    let db = stats_json(
        dir,
        file,
        &[
            "--stats",
            "resource",
            "--resource",
            "class:split.db.SplitDb",
        ],
    );
    let app_loader = "app (jdk.internal.loader.ClassLoaders$AppClassLoader)";
    assert_eq!(db["loader"], app_loader, "{db}");
    let stats = stats_json(dir, file, &["--stats", "components"]);
    let loaders = by(&stats["loaders"], "name");
    assert!(loaders.contains_key(app_loader), "{}", stats["loaders"]);
    // Whatever the JDK runs on the workload's stacks is the bootstrap loader's; the workload's
    // own code, where nearly all of the CPU goes, the application's.
    let app = &loaders[app_loader];
    assert!(
        number(&app["self_value"]) * 2 > number(&stats["total_value"]),
        "{}",
        stats["loaders"]
    );
    if let Some(bootstrap) = loaders.get("bootstrap") {
        assert!(number(&bootstrap["self_value"]) < number(&app["self_value"]));
    }
}

/// What is wrong with a request is said before any profile is read, or with what the profile
/// holds.
#[test]
fn bad_requests_are_refused_with_what_was_wrong() {
    let run = run("cpu=samples,interval=1,file=cpu.txt", "CpuSplit", &["0.2"]);
    let cases: [(&[&str], &str); 8] = [
        (
            &["--stats", "threads", "--threads"],
            "--threads splits methods, allocations and components by thread",
        ),
        (
            &["--stats", "resource"],
            "--stats resource needs --resource NAME",
        ),
        (
            &["--stats", "methods", "--resource", "x"],
            "--resource is for --stats resource",
        ),
        (
            &["--stats", "methods", "--reverse"],
            "--reverse shapes flame graphs and trees, not statistics",
        ),
        (
            &["--stats", "methods", "--sort", "speed"],
            "bad --sort \"speed\": one of self, total",
        ),
        (
            &["--stats", "methods", "--event", "alloc_bytes"],
            "has no alloc_bytes samples; it has: cpu",
        ),
        (
            &["--stats", "resource", "--resource", "CpuSplit.heavvy"],
            "no method, class, package or thread is named \"CpuSplit.heavvy\"",
        ),
        (
            &["--stats", "allocations"],
            "holds no samples of allocations",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["report", "cpu.txt"];
        all.extend_from_slice(args);
        let output = openprof_in(&run.dir, &all);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let output = openprof_in(
        &run.dir,
        &[
            "report",
            "cpu.txt",
            "--stats",
            "resource",
            "--resource",
            "CpuSplit.heav",
        ],
    );
    assert!(
        text(&output.stderr).contains("did you mean method:CpuSplit.heavy?"),
        "{}",
        text(&output.stderr)
    );
    // The table form of each kind.
    for kind in ["methods", "threads", "components"] {
        let output = openprof_in(
            &run.dir,
            &["report", "cpu.txt", "--stats", kind, "--top", "3"],
        );
        assert!(output.status.success(), "{kind}: {}", text(&output.stderr));
        assert!(
            text(&output.stdout).starts_with("openprof: cpu.txt"),
            "{kind}: {}",
            text(&output.stdout)
        );
    }
}
