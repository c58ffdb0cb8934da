//! Our own stack walker (`walker=vm`) and its check against AsyncGetCallTrace (`walker=check`),
//! against the workloads' ground truth.

use std::time::Duration;

use openprof_format::hprof_text::{FrameLine, SamplerReport, TextProfile};
use openprof_testkit::{printed_figure, run_java, run_java_with, samples_by_method};

use crate::cpu_samples::{stub_frames_over_their_caller, virtual_split};

const LIMIT: Duration = Duration::from_secs(120);

/// The walker's counts over every CPU SAMPLER record of a profile.
fn walker_counts(profile: &TextProfile) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    for report in &profile.samplers {
        for (kind, count) in &report.walker_counts {
            *counts.entry(kind.clone()).or_default() += count;
        }
    }
    counts
}

fn last_sampler(profile: &TextProfile) -> &SamplerReport {
    profile.samplers.last().expect("a CPU SAMPLER record")
}

/// With our walker, CpuSplit's known split (heavy 75 %) holds as the workload measured it, and
/// our walker, not AsyncGetCallTrace, walked nearly every sample.
#[test]
fn our_walker_gives_the_known_split() {
    known_split_walked_by_ours("cpu=samples,interval=1,walker=vm,file=vm.txt");
}

/// The same when parameter tracing rewrote CpuSplit as it loaded: its methods are then new
/// Method structures, which our walker must know from their class as it knows the others.
#[test]
fn a_class_rewritten_by_parameter_tracing_is_walked_by_ours() {
    let dir = openprof_testkit::kept_temp_dir("openprof-walker-mpt-");
    let specs = dir.join("specs.mpt");
    std::fs::write(&specs, "CpuSplit.heavy(long,int) 2\n").expect("spec file");
    known_split_walked_by_ours(&format!(
        "cpu=samples,interval=1,walker=vm,mpt=@{},file=vm.txt",
        specs.display()
    ));
}

fn known_split_walked_by_ours(options: &str) {
    let run = run_java(Some(options), "CpuSplit", &["3"], LIMIT);
    assert!(run.success(), "{}", run.stderr());
    let measured = printed_figure(&run.stdout(), "heavy_cpu_share");
    let profile = run.profile("vm.txt");
    assert_eq!(last_sampler(&profile).walker.as_deref(), Some("vm"));
    let by_method = samples_by_method(&profile);
    let heavy = by_method.get("CpuSplit.heavy").copied().unwrap_or(0) as f64;
    let light = by_method.get("CpuSplit.light").copied().unwrap_or(0) as f64;
    assert!(heavy + light >= 1000.0, "{by_method:?}");
    let share = heavy / (heavy + light);
    assert!(
        (share - measured).abs() <= 0.05,
        "heavy has {share:.3} of the samples, the workload measured {measured:.3}"
    );
    let counts = walker_counts(&profile);
    let walked = counts.get("walked").copied().unwrap_or(0) as f64;
    let fell_back: u64 = counts
        .iter()
        .filter(|(kind, _)| kind.starts_with("failed."))
        .map(|(_, count)| count)
        .sum();
    assert!(
        walked >= 0.9 * (heavy + light),
        "our walker walked {walked} samples, fell back on {fell_back}: {counts:?}"
    );
}

/// A sample in an arraycopy stub gets the stub's frame over the Java method that called it,
/// with our walker stepping over the stub (which AsyncGetCallTrace cannot).
#[test]
fn our_walker_steps_over_stubs_and_names_them() {
    let profile = stub_frames_over_their_caller("cpu=samples,interval=1,depth=4,walker=vm");
    let total: u64 = profile.cpu_tables.iter().map(|table| table.total).sum();
    let counts = walker_counts(&profile);
    assert!(
        counts.get("failed.stub_on_top").copied().unwrap_or(0) * 100 <= total,
        "our walker gave up on stubs: {counts:?}"
    );
}

