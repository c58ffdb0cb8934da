//! The HTML flame graph driven in a real headless Chromium (Playwright's `playwright-core` on
//! Debian's chromium, by `tests/browser/flamegraph.mjs`): what the page shows of a CPU profile
//! checked against the HPROF text it came from (CpuSplit's 3:1), the event selector on an
//! allocation sites profile and on a lock profile (blocked, parked, owners), a differential
//! page, and a page of 100,000 stacks drawn first from its heaviest nodes, then searched whole.
//! `OPENPROF_SCREENSHOTS=DIR` saves the views' screenshots there (docs/images holds one set).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use openprof_analysis::profile::{Event, Frame, Profile, Sample};
use openprof_analysis::views::{self, ViewOptions};
use openprof_format::hprof_text::{LockTableKind, TextProfile};
use openprof_testkit::{run_java, samples_by_method, target_dir, workspace_root};
use serde_json::Value;

use crate::helpers::{convert_in, finish, openprof_in, text, LIMIT};

/// The browser the script drives; `CHROMIUM` names another.
pub(crate) fn chromium() -> PathBuf {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.is_file(),
        "{} is missing: Chromium is a prerequisite of the browser tests \
         (apt-get install chromium; scripts/test installs it)",
        path.display()
    );
    path
}

/// `playwright-core` installed once per test process from the committed lock file, into
/// `target/browser-tests` (reinstalled when the lock file changes).
pub(crate) fn browser_deps() -> &'static Path {
    static DEPS: OnceLock<PathBuf> = OnceLock::new();
    DEPS.get_or_init(|| {
        let source = workspace_root().join("crates/cli/tests/browser");
        let deps = target_dir()
            .parent()
            .expect("target dir")
            .join("browser-tests");
        let lock = fs::read(source.join("package-lock.json")).expect("package-lock.json");
        let installed = deps
            .join("node_modules/playwright-core/package.json")
            .is_file()
            && fs::read(deps.join("package-lock.json")).ok().as_ref() == Some(&lock);
        if !installed {
            fs::create_dir_all(&deps).expect("target/browser-tests");
            for file in ["package.json", "package-lock.json"] {
                fs::copy(source.join(file), deps.join(file)).expect("copy the package files");
            }
            let output = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&deps)
                .output()
                .expect("npm (Node.js 20+) is a prerequisite of the browser tests");
            assert!(
                output.status.success(),
                "npm ci in {} failed: {}",
                deps.display(),
                text(&output.stderr)
            );
        }
        deps
    })
}

/// A profile opened in speedscope's own app (`tests/browser/speedscope.mjs`): the page's errors
/// and its Sandwich view's rows, `[total, self, name]` with times like `2.23s (73%)`.
pub(crate) fn open_in_speedscope(profile: &Path) -> Value {
    let output = finish(
        {
            let mut command = Command::new("node");
            command
                .arg(workspace_root().join("crates/cli/tests/browser/speedscope.mjs"))
                .arg(profile)
                .env("OPENPROF_BROWSER_DEPS", browser_deps())
                .env("CHROMIUM", chromium())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            command
        },
        LIMIT,
    );
    assert!(
        output.status.success(),
        "speedscope on {}: {}",
        profile.display(),
        text(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the driver's JSON");
    assert_eq!(
        seen["errors"],
        serde_json::json!([]),
        "speedscope's errors: {seen}"
    );
    seen
}

/// The share in parentheses of a speedscope Sandwich cell: `2.23s (73%)` is 73.
pub(crate) fn speedscope_share(cell: &Value) -> f64 {
    let text = cell.as_str().expect("a cell");
    let inside = text
        .rsplit_once('(')
        .and_then(|(_, rest)| rest.strip_suffix("%)"))
        .unwrap_or_else(|| panic!("no share in {text}"));
    inside
        .parse()
        .unwrap_or_else(|_| panic!("no share in {text}"))
}

/// Where to save screenshots, when asked for.
fn screenshot_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("OPENPROF_SCREENSHOTS").filter(|dir| !dir.is_empty())?;
    let dir = workspace_root().join(dir);
    fs::create_dir_all(&dir).expect("the screenshot directory");
    Some(dir)
}

/// Runs the browser script on a page and returns what it saw.
pub(crate) fn drive(page: &Path, args: &[&str], screenshots: Option<&Path>) -> Value {
    let mut command = Command::new("node");
    command
        .arg(workspace_root().join("crates/cli/tests/browser/flamegraph.mjs"))
        .arg(page)
        .args(args)
        .env("OPENPROF_BROWSER_DEPS", browser_deps())
        .env("CHROMIUM", chromium())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(dir) = screenshots {
        command.arg("--screenshots").arg(dir);
    }
    let output = finish(command, LIMIT);
    assert!(
        output.status.success(),
        "the browser script failed on {}: {}",
        page.display(),
        text(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "the browser script's output: {error}: {}",
            text(&output.stdout)
        )
    });
    assert_eq!(seen["errors"], Value::Array(Vec::new()), "script errors");
    assert_eq!(
        seen["requests"],
        Value::Array(Vec::new()),
        "the page used the network"
    );
    seen
}

fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// The total of the HPROF text's CPU SAMPLES tables: samples not listed included, as in the
/// table's header.
fn cpu_total(profile: &TextProfile) -> u64 {
    profile.cpu_tables.iter().map(|table| table.total).sum()
}

#[test]
fn the_page_shows_the_cpu_split_of_the_hprof_text() {
    let run = run_java(
        Some("cpu=samples,interval=1,depth=64,file=x.txt"),
        "CpuSplit",
        &["3"],
        LIMIT,
    );
    assert!(run.success(), "CpuSplit: {}", run.stderr());
    let hprof = run.profile("x.txt");
    let by_method = samples_by_method(&hprof);
    let total = cpu_total(&hprof) as f64;
    let share = |method: &str| 100.0 * by_method[method] as f64 / total;
    let (heavy, light) = (share("CpuSplit.heavy"), share("CpuSplit.light"));
    convert_in(&run.dir, &["x.txt", "-o", "x.html"]);

    let screenshots = screenshot_dir();
    let seen = drive(
        &run.dir.join("x.html"),
        &[
            "--click",
            "CpuSplit.heavy",
            "--search",
            "CpuSplit\\.heavy",
            "--search",
            "light",
            "--expand",
            "CpuSplit.main",
        ],
        screenshots.as_deref(),
    );
    let context = format!("{seen:#}");
    assert_eq!(seen["title"], "x.txt (cpu)", "{context}");
    assert_eq!(seen["events"], serde_json::json!(["cpu"]), "{context}");
    assert_eq!(number(&seen["total"]["value"]), total, "{context}");

    // The search's matched share: heavy's and light's within 1 point of the HPROF text's.
    for (query, expected) in [("CpuSplit\\.heavy", heavy), ("light", light)] {
        let matched = &seen["searches"][query];
        let shown = number(&matched["share"]);
        assert!(
            (shown - expected).abs() <= 1.0,
            "search {query}: the page says {shown:.2} %, the HPROF text {expected:.2} %"
        );
        assert_eq!(
            matched["text"],
            format!("Matched: {shown:.2} %"),
            "{context}"
        );
    }
    assert_eq!(seen["matchedAfterClear"], "", "{context}");

    // The tooltip names the frame under the mouse with its share; a click zooms to it.
    assert_eq!(seen["tooltip"]["hidden"], false, "{context}");
    assert_eq!(seen["tooltip"]["name"], "CpuSplit.heavy", "{context}");
    let tooltip_share = number(&seen["tooltip"]["share"]);
    assert!(
        (tooltip_share - heavy).abs() <= 1.0,
        "the tooltip says {tooltip_share:.2} %, the HPROF text {heavy:.2} %"
    );
    let tooltip_text = seen["tooltip"]["text"].as_str().unwrap();
    assert!(
        tooltip_text.contains(&format!("{tooltip_share:.2} %")),
        "{context}"
    );
    assert_eq!(seen["zoomed"]["name"], "CpuSplit.heavy", "{context}");
    assert!(
        seen["zoomed"]["text"]
            .as_str()
            .unwrap()
            .contains("CpuSplit.heavy"),
        "{context}"
    );
    assert!(number(&seen["zoomedWidth"]) > 0.99, "{context}");
    assert_eq!(seen["zoomedAfterReset"], "", "{context}");

    // Reversed, the leaves come first: heavy the widest.
    assert_eq!(seen["reversedPressed"], "true", "{context}");
    let reversed = &seen["reversedRoots"][0];
    assert_eq!(reversed["name"], "CpuSplit.heavy", "{context}");
    let reversed_share = 100.0 * number(&reversed["total"]) / total;
    assert!((reversed_share - heavy).abs() <= 1.0, "{context}");

    // The call tree lists heavy and light under main with their totals, heaviest first.
    assert_eq!(seen["treeVisible"], true, "{context}");
    assert_eq!(seen["flameVisible"], false, "{context}");
    let rows = seen["tree"].as_array().unwrap();
    for (method, expected) in [("CpuSplit.heavy", heavy), ("CpuSplit.light", light)] {
        let row = rows
            .iter()
            .find(|row| row["name"] == method && row["depth"] == 1)
            .unwrap_or_else(|| panic!("the tree has no {method} row under main: {context}"));
        let row_share = 100.0 * number(&row["total"]) / total;
        assert!(
            (row_share - expected).abs() <= 1.0,
            "the tree's {method}: {row_share:.2} %, the HPROF text {expected:.2} %"
        );
        assert_eq!(row["cells"][2], format!("{row_share:.2} %"), "{context}");
    }
    let under_main: Vec<f64> = rows
        .iter()
        .filter(|row| row["depth"] == 1)
        .map(|row| number(&row["total"]))
        .collect();
    assert!(
        under_main.windows(2).all(|pair| pair[0] >= pair[1]),
        "{context}"
    );
    assert_eq!(
        number(&seen["eventTotals"]["cpu"]["value"]),
        total,
        "{context}"
    );

    // --minwidth: no frame narrower than that is drawn.
    convert_in(&run.dir, &["x.txt", "-o", "narrow.html", "--minwidth", "1"]);
    let narrow = drive(&run.dir.join("narrow.html"), &[], None);
    let narrowest = number(&narrow["narrowestShare"]);
    assert!(narrowest >= 1.0, "a frame of {narrowest} % is drawn");
    assert!(number(&narrow["frameCount"]) < number(&seen["frameCount"]));
}

