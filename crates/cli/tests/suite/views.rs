//! `openprof convert` and `openprof run -f`: a profile written as folded stacks agrees with the
//! HPROF text it came from and with CpuSplit's ground truth, stacks deep enough for a flame graph
//! by default, truncated ones marked, and bad input refused with the file named.

use std::collections::BTreeMap;
use std::path::Path;

use std::process::Command;

use openprof_testkit::{kept_temp_dir, runtime, samples_by_method, workload_classes};

use crate::helpers::{convert_in, leaf_samples, openprof_in, text, LIMIT};

fn share(samples: &BTreeMap<String, u64>, method: &str, of: &[&str]) -> f64 {
    let total: u64 = of
        .iter()
        .map(|name| samples.get(*name).copied().unwrap_or(0))
        .sum();
    100.0 * samples.get(method).copied().unwrap_or(0) as f64 / total.max(1) as f64
}

/// `openprof run ... -- java -cp CLASSES CpuSplit 3` in `dir`.
fn run_cpu_split(dir: &Path, options: &str, extra: &[&str]) -> std::process::Output {
    let java = runtime().java().expect("java");
    let classes = workload_classes().display().to_string();
    let java = java.display().to_string();
    let mut args = vec!["run", "-o", options];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", &java, "-cp", &classes, "CpuSplit", "3"]);
    openprof_in(dir, &args)
}

