//! lock= against ground truth. WallStates' workers block on their `Ledger` monitors and park
//! on their ReentrantLocks for times they measure themselves, while holder threads (in
//! `WallStates.hold`) own both; ParkTimes parks for known times on blockers of its own; the
//! MONITOR TIME, PARK TIME and LOCK OWNERS tables must hold those times, on those stacks, and a
//! threshold must leave out the shorter waits. LockStorm's heavy lock traffic must leave the JVM
//! running to its normal end.

use std::time::{Duration, Instant};

use openprof_format::hprof_text::{CpuRow, LockTableKind, TextProfile};
use openprof_testkit::{printed_figure, run_java};

const LIMIT: Duration = Duration::from_secs(120);
const LEDGER: &str = "WallStates$Ledger";
const REENTRANT_LOCK: &str = "java.util.concurrent.locks.ReentrantLock$NonfairSync";
const FAIR_LOCK: &str = "java.util.concurrent.locks.ReentrantLock$FairSync";

/// The rows of one lock class in a profile's tables of one kind, each with its milliseconds.
fn rows_of(profile: &TextProfile, kind: LockTableKind, class: &str) -> Vec<(CpuRow, f64)> {
    profile
        .lock_tables_of(kind)
        .flat_map(|table| {
            table
                .rows
                .iter()
                .filter(|row| row.method.as_deref() == Some(class))
                .map(|row| {
                    (
                        row.clone(),
                        row.self_percent / 100.0 * table.total_ms as f64,
                    )
                })
        })
        .collect()
}

fn waits(rows: &[(CpuRow, f64)]) -> u64 {
    rows.iter().map(|(row, _)| row.count).sum()
}

fn milliseconds(rows: &[(CpuRow, f64)]) -> f64 {
    rows.iter().map(|(_, ms)| ms).sum()
}

/// The methods of a row's trace, innermost first.
fn methods(profile: &TextProfile, row: &CpuRow) -> Vec<String> {
    profile.traces[&row.trace]
        .frames
        .iter()
        .map(|frame| frame.qualified_method())
        .collect()
}

fn assert_within_10_percent(profiled: f64, measured: f64, what: &str) {
    assert!(
        (profiled - measured).abs() <= 0.1 * measured,
        "{profiled:.0} ms {what} in the profile, {measured} ms measured by the workload"
    );
}

/// The waits a WallStates run of `workers` × `cycles` counted: at least the waits its holders
/// saw last `WAITED_MS` or more (`counted_by`: the worker blocked or parked that long before
/// the holder let go, which a threshold of less keeps), at most one per cycle.
fn assert_waits(rows: &[(CpuRow, f64)], stdout: &str, counted_by: &str, most: u64) {
    let least = printed_figure(stdout, counted_by) as u64;
    let counted = waits(rows);
    assert!(
        (least..=most).contains(&counted),
        "{counted} waits in the profile; the holders saw {least} waits in the {most} cycles"
    );
}