#[test]
fn the_event_selector_switches_to_each_events_total() {
    let run = run_java(Some("heap=sites,file=x.txt"), "AllocMix", &["20000"], LIMIT);
    assert!(run.success(), "AllocMix: {}", run.stderr());
    let hprof = run.profile("x.txt");
    let sites = || hprof.sites.iter().flat_map(|table| &table.rows);
    let sum = |field: fn(&openprof_format::hprof_text::SiteEntry) -> u64| -> f64 {
        sites().map(|row| field(&row.site)).sum::<u64>() as f64
    };
    // Weighed by value: bytes and objects apart.
    convert_in(&run.dir, &["x.txt", "-o", "x.html", "--total"]);
    let seen = drive(&run.dir.join("x.html"), &[], None);
    let context = format!("{seen:#}");
    assert_eq!(
        seen["events"],
        serde_json::json!(["alloc_bytes", "alloc_objects", "live_bytes", "live_objects"]),
        "{context}"
    );
    assert_eq!(seen["total"]["event"], "alloc_bytes", "{context}");
    for (event, unit, expected) in [
        ("alloc_bytes", "bytes", sum(|site| site.allocated_bytes)),
        ("alloc_objects", "count", sum(|site| site.allocated_objects)),
        ("live_bytes", "bytes", sum(|site| site.live_bytes)),
        ("live_objects", "count", sum(|site| site.live_objects)),
    ] {
        let shown = &seen["eventTotals"][event];
        assert_eq!(shown["event"], event, "{context}");
        assert_eq!(shown["unit"], unit, "{context}");
        assert_eq!(number(&shown["value"]), expected, "{event}: {context}");
    }
    assert_ne!(
        seen["eventTotals"]["alloc_bytes"]["value"], seen["eventTotals"]["alloc_objects"]["value"],
        "the switch must change the total: {context}"
    );
}

