//! heap=sites against ground truth: AllocMix allocates 69.7 % of its bytes at keep() (all kept
//! live) and 30.3 % at temp() (all dead at once).

use std::io::BufReader;
use std::time::Duration;

use openprof_format::hprof_binary::read_profile;
use openprof_format::hprof_text::{SitesTable, TextProfile};
use openprof_testkit::run_java;

const ROUNDS: u64 = 50_000;
/// Array sizes with their 16-byte header, as AllocMix allocates them.
const KEPT_BYTES: f64 = 1416.0;
const TEMP_BYTES: f64 = 616.0;

/// (allocated bytes, allocated objects, live bytes, live objects) of the sites whose trace
/// starts in `method`.
fn site_of(profile: &TextProfile, table: &SitesTable, method: &str) -> (f64, f64, f64, f64) {
    let mut figures = (0.0, 0.0, 0.0, 0.0);
    for row in &table.rows {
        let top = profile
            .traces
            .get(&row.site.trace)
            .and_then(|trace| trace.frames.first())
            .map(|frame| frame.qualified_method());
        if top.as_deref() == Some(method) && row.site.class_name == "byte[]" {
            figures.0 += row.site.allocated_bytes as f64;
            figures.1 += row.site.allocated_objects as f64;
            figures.2 += row.site.live_bytes as f64;
            figures.3 += row.site.live_objects as f64;
        }
    }
    figures
}

fn assert_mix(profile: &TextProfile) {
    let table = profile.sites.last().expect("a SITES table");
    let kept = site_of(profile, table, "AllocMix.keep");
    let temp = site_of(profile, table, "AllocMix.temp");
    let expected_share = KEPT_BYTES / (KEPT_BYTES + TEMP_BYTES);
    let share = kept.0 / (kept.0 + temp.0);
    assert!(
        (share - expected_share).abs() < 0.05,
        "keep() share {share:.3}, expected {expected_share:.3}: {kept:?} {temp:?}"
    );
    // Estimated counts near the truth: at 8k, temp()'s 30.8 MB give about 3,800 samples, a
    // standard error under 2 %, so 10 % is more than five of them.
    for (what, estimate, truth) in [
        ("keep() objects", kept.1, ROUNDS as f64),
        ("temp() objects", temp.1, ROUNDS as f64),
        ("keep() bytes", kept.0, ROUNDS as f64 * KEPT_BYTES),
    ] {
        assert!(
            (estimate / truth - 1.0).abs() < 0.1,
            "{what}: estimated {estimate}, truth {truth}"
        );
    }
    // Live versus allocated: every keep() object is live at exit, no temp() object is.
    assert!(
        (kept.2 / kept.0 - 1.0).abs() < 0.01,
        "keep() live {} of {}",
        kept.2,
        kept.0
    );
    assert!(
        temp.2 <= 0.02 * temp.0,
        "temp() live {} of {}",
        temp.2,
        temp.0
    );
}

#[test]
fn sites_show_the_allocation_mix_and_what_stays_live() {
    let run = run_java(
        Some("heap=sites,alloc_interval=8k,cutoff=0,file=sites.txt"),
        "AllocMix",
        &[&ROUNDS.to_string()],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("sites.txt");
    assert_mix(&profile);
    let text = std::fs::read_to_string(run.dir.join("sites.txt")).unwrap();
    assert!(
        text.contains("SITES BEGIN (ordered by live bytes) "),
        "{text}"
    );
    assert!(text.contains(" rank   self  accum     bytes objs     bytes  objs trace name"));
}

#[test]
fn binary_alloc_sites_carry_the_same_mix() {
    let run = run_java(
        Some("heap=sites,format=b,alloc_interval=8k,cutoff=0,file=sites.hprof"),
        "AllocMix",
        &[&ROUNDS.to_string()],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let file = std::fs::File::open(run.dir.join("sites.hprof")).unwrap();
    let profile = read_profile(BufReader::new(file), &mut |_| {}).expect("our binary reads");
    assert_mix(&profile);
}

#[test]
fn alloc_interval_0_counts_every_allocation() {
    let run = run_java(
        Some("heap=sites,alloc_interval=0,cutoff=0,file=sites.txt"),
        "AllocMix",
        &["20000"],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("sites.txt");
    let table = profile.sites.last().expect("a SITES table");
    let kept = site_of(&profile, table, "AllocMix.keep");
    // Every allocation is sampled once each thread's sampling is armed (at its first TLAB
    // refill): all but a handful of the first.
    assert!(
        kept.1 <= 20000.0 && kept.1 >= 19900.0,
        "keep() objects {}",
        kept.1
    );
    // No scaling: bytes per object are the array's size (within one odd sample's worth).
    assert!(
        (kept.0 / kept.1 / KEPT_BYTES - 1.0).abs() < 0.001,
        "{} bytes for {} objects",
        kept.0,
        kept.1
    );
}