/// In the interpreter the bytecode being run is in a register, and the frame holds it only from
/// the last call on: a loop without calls is where the register is. Interpreted (-Xint), every
/// sample of heavy() is in its loop (lines 19 to 21) but for the few in its first line and its
/// return; our walker must say so for nine samples in ten.
#[test]
fn interpreted_samples_are_on_the_line_the_interpreter_runs() {
    let run = run_java_with(
        &["-Xint"],
        Some("cpu=samples,interval=1,depth=2,walker=vm,file=xint.txt"),
        "CpuSplit",
        &["2"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("xint.txt");
    let (mut in_heavy, mut in_loop) = (0, 0);
    for row in profile.cpu_tables.iter().flat_map(|table| &table.rows) {
        let frames = &profile.traces[&row.trace].frames;
        let Some(top) = frames.first() else { continue };
        if top.qualified_method() != "CpuSplit.heavy" {
            continue;
        }
        in_heavy += row.count;
        if matches!(top.line, FrameLine::Line(19..=21)) {
            in_loop += row.count;
        }
    }
    assert!(in_heavy >= 500, "{in_heavy} samples in heavy()");
    assert!(
        in_loop as f64 >= 0.9 * in_heavy as f64,
        "{in_loop} of heavy()'s {in_heavy} samples on its loop's lines"
    );
}

/// `walker=check`: both walkers walk every sample and the record counts how they compared.
/// Megamorphic's samples are in dispatch stubs, method entries and compiled loops, where walks
/// are hardest; where AsyncGetCallTrace walked, the two must give the same methods for 95 % of
/// the samples (the top frame's bytecode index may differ: docs/decisions.md), and
/// ours must walk nearly every sample AsyncGetCallTrace walked.
#[test]
fn the_check_finds_both_walkers_agree_where_asyncgetcalltrace_walks() {
    let run = run_java(
        Some("cpu=samples,interval=1,depth=64,walker=check,file=check.txt"),
        "Megamorphic",
        &["3"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("check.txt");
    assert_eq!(last_sampler(&profile).walker.as_deref(), Some("check"));
    let counts = walker_counts(&profile);
    let count = |kind: &str| counts.get(kind).copied().unwrap_or(0);
    let compared: u64 = counts
        .iter()
        .filter(|(kind, _)| kind.starts_with("check."))
        .map(|(_, count)| count)
        .sum();
    let total: u64 = profile.cpu_tables.iter().map(|table| table.total).sum();
    assert!(
        compared >= total,
        "{compared} samples compared, {total} in the tables: {counts:?}"
    );
    // The samples AsyncGetCallTrace walked.
    let by_itself = compared - count("check.both_failed") - count("check.only_vm_walked");
    let agree = count("check.same")
        + count("check.other_top_line")
        + count("check.other_top_line_interpreted");
    assert!(
        agree as f64 >= 0.95 * by_itself as f64,
        "the walkers agree on {agree} of {by_itself} samples: {counts:?}"
    );
    let ours_failed = count("check.only_asgct_walked");
    assert!(
        ours_failed * 100 <= compared,
        "ours failed on {ours_failed} of {compared} samples: {counts:?}"
    );
    // Each record keeps up to two examples of each kind of disagreement it counted, both
    // walks named frame by frame; where the kind says the methods agree, they do.
    let mut examples = 0;
    for report in &profile.samplers {
        for example in &report.walker_examples {
            let kind = &example.kind;
            let counted = report
                .walker_counts
                .get(&format!("check.{kind}"))
                .copied()
                .unwrap_or(0);
            assert!(
                counted > 0 && kind != "same",
                "{example:?}: {:?}",
                report.walker_counts
            );
            let of_kind = report
                .walker_examples
                .iter()
                .filter(|other| other.kind == *kind);
            assert!(of_kind.count() <= 2, "{:?}", report.walker_examples);
            for frame in example.vm.iter().chain(&example.asgct) {
                assert!(frame == "?" || frame.contains('@'), "{example:?}");
            }
            if kind.starts_with("other_top_line") {
                let method =
                    |frame: &String| frame.split_once('@').map(|(method, _)| method.to_string());
                let methods = |frames: &[String]| frames.iter().map(method).collect::<Vec<_>>();
                assert_eq!(methods(&example.vm), methods(&example.asgct), "{example:?}");
                assert_ne!(example.vm, example.asgct, "{example:?}");
            }
            examples += 1;
        }
    }
    let disagreed = compared - count("check.same");
    assert!(
        disagreed == 0 || examples > 0,
        "{disagreed} disagreements, no example: {counts:?}"
    );
}

/// Virtual threads (JDK 21 and later) with our walker: 10,000 of them do a known split of work
/// (heavy about 75 %, as the threads measure it), which the samples give within 2 points, and our walker walks them; a walk ends
/// where the virtual thread's frames on its carrier's stack do. On a JDK without virtual
/// threads there is nothing to check.
#[test]
fn our_walker_walks_virtual_threads_and_the_split_is_right() {
    let Some((profile, heavy, light)) = virtual_split("cpu=samples,interval=1,depth=12,walker=vm")
    else {
        return;
    };
    let counts = walker_counts(&profile);
    let walked = counts.get("walked").copied().unwrap_or(0) as f64;
    assert!(
        walked >= 0.9 * (heavy + light),
        "our walker walked {walked} samples: {counts:?}"
    );
}