/// A lock profile's page: the lock event holds the time blocked and parked (the Ledger monitor
/// and the ReentrantLock's sync object as the stacks' leaves, told apart by kind), the
/// lock_owner event the same waits on the holders' stacks, each as the HPROF text's tables.
#[test]
fn a_lock_profile_offers_blocked_parked_and_the_owners() {
    let run = run_java(
        Some("lock=0,lockowner=y,depth=16,cutoff=0,file=x.txt"),
        "WallStates",
        &["2", "15"],
        LIMIT,
    );
    assert!(run.success(), "WallStates: {}", run.stderr());
    let hprof = run.profile("x.txt");
    let table_ns = |kinds: &[LockTableKind]| -> f64 {
        hprof
            .lock_tables
            .iter()
            .filter(|table| kinds.contains(&table.kind))
            .map(|table| table.total_ms as f64 * 1e6)
            .sum()
    };
    let lock_ns = table_ns(&[LockTableKind::Monitor, LockTableKind::Park]);
    let blocked_share = 100.0 * table_ns(&[LockTableKind::Monitor]) / lock_ns;
    convert_in(&run.dir, &["x.txt", "-o", "x.html", "--total"]);
    let seen = drive(&run.dir.join("x.html"), &["--search", "Ledger"], None);
    let context = format!("{seen:#}");
    assert_eq!(
        seen["events"],
        serde_json::json!(["lock", "lock_owner"]),
        "{context}"
    );
    for (event, expected) in [
        ("lock", lock_ns),
        ("lock_owner", table_ns(&[LockTableKind::Owners])),
    ] {
        let shown = &seen["eventTotals"][event];
        assert_eq!(shown["unit"], "nanoseconds", "{context}");
        let value = number(&shown["value"]);
        assert!(
            (value - expected).abs() <= 0.005 * expected + 2e6,
            "{event}: {value} ns on the page, {expected} ns in the tables"
        );
    }
    // The Ledger frames, the blocked share of the lock event.
    let share = number(&seen["searches"]["Ledger"]["share"]);
    assert!(
        (share - blocked_share).abs() <= 0.5,
        "the Ledger's share {share} %, blocked {blocked_share} % in the tables: {context}"
    );
    let legend = seen["legend"].to_string();
    for kind in ["monitor class (blocked)", "park blocker class (parked)"] {
        assert!(legend.contains(kind), "{legend}");
    }
}

