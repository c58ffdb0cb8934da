//! Many threads, starting and ending while sampling runs every millisecond.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openprof_testkit::run_java;

#[test]
fn busy_and_short_lived_threads_are_all_recorded_and_sampled() {
    let run = run_java(
        Some("cpu=samples,interval=1,thread=y,cutoff=0,file=threads.txt"),
        "ThreadChurn",
        &["10", "12"],
        Duration::from_secs(180),
    );
    assert!(run.success(), "the JVM failed: {}", run.stderr());
    assert!(
        !run.files().iter().any(|file| file.starts_with("hs_err")),
        "a crash log: {:?}",
        run.files()
    );
    let started_by_workload: BTreeSet<String> = run
        .stdout()
        .lines()
        .filter_map(|line| line.strip_prefix("thread "))
        .map(str::to_string)
        .collect();
    assert_eq!(started_by_workload.len(), 20);

    let profile = run.profile("threads.txt");
    let mut serial_by_name = BTreeMap::new();
    for start in &profile.threads_started {
        assert!(
            serial_by_name
                .insert(start.name.clone(), start.serial)
                .is_none()
                || start.name == "DestroyJavaVM",
            "thread name recorded twice: {}",
            start.name
        );
    }
    let serials: BTreeSet<u32> = profile.threads_started.iter().map(|t| t.serial).collect();
    assert_eq!(
        serials.len(),
        profile.threads_started.len(),
        "serials are unique"
    );
    let ended: BTreeSet<u32> = profile.threads_ended.iter().copied().collect();
    assert_eq!(
        ended.len(),
        profile.threads_ended.len(),
        "a thread ends once"
    );
    assert!(ended.is_subset(&serials), "THREAD END without THREAD START");

    let sampled_threads: BTreeSet<u32> = profile
        .cpu_tables
        .iter()
        .flat_map(|table| &table.rows)
        .filter_map(|row| profile.traces[&row.trace].thread)
        .collect();
    for name in &started_by_workload {
        let serial = serial_by_name
            .get(name)
            .unwrap_or_else(|| panic!("no THREAD START for {name}"));
        assert!(ended.contains(serial), "no THREAD END for {name}");
        assert!(sampled_threads.contains(serial), "no samples from {name}");
    }
    let sampler = &profile.samplers[0];
    let total: u64 = profile.cpu_tables.iter().map(|table| table.total).sum();
    assert!(total > 1000, "{total} samples");
    assert_eq!(sampler.dropped, 0);
}