#[test]
fn run_writes_folded_stacks_that_agree_with_the_hprof_text() {
    let dir = kept_temp_dir("openprof-views-");
    let output = run_cpu_split(&dir, "cpu=samples,interval=1", &["-f", "cpu.collapsed"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("depth=256"),
        "run says which depth it chose: {stderr}"
    );
    let hprof = openprof_testkit::read_profile(&dir.join("java.hprof.txt"));
    assert_eq!(hprof.samplers[0].depth, Some(256), "{:?}", hprof.samplers);
    let from_text = samples_by_method(&hprof);
    let pair = ["CpuSplit.heavy", "CpuSplit.light"];
    let text_heavy = share(&from_text, "CpuSplit.heavy", &pair);
    assert!(
        (text_heavy - 75.0).abs() < 5.0,
        "the workload's 3:1 split: heavy {text_heavy:.1} %"
    );
    let collapsed = std::fs::read_to_string(dir.join("cpu.collapsed")).unwrap();
    let folded = leaf_samples(&collapsed);
    let folded_heavy = share(&folded, "CpuSplit.heavy", &pair);
    assert!(
        (folded_heavy - text_heavy).abs() < 1.0,
        "heavy {folded_heavy:.2} % folded, {text_heavy:.2} % in the text"
    );
    let folded_total: u64 = folded.values().sum();
    let text_total: u64 = hprof.cpu_tables.iter().map(|table| table.total).sum();
    assert_eq!(folded_total, text_total, "every sample folded once");
    // Whole stacks: heavy under main, not cut (main is far from 256 frames deep).
    assert!(
        collapsed
            .lines()
            .any(|line| line.starts_with("CpuSplit.main;CpuSplit.heavy ")),
        "{collapsed}"
    );
    assert!(!collapsed.contains("[truncated]"), "{collapsed}");

    // The same view as text: heavy's self share of every sample, and the tree under main.
    let report = openprof_in(
        &dir,
        &["report", "java.hprof.txt", "--event", "cpu", "--tree", "3"],
    );
    let printed = text(&report.stdout);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let heavy_row = printed
        .lines()
        .find(|line| line.ends_with(" CpuSplit.heavy"))
        .unwrap_or_else(|| panic!("{printed}"));
    let self_share: f64 = heavy_row
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    let expected = 100.0 * from_text["CpuSplit.heavy"] as f64 / text_total as f64;
    assert!(
        (self_share - expected).abs() < 0.01,
        "{heavy_row}: {expected:.2} % in the text"
    );
    let tree_at = printed
        .find("Call tree")
        .unwrap_or_else(|| panic!("{printed}"));
    let tree: Vec<&str> = printed[tree_at..].lines().collect();
    let main = tree
        .iter()
        .position(|line| line.ends_with("  CpuSplit.main"))
        .unwrap();
    assert!(
        tree[main + 1].ends_with("    CpuSplit.heavy"),
        "heavy first under main: {printed}"
    );
}

#[test]
fn threads_are_recorded_for_a_view_and_a_view_that_cannot_split_by_them_says_so() {
    // With -f, run records threads (thread=y) and says so: --threads puts CpuSplit's samples
    // under its main thread, none under an unknown one.
    let dir = kept_temp_dir("openprof-views-");
    let output = run_cpu_split(
        &dir,
        "cpu=samples,interval=1",
        &["-f", "threads.collapsed", "--threads"],
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("thread=y (threads recorded"), "{stderr}");
    let collapsed = std::fs::read_to_string(dir.join("threads.collapsed")).unwrap();
    assert!(!collapsed.contains("[unknown thread]"), "{collapsed}");
    let under_main: u64 = collapsed
        .lines()
        .filter(|line| line.starts_with("[main tid=") && line.contains("CpuSplit.heavy"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let heavy: u64 = leaf_samples(&collapsed)
        .get("CpuSplit.heavy")
        .copied()
        .unwrap_or(0);
    assert!(heavy > 0 && under_main >= heavy, "{collapsed}");

    // A profile recorded without threads can't be split by them: convert says so and writes
    // nothing, rather than put every sample under "[unknown thread]".
    let bare = kept_temp_dir("openprof-views-");
    let output = run_cpu_split(&bare, "cpu=samples,interval=10", &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let refused = openprof_in(
        &bare,
        &[
            "convert",
            "java.hprof.txt",
            "-o",
            "t.collapsed",
            "--threads",
        ],
    );
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("records no thread") && stderr.contains("thread=y"),
        "{stderr}"
    );
    assert!(!bare.join("t.collapsed").exists());
}

#[test]
fn stacks_as_deep_as_the_depth_are_marked_truncated() {
    let dir = kept_temp_dir("openprof-views-");
    let output = run_cpu_split(&dir, "cpu=samples,interval=1,depth=1", &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        !text(&output.stderr).contains("depth=256"),
        "a depth given is kept"
    );
    convert_in(
        &dir,
        &["java.hprof.txt", "-o", "cut.collapsed", "--reverse"],
    );
    let collapsed = std::fs::read_to_string(dir.join("cut.collapsed")).unwrap();
    let heavy: Vec<&str> = collapsed
        .lines()
        .filter(|line| line.starts_with("CpuSplit.heavy"))
        .collect();
    assert!(!heavy.is_empty(), "{collapsed}");
    for line in heavy {
        // Reversed: the leaf first, then the mark where the stack was cut.
        assert!(
            line.starts_with("CpuSplit.heavy;[truncated] "),
            "heavy's one frame is all depth=1 kept: {line}"
        );
    }
}

#[test]
fn bad_conversions_are_refused_with_the_file_named() {
    let dir = kept_temp_dir("openprof-views-");
    std::fs::write(dir.join("notes.txt"), "not a profile\n").unwrap();
    let mut truncated = b"JAVA PROFILE 1.0.1, created Mon Nov 23 10:00:00 2026\n\n".to_vec();
    truncated.extend_from_slice(b"TRACE 300001:\n\tCpuSplit.heavy(CpuSplit.java:\n");
    std::fs::write(dir.join("cut.hprof.txt"), truncated).unwrap();
    let cases: [(&[&str], &str); 6] = [
        (
            &["convert", "missing.txt", "-o", "x.collapsed"],
            "missing.txt",
        ),
        (
            &["convert", "notes.txt", "-o", "x.collapsed"],
            "notes.txt: unknown input format",
        ),
        (
            &["convert", "cut.hprof.txt", "-o", "x.collapsed"],
            "cut.hprof.txt",
        ),
        (
            &["convert", "notes.txt", "-o", "x.unknown"],
            "can't tell the format of x.unknown",
        ),
        (
            &[
                "convert",
                "notes.txt",
                "-o",
                "x.collapsed",
                "--include",
                "(",
            ],
            "bad --include \"(\"",
        ),
        (
            &[
                "convert",
                "notes.txt",
                "-o",
                "x.collapsed",
                "--event",
                "heat",
            ],
            "bad --event \"heat\"",
        ),
    ];
    for (args, expected) in cases {
        let output = openprof_in(&dir, args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(
        !dir.join("x.collapsed").exists(),
        "nothing written on error"
    );
}

/// AllocMix allocates byte[1400] in keep() (kept) and byte[600] in temp() (dropped at once):
/// 69.7 % and 30.3 % of the bytes allocated. `report --by alloc` ranks the sites by that, with
/// temp()'s site, which holds nothing live, at its allocated share.
#[test]
fn report_ranks_allocation_sites_by_bytes_allocated() {
    let dir = kept_temp_dir("openprof-views-");
    let java = runtime().java().expect("java").display().to_string();
    let classes = workload_classes().display().to_string();
    let output = openprof_in(
        &dir,
        &[
            "run",
            "-o",
            "heap=sites,cutoff=0",
            "--",
            &java,
            "-cp",
            &classes,
            "AllocMix",
            "20000",
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let output = openprof_in(
        &dir,
        &["report", "java.hprof.txt", "--by", "alloc", "--frames", "1"],
    );
    let report = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(report.contains("ordered by allocated bytes"), "{report}");
    // The rows: rank, self %, accum %, live bytes, ..., then the site's first frame.
    let lines: Vec<&str> = report.lines().collect();
    // (self %, live bytes, allocated bytes) of the site whose first frame is in `method`.
    let site_of = |method: &str| -> (f64, u64, u64) {
        let at = lines
            .iter()
            .position(|line| line.trim_start().starts_with(method))
            .unwrap_or_else(|| panic!("no site in {method}: {report}"));
        let row: Vec<&str> = lines[at - 1].split_whitespace().collect();
        (
            row[1].trim_end_matches('%').parse().unwrap(),
            row[3].parse().unwrap(),
            row[5].parse().unwrap(),
        )
    };
    let (keep, keep_live, keep_allocated) = site_of("AllocMix.keep");
    let (temp, temp_live, temp_allocated) = site_of("AllocMix.temp");
    // temp()'s arrays die at once; those the last collection did not reach still count live.
    assert!(keep_live > 0 && temp_live < keep_live / 2, "{report}");
    // Each share is of the bytes allocated, whatever is still live.
    let allocated = (keep_allocated + temp_allocated) as f64;
    assert!(
        (temp - 100.0 * temp_allocated as f64 / allocated).abs() < 0.01,
        "temp() {temp} %: {report}"
    );
    assert!((keep + temp - 100.0).abs() < 0.1, "{report}");
    // The sites' bytes are sampled (heap=sites), so the workload's 30.3 % holds only roughly.
    assert!((15.0..45.0).contains(&temp), "temp() {temp} %: {report}");
    let bad = openprof_in(&dir, &["report", "java.hprof.txt", "--by", "size"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("size"), "{}", text(&bad.stderr));
}

/// Two runs of CpuSplit: the differential folded stacks pair each stack's samples in both
/// profiles, as each profile's own text counts them.
#[test]
fn a_differential_view_pairs_both_profiles_stacks() {
    let dir = kept_temp_dir("openprof-views-");
    for name in ["base", "new"] {
        let options = format!("cpu=samples,interval=1,file={name}.txt");
        let output = run_cpu_split(&dir, &options, &[]);
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    convert_in(
        &dir,
        &["--diff", "base.txt", "new.txt", "-o", "diff.collapsed"],
    );
    let diff = std::fs::read_to_string(dir.join("diff.collapsed")).unwrap();
    let samples = |name: &str| -> BTreeMap<String, u64> {
        let profile = openprof_testkit::read_profile(&dir.join(name));
        samples_by_method(&profile)
    };
    let (base, new) = (samples("base.txt"), samples("new.txt"));
    let mut paired = (0, 0);
    for line in diff.lines() {
        let mut fields = line.rsplitn(3, ' ');
        let new_count: u64 = fields.next().unwrap().parse().unwrap();
        let base_count: u64 = fields.next().unwrap().parse().unwrap();
        let stack = fields.next().unwrap();
        if stack.ends_with(";CpuSplit.heavy") {
            paired.0 += base_count;
            paired.1 += new_count;
        }
    }
    assert_eq!(
        paired,
        (base["CpuSplit.heavy"], new["CpuSplit.heavy"]),
        "heavy's samples in both: {diff}"
    );
    let refused = openprof_in(
        &dir,
        &[
            "convert",
            "--diff",
            "base.txt",
            "new.txt",
            "-o",
            "diff.pb.gz",
        ],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("differential"),
        "{}",
        text(&refused.stderr)
    );
}

/// inferno (flamegraph.pl's Rust port, a reader we did not write) draws our folded stacks and
/// its differential mode reads our `stack base new` lines: the shares it prints are the HPROF
/// text's.
#[test]
fn inferno_draws_our_folded_stacks_with_the_texts_shares() {
    let dir = kept_temp_dir("openprof-views-");
    let output = run_cpu_split(&dir, "cpu=samples,interval=1", &["-f", "cpu.collapsed"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let hprof = openprof_testkit::read_profile(&dir.join("java.hprof.txt"));
    let from_text = samples_by_method(&hprof);
    let text_total: u64 = hprof.cpu_tables.iter().map(|table| table.total).sum();
    let collapsed = std::fs::read_to_string(dir.join("cpu.collapsed")).unwrap();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(
        &mut inferno::flamegraph::Options::default(),
        collapsed.lines(),
        &mut svg,
    )
    .expect("inferno reads the folded stacks");
    let svg = String::from_utf8(svg).unwrap();
    // Each frame's title: `NAME (N samples, P%)`.
    let share_in_svg = |method: &str| -> f64 {
        let start = svg
            .find(&format!("<title>{method} ("))
            .unwrap_or_else(|| panic!("{method} not drawn"));
        let title = &svg[start..svg[start..].find("</title>").unwrap() + start];
        let percent = title.rsplit(", ").next().unwrap().trim_end_matches("%)");
        percent.parse().unwrap_or_else(|_| panic!("{title}"))
    };
    for method in ["CpuSplit.heavy", "CpuSplit.light"] {
        let expected = 100.0 * from_text[method] as f64 / text_total as f64;
        let drawn = share_in_svg(method);
        // Within a point, as every view of the split: inferno rounds its titles (it drew 71 %
        // for 71.03 % once), and the text's per-method rows may differ from the leaves by a
        // sample or two.
        assert!(
            (drawn - expected).abs() < 1.0,
            "{method}: {drawn} % drawn, {expected:.3} % in the text"
        );
    }
    // The differential form, as inferno's differential folder reads it.
    convert_in(
        &dir,
        &[
            "--diff",
            "java.hprof.txt",
            "java.hprof.txt",
            "-o",
            "same.collapsed",
        ],
    );
    let diff = std::fs::read_to_string(dir.join("same.collapsed")).unwrap();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(
        &mut inferno::flamegraph::Options::default(),
        diff.lines(),
        &mut svg,
    )
    .expect("inferno reads the differential folded stacks");
    let svg = String::from_utf8(svg).unwrap();
    // Against itself, every frame's change is nothing: `NAME (N samples, P%; 0.00%)`.
    let titles: Vec<&str> = svg
        .split("<title>")
        .skip(1)
        .map(|rest| &rest[..rest.find("</title>").unwrap()])
        .filter(|title| title.contains(" samples, "))
        .collect();
    assert!(
        titles
            .iter()
            .any(|title| title.starts_with("CpuSplit.heavy (")),
        "{titles:?}"
    );
    // The root, `all`, carries no change.
    for title in titles.iter().filter(|title| !title.starts_with("all (")) {
        let change = title.rsplit("; ").next().unwrap().trim_end_matches(')');
        assert!(
            ["0.00%", "+0.00%", "-0.00%"].contains(&change),
            "a change where there is none: {title}"
        );
    }
}

/// Writes an HPROF text profile of `traces` traces, 40 frames each, that share only
/// `distinct` stacks (each serial a stack of its own, as a long run's traces are), with a CPU
/// SAMPLES row per trace. Returns the samples' total.
fn write_many_traces(path: &Path, traces: u32, distinct: u32) -> u64 {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(
        out,
        "JAVA PROFILE 1.0.1, created Mon Nov 23 10:00:00 2026\n\n--------\n"
    )
    .unwrap();
    for serial in 0..traces {
        writeln!(out, "TRACE {}:", 300_001 + serial).unwrap();
        let stack = serial % distinct;
        // Leaf first, as HPROF lists a trace's frames; the leaf tells the stacks apart.
        writeln!(out, "\tcom.example.Leaf.m{stack}(Leaf.java:1)").unwrap();
        for level in 1..40 {
            writeln!(
                out,
                "\tcom.example.p{}.Class{}.method{level}(Class.java:{})",
                level % 7,
                (stack + level) % 300,
                10 + level
            )
            .unwrap();
        }
    }
    let count = |serial: u32| u64::from(serial % 5 + 1);
    let total: u64 = (0..traces).map(count).sum();
    writeln!(
        out,
        "CPU SAMPLES BEGIN (total = {total}) Mon Nov 23 10:00:10 2026"
    )
    .unwrap();
    writeln!(out, "rank   self  accum   count trace method").unwrap();
    for serial in 0..traces {
        let share = 100.0 * count(serial) as f64 / total as f64;
        writeln!(
            out,
            "{:4} {share:5.2}% {share:5.2}% {:7} {} com.example.method0",
            serial + 1,
            count(serial),
            300_001 + serial
        )
        .unwrap();
    }
    writeln!(out, "CPU SAMPLES END").unwrap();
    out.flush().unwrap();
    total
}

#[test]
fn a_large_input_converts_with_a_progress_bar_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("large.txt");
    let total = write_many_traces(&input, 60_000, 2_000);
    let bytes = std::fs::metadata(&input).unwrap().len();
    assert!(bytes > 96 << 20, "the input is {bytes} bytes");
    // `script` gives the command a terminal, where the bar is drawn; `time`, its peak memory.
    let command = format!(
        "/usr/bin/time -f 'peak-kib %M' {} convert large.txt -o large.collapsed",
        env!("CARGO_BIN_EXE_openprof")
    );
    let mut script = Command::new("script");
    script
        .args(["-qec", &command, "/dev/null"])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = crate::helpers::finish(script, LIMIT);
    let terminal = text(&output.stdout);
    assert!(
        output.status.success(),
        "{terminal}{}",
        text(&output.stderr)
    );
    // The bar counts the input's bytes, in indicatif's binary units.
    let size = format!("{:.2} MiB", bytes as f64 / f64::from(1 << 20));
    assert!(
        terminal.contains("reading") && terminal.contains(&size),
        "no progress bar of {size} on the terminal:\n{terminal:?}"
    );
    // Nothing lost, and memory held by the distinct stacks, not by the input's size.
    let collapsed = std::fs::read_to_string(dir.path().join("large.collapsed")).unwrap();
    assert_eq!(leaf_samples(&collapsed).values().sum::<u64>(), total);
    assert_eq!(collapsed.lines().count(), 2_000);
    // The bar clears its line with an escape, so time's line may follow it on one line.
    let peak_kib: u64 = terminal
        .rsplit_once("peak-kib ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in {terminal:?}"));
    assert!(
        peak_kib * 1024 < bytes / 2,
        "{peak_kib} KiB at the peak, reading {bytes} bytes"
    );
}

/// A view holds what the application did (its methods, its threads, parameter values): like
/// the agent's outputs, it is written private to its owner whatever the umask, replaces a file
/// there with a private one, and is never written through a link.
#[test]
fn views_are_private_whatever_the_umask_and_never_written_through_a_link() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |path: &Path| std::fs::symlink_metadata(path).unwrap().mode() & 0o7777;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.hprof.txt");
    write_many_traces(&input, 20, 5);
    let convert_under_open_umask = |output: &str| {
        let mut command = std::process::Command::new("sh");
        command
            .args(["-c", "umask 000 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_openprof"))
            .args(["convert", "in.hprof.txt", "-o", output])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        crate::helpers::finish(command, crate::helpers::LIMIT)
    };
    for output in ["fresh.html", "fresh.collapsed"] {
        let converted = convert_under_open_umask(output);
        assert!(converted.status.success(), "{}", text(&converted.stderr));
        assert_eq!(mode(&dir.path().join(output)), 0o600, "{output}");
    }
    // A file already there is replaced by a private one.
    let earlier = dir.path().join("earlier.html");
    std::fs::write(&earlier, "earlier").unwrap();
    std::fs::set_permissions(&earlier, std::fs::Permissions::from_mode(0o644)).unwrap();
    let converted = convert_under_open_umask("earlier.html");
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    assert_eq!(mode(&earlier), 0o600);
    assert!(std::fs::read_to_string(&earlier).unwrap().contains("<html"));
    // A link is neither followed nor replaced.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("link.html")).unwrap();
    let converted = convert_under_open_umask("link.html");
    let stderr = text(&converted.stderr);
    assert!(!converted.status.success(), "{stderr}");
    assert!(
        stderr.contains("link.html: it is a symbolic link"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
}

/// Counts whose sum passes 2^64 - 1 (a crafted input) are held at that and said, never
/// wrapped round to a small number that would look like a real profile.
#[test]
fn counts_that_add_up_past_a_u64_are_held_and_said_never_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let max = u64::MAX;
    std::fs::write(
        dir.path().join("huge.hprof.txt"),
        format!(
            "JAVA PROFILE 1.0.1, created Mon Nov 23 10:00:00 2026\n\n--------\n\
             TRACE 300001:\n\tcom.example.A.a(A.java:1)\nTRACE 300002:\n\tcom.example.B.b(B.java:1)\n\
             CPU SAMPLES BEGIN (total = {max}) Mon Nov 23 10:00:10 2026\n\
             rank   self  accum   count trace method\n\
                1 99.99% 99.99% {max} 300001 com.example.A.a\n\
                2  0.01% 100.00%       5 300002 com.example.B.b\n\
             CPU SAMPLES END\n"
        ),
    )
    .unwrap();
    let output = openprof_in(
        dir.path(),
        &["convert", "huge.hprof.txt", "-o", "huge.collapsed"],
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("add up past 2^64 - 1"), "{stderr}");
    let folded = std::fs::read_to_string(dir.path().join("huge.collapsed")).unwrap();
    let weights: Vec<u64> = folded
        .lines()
        .filter_map(|line| line.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert_eq!(weights.iter().copied().max(), Some(max), "{folded}");
    assert!(
        weights
            .iter()
            .try_fold(0u64, |sum, weight| sum.checked_add(*weight))
            .is_some(),
        "{folded}"
    );
}