#[test]
fn a_diff_colours_each_frame_by_the_change_of_its_share() {
    let run = run_java(
        Some("cpu=samples,interval=1,depth=64,file=x.txt"),
        "CpuSplit",
        &["1"],
        LIMIT,
    );
    assert!(run.success(), "CpuSplit: {}", run.stderr());
    let hprof = run.profile("x.txt");
    let heavy =
        100.0 * samples_by_method(&hprof)["CpuSplit.heavy"] as f64 / cpu_total(&hprof) as f64;
    // A base without CpuSplit's frames: heavy's change is its whole share.
    let base = run_java(
        Some("cpu=samples,interval=1,depth=64,file=base.txt"),
        "AllocMix",
        &["100000"],
        LIMIT,
    );
    assert!(base.success(), "AllocMix: {}", base.stderr());
    let base_path = base.dir.join("base.txt");
    let base_arg = base_path.to_str().unwrap();
    convert_in(&run.dir, &["--diff", base_arg, "x.txt", "-o", "diff.html"]);
    let seen = drive(
        &run.dir.join("diff.html"),
        &["--click", "CpuSplit.heavy", "--expand", "CpuSplit.main"],
        None,
    );
    let context = format!("{seen:#}");
    assert_eq!(
        seen["title"],
        format!("x.txt (cpu) vs {base_arg}"),
        "{context}"
    );
    assert_eq!(
        seen["legend"],
        serde_json::json!(["grew", "shrank"]),
        "{context}"
    );
    let change = number(&seen["tooltip"]["change"]);
    assert!(
        (change - heavy).abs() <= 1.0,
        "heavy's change: the page says {change:.2} points, its HPROF share is {heavy:.2} %"
    );
    assert!(
        seen["tooltip"]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("change: +{change:.2} points")),
        "{context}"
    );

    // Against itself, nothing changed anywhere.
    convert_in(&run.dir, &["--diff", "x.txt", "x.txt", "-o", "same.html"]);
    let same = drive(
        &run.dir.join("same.html"),
        &["--click", "CpuSplit.heavy", "--expand", "CpuSplit.main"],
        None,
    );
    let context = format!("{same:#}");
    assert_eq!(number(&same["tooltip"]["change"]), 0.0, "{context}");
    let rows = same["tree"].as_array().unwrap();
    assert!(rows.len() > 2, "{context}");
    for row in rows {
        assert_eq!(row["base"], row["total"], "{context}");
        assert_eq!(number(&row["change"]), 0.0, "{context}");
    }

    // A diff is a flame graph or folded stacks, nothing else.
    let refused = openprof_in(
        &run.dir,
        &["convert", "--diff", "x.txt", "x.txt", "-o", "x.pb.gz"],
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("a differential view is written as"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn a_page_of_100000_stacks_is_drawn_first_from_its_heaviest_nodes() {
    // 100,000 distinct stacks 18 frames deep: a binary tree of calls under one root.
    let mut profile = Profile::new("synthetic");
    let mut expected = 0;
    for index in 0..100_000u64 {
        let mut frames = vec![Frame::java("app.Main.main")];
        frames.extend((0..17).map(|level| {
            Frame::java(format!(
                "app.Level{level}.branch{}",
                (index >> (16 - level)) & 1
            ))
        }));
        frames.reverse();
        let stack = profile.stack_of_frames_leaf_first(frames);
        let count = 1 + index % 7;
        expected += count;
        profile.add_sample(Sample::counted(stack, Event::Cpu, count));
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("large.html");
    let mut out = Vec::new();
    views::html::write(&profile, &ViewOptions::default(), &mut out).unwrap();
    fs::write(&page, &out).unwrap();
    let seen = drive(&page, &["--search", "branch1$"], None);
    assert_eq!(number(&seen["total"]["value"]), expected as f64);
    eprintln!(
        "100,000 stacks: a page of {} bytes, drawn {} ms after its navigation began",
        out.len(),
        number(&seen["drawnMillis"])
    );
    // The page was first drawn from the tree cut to its heaviest nodes, and that drawing is the
    // one the whole tree gives: the same frames, as wide.
    let first = &seen["firstDrawing"];
    assert_eq!(first["cut"], true, "{first}");
    assert_eq!(number(&first["count"]), number(&seen["frameCount"]));
    assert!(
        (number(&first["width"]) - number(&seen["drawnWidth"])).abs() < 1e-6,
        "{first} against {}",
        seen["drawnWidth"]
    );
    // Every stack but the all-zero one has a branch1 frame: the search's share is the whole
    // tree's.
    let matched = number(&seen["searches"]["branch1$"]["share"]);
    let all_zero_share = 100.0 / expected as f64;
    assert!(
        (matched - (100.0 - all_zero_share)).abs() < 0.01,
        "matched {matched}"
    );
}
