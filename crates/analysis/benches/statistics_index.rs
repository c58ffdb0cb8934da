//! The statistics index on a synthetic profile of the size the web UI must serve: 1,000,000
//! samples on 100,000 distinct stacks (walks 10 to 60 frames deep down a call graph of 20,000
//! methods in 2,000 classes and 200 packages, each method calling four others), on 16 threads, CPU and
//! wall-clock with states. Prints the index's build time and memory, the time of one lookup
//! (everything about one resource) over many resources, and of the whole-profile statistics.
//!
//! `cargo bench -p openprof-analysis --bench statistics_index [-- SAMPLES STACKS]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use openprof_analysis::profile::{Event, Frame, Profile, Sample, STATE_LABEL};
use openprof_analysis::statistics::{ComponentMap, MethodSort, StatisticsIndex};
use openprof_analysis::views::ViewOptions;

const METHODS: u64 = 20_000;
const THREADS: u64 = 16;

/// splitmix64: the same profile on every run, without a dependency.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn method_name(method: u64) -> String {
    let class = method / 10;
    format!("com.bench.p{}.C{class}.m{method}", class / 10)
}

fn synthetic(samples: usize, stacks: usize) -> Profile {
    let mut random = Random(42);
    let mut profile = Profile::new("synthetic");
    let frames: Vec<Frame> = (0..METHODS).map(|m| Frame::java(method_name(m))).collect();
    let root = Frame::java("java.lang.Thread.run");
    let mut ids = Vec::with_capacity(stacks);
    // A call graph: each method calls four others; a stack is a walk down it from one of 64
    // entry points, so stacks share their callers as real ones do.
    while profile.stack_count() < stacks {
        let depth = 10 + random.below(51);
        let mut method = random.below(64);
        let mut stack = vec![root.clone()];
        for _ in 0..depth {
            stack.push(frames[method as usize].clone());
            method = (method * 31 + random.below(4) * 7919 + 1) % METHODS;
        }
        stack.reverse();
        let before = profile.stack_count();
        let id = profile.stack_of_frames_leaf_first(stack);
        if profile.stack_count() > before {
            ids.push(id);
        }
    }
    let threads: Vec<u32> = (0..THREADS)
        .map(|id| profile.thread_id(id, &format!("worker-{id}")))
        .collect();
    let states = [
        "running", "running", "waiting", "parked", "blocked", "sleeping",
    ];
    for index in 0..samples {
        // Skewed: a few stacks take most samples, as hot paths do.
        let pick = random.below(ids.len() as u64);
        let stack = ids[(pick * random.below(ids.len() as u64) / ids.len() as u64) as usize];
        let wall = random.below(10) < 3;
        profile.add_sample(Sample {
            stack,
            event: if wall { Event::Wall } else { Event::Cpu },
            value: 1,
            count: 1,
            thread: Some(threads[random.below(THREADS) as usize]),
            time_ns: Some(index as u64 * 10_000),
            labels: if wall {
                vec![(
                    STATE_LABEL.to_string(),
                    states[random.below(states.len() as u64) as usize].to_string(),
                )]
            } else {
                Vec::new()
            },
        });
    }
    profile
}

/// The process's resident memory and its peak so far, in MiB.
fn resident_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Median, 99th percentile and maximum of some durations, in microseconds.
fn spread(mut times: Vec<Duration>) -> String {
    times.sort();
    let at = |fraction: f64| times[((times.len() - 1) as f64 * fraction) as usize];
    format!(
        "median {:>8.1} µs  p99 {:>8.1} µs  max {:>8.1} µs  ({} lookups)",
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        times[times.len() - 1].as_secs_f64() * 1e6,
        times.len()
    )
}

