//! delay= against ground truth: the delayed method runs exactly as often as the workload
//! counts, every run of it is delayed, and a CPU profile gives it the share of the CPU the
//! delays took.

use std::time::Duration;

use openprof_testkit::{delays_reported, printed_figure, run_java, run_java_with};

const LIMIT: Duration = Duration::from_secs(180);

/// Samples whose stack holds `method` (`class.method`), over all the CPU tables.
fn samples_under(profile: &openprof_format::hprof_text::TextProfile, method: &str) -> u64 {
    profile
        .cpu_tables
        .iter()
        .flat_map(|table| &table.rows)
        .filter(|row| {
            profile.traces[&row.trace]
                .frames
                .iter()
                .any(|frame| frame.qualified_method() == method)
        })
        .map(|row| row.count)
        .sum()
}

#[test]
fn a_delayed_method_gets_the_share_of_the_cpu_its_delays_took() {
    // (each delay's length, where): every seventh call seven times as long, so the delays'
    // share stays the same.
    for (length, blocks) in [(20, ""), (20, ":blocks"), (140, ":every=7")] {
        let file = format!("delayed{}.txt", blocks.replace([':', '='], "-"));
        let options = format!(
            "cpu=samples,interval=1,depth=8,delay=Delayed.target:{length}us{blocks},file={file}"
        );
        // The strictest verifier checks the delay class and the rewritten code.
        let run = run_java_with(&["-Xverify:all"], Some(&options), "Delayed", &["3"], LIMIT);
        assert!(run.success(), "{options}: {}", run.stderr());
        let stdout = run.stdout();
        let calls = printed_figure(&stdout, "target_calls") as u64;
        let evens = printed_figure(&stdout, "target_evens") as u64;
        let main_cpu_ns = printed_figure(&stdout, "main_cpu_ns");
        let (delays, delayed_ns, methods) = delays_reported(&run.stderr());
        assert_eq!(methods, 1, "{}", run.stderr());
        // At entry: one delay a call. At its blocks: one for each block run, two a call and
        // one more for each even argument. With every=7, the first call, the eighth...
        // (one thread calls it).
        let expected = match blocks {
            "" => calls,
            ":blocks" => 2 * calls + evens,
            _ => calls.div_ceil(7),
        };
        assert!(evens > 0 && evens < calls, "{stdout}");
        assert_eq!(delays, expected, "{options}: {stdout}");
        // Each delay spins for its length of elapsed time; a thread made to wait for a CPU
        // meanwhile (a busy machine) spends less CPU in it, never more than the length and the
        // clock reads around it.
        let spun = delays * length * 1000;
        assert!(
            delayed_ns > spun / 2 && delayed_ns <= spun + delays * 50_000,
            "{options}: {delays} delays of {length} us took {delayed_ns} ns of CPU"
        );
        let profile = run.profile(&file);
        let total: u64 = profile.cpu_tables.iter().map(|table| table.total).sum();
        let under = samples_under(&profile, "Delayed.target");
        assert!(total >= 1000, "{options}: {total} samples");
        // Nearly all of target()'s time is the delay; the profile covers the main thread and
        // the JVM's few other Java threads.
        let truth = delayed_ns as f64 / main_cpu_ns;
        let share = under as f64 / total as f64;
        eprintln!("{options}: share {share:.3}, truth {truth:.3}");
        assert!(
            (0.2..0.9).contains(&truth),
            "{options}: the delays took {truth:.3} of the CPU"
        );
        assert!(
            (share - truth).abs() <= 0.05,
            "{options}: target() has {share:.3} of the samples ({under} of {total}), its delays \
             {truth:.3} of the main thread's CPU"
        );
    }
}

#[test]
fn a_delay_of_a_class_without_the_method_changes_nothing_and_says_so() {
    let run = run_java(
        Some("cpu=samples,delay=Delayed.absent:1us,file=absent.txt"),
        "Delayed",
        &["0.2"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains("class Delayed has no method absent with code"),
        "{stderr}"
    );
    assert_eq!(delays_reported(&stderr), (0, 0, 0));
}