#[test]
fn blocked_and_parked_times_by_lock_class() {
    let run = run_java(
        Some("lock=0,thread=y,depth=16,cutoff=0,file=locks.txt"),
        "WallStates",
        &["4", "30"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let stdout = run.stdout();
    let profile = run.profile("locks.txt");

    // Blocked entering the Ledger monitors, on the workers' stacks at the synchronized block.
    let blocked = rows_of(&profile, LockTableKind::Monitor, LEDGER);
    assert_within_10_percent(
        milliseconds(&blocked),
        printed_figure(&stdout, "blocked_ms"),
        "blocked on WallStates$Ledger",
    );
    assert_waits(&blocked, &stdout, "blocked_waits", 4 * 30);
    for (row, _) in &blocked {
        assert_eq!(
            methods(&profile, row).first().map(String::as_str),
            Some("WallStates.work"),
            "{row:?}"
        );
    }

    // Parked in ReentrantLock.lock, with the lock's sync object as the blocker, in Unsafe.park.
    let parked = rows_of(&profile, LockTableKind::Park, REENTRANT_LOCK);
    assert_within_10_percent(
        milliseconds(&parked),
        printed_figure(&stdout, "parked_ms"),
        "parked on the ReentrantLocks",
    );
    assert_waits(&parked, &stdout, "parked_waits", 4 * 30);
    for (row, _) in &parked {
        let methods = methods(&profile, row);
        assert_eq!(methods[0], "jdk.internal.misc.Unsafe.park", "{methods:?}");
        assert!(
            methods.iter().any(|method| method == "WallStates.work"),
            "{methods:?}"
        );
    }
    // Without lockowner=y there is no owners' table.
    assert_eq!(profile.lock_tables_of(LockTableKind::Owners).count(), 0);
}

#[test]
fn owners_are_the_holders() {
    let run = run_java(
        Some("lock=0,lockowner=y,thread=y,depth=16,cutoff=0,file=owners.txt"),
        "WallStates",
        &["4", "30"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let stdout = run.stdout();
    let profile = run.profile("owners.txt");
    for (class, state, measured_by, counted_by) in [
        (LEDGER, "blocked", "blocked_ms", "blocked_waits"),
        (REENTRANT_LOCK, "parked", "parked_ms", "parked_waits"),
    ] {
        let owned = rows_of(&profile, LockTableKind::Owners, class);
        // Every wait's time, on the stack of the holder thread that held the lock then.
        assert_within_10_percent(
            milliseconds(&owned),
            printed_figure(&stdout, measured_by),
            &format!("{state} on {class} by its owners"),
        );
        assert_waits(&owned, &stdout, counted_by, 4 * 30);
        for (row, _) in &owned {
            assert_eq!(row.state.as_deref(), Some(state), "{row:?}");
            let methods = methods(&profile, row);
            assert!(
                methods.iter().any(|method| method == "WallStates.hold"),
                "{methods:?}"
            );
            let thread = profile.traces[&row.trace]
                .thread
                .and_then(|serial| profile.thread(serial))
                .map(|thread| thread.name.clone());
            assert!(
                thread
                    .as_deref()
                    .is_some_and(|name| name.starts_with("holder-")),
                "{thread:?}"
            );
        }
    }
}

#[test]
fn a_threshold_leaves_out_shorter_waits() {
    // Every wait on the Ledger and the lock lasts about 20 ms: a 200 ms threshold leaves all of
    // them out, and whatever is left waited 200 ms or more.
    let run = run_java(
        Some("lock=200ms,file=locks.txt"),
        "WallStates",
        &["2", "10"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("locks.txt");
    assert!(rows_of(&profile, LockTableKind::Monitor, LEDGER).is_empty());
    assert!(rows_of(&profile, LockTableKind::Park, REENTRANT_LOCK).is_empty());
    for table in &profile.lock_tables {
        for row in &table.rows {
            let ms = row.self_percent / 100.0 * table.total_ms as f64;
            assert!(ms / row.count as f64 >= 199.0, "{row:?} of {table:?}");
        }
    }
    // A 5 ms one keeps every one of them.
    let run = run_java(
        Some("lock=5ms,file=locks.txt"),
        "WallStates",
        &["2", "10"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let stdout = run.stdout();
    let profile = run.profile("locks.txt");
    let blocked = rows_of(&profile, LockTableKind::Monitor, LEDGER);
    assert_waits(&blocked, &stdout, "blocked_waits", 2 * 10);
    let parked = rows_of(&profile, LockTableKind::Park, REENTRANT_LOCK);
    assert_waits(&parked, &stdout, "parked_waits", 2 * 10);
}

#[test]
fn parks_shorter_than_the_threshold_are_left_out() {
    // 15 parks of 1 ms on a Brief blocker and 15 of 100 ms on a Long one; a 50 ms threshold
    // keeps every long park and no brief one, lock=0 keeps all.
    for (options, brief_kept) in [("lock=50ms", false), ("lock=0", true)] {
        let run = run_java(
            Some(&format!("{options},depth=8,file=parks.txt")),
            "ParkTimes",
            &["15", "1", "100"],
            LIMIT,
        );
        assert!(run.success(), "{}", run.stderr());
        let stdout = run.stdout();
        let profile = run.profile("parks.txt");
        let long = rows_of(&profile, LockTableKind::Park, "ParkTimes$Long");
        assert_eq!(
            waits(&long),
            printed_figure(&stdout, "long_parks") as u64,
            "{options}"
        );
        assert_within_10_percent(
            milliseconds(&long),
            printed_figure(&stdout, "long_ms"),
            "parked on ParkTimes$Long",
        );
        for (row, _) in &long {
            let methods = methods(&profile, row);
            assert_eq!(methods[0], "jdk.internal.misc.Unsafe.park");
            assert!(methods.iter().any(|method| method == "ParkTimes.parkLoop"));
        }
        let brief = rows_of(&profile, LockTableKind::Park, "ParkTimes$Brief");
        let expected = if brief_kept {
            printed_figure(&stdout, "brief_parks") as u64
        } else {
            0
        };
        assert_eq!(waits(&brief), expected, "{options}");
    }
}

#[test]
fn heavy_lock_traffic_runs_to_its_end() {
    // 6 threads on one fair ReentrantLock, 4 on one monitor and 2 producer–consumer pairs on a
    // SynchronousQueue, a second each, every wait recorded with its owner's stack: the JVM must
    // run to its end (the workload checks its hand-overs), and the waits must be there.
    let started = Instant::now();
    let run = run_java(
        Some("lock=0,lockowner=y,depth=16,file=storm.txt"),
        "LockStorm",
        &["6", "4", "2", "1"],
        LIMIT,
    );
    let elapsed_ms = started.elapsed().as_millis() as f64;
    assert!(run.success(), "{}", run.stderr());
    let stdout = run.stdout();
    for figure in ["turns", "enters", "handovers"] {
        assert!(printed_figure(&stdout, figure) > 0.0, "{stdout}");
    }
    let profile = run.profile("storm.txt");
    assert!(waits(&rows_of(&profile, LockTableKind::Park, FAIR_LOCK)) > 0);
    assert!(
        waits(&rows_of(
            &profile,
            LockTableKind::Monitor,
            "java.lang.Object"
        )) > 0
    );
    // No more time waited than its threads (14, and a few of the JDK's own) had in the run.
    for kind in [LockTableKind::Monitor, LockTableKind::Park] {
        let waited_ms: f64 = profile
            .lock_tables_of(kind)
            .map(|table| table.total_ms as f64)
            .sum();
        assert!(
            waited_ms <= 18.0 * elapsed_ms,
            "{waited_ms} ms in {kind:?} in a run of {elapsed_ms} ms"
        );
    }
    // The owners are the threads taking turns, in their loops. The monitor's contended enters
    // find one; the fair lock's parks rarely do, and rightly: held for a fraction of a
    // microsecond, it hands itself to its longest waiter, and a park mostly waits while it is
    // released and that waiter is not yet running, owned by nobody (1 to 10 owners in 50,000
    // parks; owners_are_the_holders checks the owners of parks held long).
    for (class, kind) in [
        (FAIR_LOCK, LockTableKind::Park),
        ("java.lang.Object", LockTableKind::Monitor),
    ] {
        let owned = rows_of(&profile, LockTableKind::Owners, class);
        assert!(
            kind == LockTableKind::Park || waits(&owned) > 0,
            "no owner of {class}"
        );
        let waited = waits(&rows_of(&profile, kind, class));
        assert!(
            waits(&owned) <= waited,
            "{} owned waits of {class}, of {waited} waits",
            waits(&owned)
        );
        for (row, _) in owned {
            let methods = methods(&profile, &row);
            assert!(
                methods
                    .iter()
                    .any(|method| method.starts_with("LockStorm.lambda")),
                "{methods:?}"
            );
        }
    }
}