fn main() {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let samples = numbers.first().copied().unwrap_or(1_000_000);
    let stacks = numbers.get(1).copied().unwrap_or(100_000);
    let started = Instant::now();
    let profile = synthetic(samples, stacks);
    let (profile_rss, _) = resident_mib();
    println!(
        "profile: {} samples, {} stacks, {} frames, {} threads (made in {:.1} s; resident {:.0} MiB)",
        profile.samples.len(),
        profile.stack_count(),
        profile.frames().len(),
        profile.threads.len(),
        started.elapsed().as_secs_f64(),
        profile_rss
    );

    let options = ViewOptions::default();
    let started = Instant::now();
    let index = StatisticsIndex::build(&profile, &options);
    let mut builds = vec![started.elapsed()];
    // Resident memory after the first build: what the index holds, with what the allocator
    // keeps of the build's scratch.
    let (with_index, peak) = resident_mib();
    for _ in 0..2 {
        let started = Instant::now();
        black_box(StatisticsIndex::build(&profile, &options));
        builds.push(started.elapsed());
    }
    builds.sort();
    let (resources, kept_stacks, cells) = index.sizes();
    println!(
        "build: {:.2} s (median of 3: {:.2} {:.2} {:.2}); {resources} resources, {kept_stacks} \
         stacks, {cells} cells",
        builds[1].as_secs_f64(),
        builds[0].as_secs_f64(),
        builds[1].as_secs_f64(),
        builds[2].as_secs_f64()
    );
    println!(
        "memory: the index's own estimate {:.0} MiB; resident {:.0} MiB with the profile and \
         the index ({:+.0} MiB over the profile alone), peak {:.0} MiB during the first build",
        index.heap_bytes() as f64 / (1 << 20) as f64,
        with_index,
        with_index - profile_rss,
        peak
    );

    let methods = index
        .methods(Some(Event::Cpu), MethodSort::Total, false)
        .expect("cpu");
    let hottest: Vec<String> = methods
        .methods
        .iter()
        .take(100)
        .map(|method| format!("method:{}", method.row.name))
        .collect();
    let mut random = Random(7);
    let any: Vec<String> = (0..2000)
        .map(|_| format!("method:{}", method_name(random.below(METHODS))))
        .collect();
    let classes: Vec<String> = (0..200)
        .map(|_| {
            let method = random.below(METHODS);
            format!("class:com.bench.p{}.C{}", method / 100, method / 10)
        })
        .collect();
    let packages: Vec<String> = (0..200)
        .map(|p| format!("package:com.bench.p{p}"))
        .collect();
    let threads: Vec<String> = (0..THREADS)
        .map(|id| format!("thread:worker-{id}"))
        .collect();
    for top in [20, 0] {
        println!(
            "lookups, each list cut to {}:",
            if top == 0 {
                "nothing (every row)".to_string()
            } else {
                format!("the {top} heaviest per event")
            }
        );
        for (what, names) in [
            ("100 hottest methods", &hottest),
            ("2,000 random methods", &any),
            ("200 classes", &classes),
            ("200 packages", &packages),
            ("16 threads", &threads),
            (
                "Thread.run (in every stack)",
                &vec!["method:java.lang.Thread.run".to_string()],
            ),
        ] {
            let mut times = Vec::new();
            for name in names.iter() {
                let started = Instant::now();
                let found = index.lookup(name, top);
                times.push(started.elapsed());
                if let Err(error) = black_box(found) {
                    // The random walk may not reach every method.
                    if !error.to_string().contains("is named") {
                        panic!("{error}");
                    }
                }
            }
            println!("  {what:<30} {}", spread(times));
        }
    }
    let map = ComponentMap::parse("low = com.bench.p1\nhigh = com.bench.p2, com.bench.p3")
        .expect("a map");
    for (what, run) in [
        (
            "methods (every method, by total)",
            Box::new(|| {
                black_box(
                    index
                        .methods(Some(Event::Cpu), MethodSort::Total, false)
                        .ok(),
                );
            }) as Box<dyn Fn()>,
        ),
        (
            "methods by thread",
            Box::new(|| {
                black_box(
                    index
                        .methods(Some(Event::Cpu), MethodSort::Total, true)
                        .ok(),
                );
            }),
        ),
        (
            "components (packages, a map)",
            Box::new(|| {
                black_box(index.components(Some(Event::Cpu), Some(&map), false).ok());
            }),
        ),
        (
            "threads",
            Box::new(|| {
                black_box(index.threads(None).ok());
            }),
        ),
    ] {
        let started = Instant::now();
        run();
        println!(
            "{what:<34} {:>8.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
