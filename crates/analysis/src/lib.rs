//! Statistics over profiles: which methods the CPU samples fall in and the traces behind them,
//! which classes fill a heap dump, which allocation sites hold the most live bytes, which
//! parameter values make a traced method slow ([`mpt`]); for any profile read into the model,
//! the statistics of methods, allocations, threads and components and of one resource
//! ([`statistics`]); a heap dump's dominator tree, retained sizes, leak suspects and paths to
//! GC roots ([`heap`]).

pub mod heap;
pub mod inputs;
pub mod mpt;
pub mod profile;
pub mod statistics;
pub mod views;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use mpt::{
    mpt_calls_from_trace, mpt_from_trace, MptCollector, MptTraceError, SelectedValue, TimedCall,
};
pub use openprof_format::heap::{ClassCount, HeapHistogram, RootKind, ShallowSizes};
use openprof_format::hprof_text::{
    CpuTableKind, Frame, SiteRow, SiteTotals, SitesOrder, TextProfile, Trace,
};

/// One method's share of the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodStat {
    /// `class.method`.
    pub method: String,
    /// Samples whose innermost frame is this method.
    pub self_samples: u64,
    /// Samples whose trace contains this method anywhere (counted once per sample).
    pub total_samples: u64,
    /// The traces with this method on top, most sampled first.
    pub traces: Vec<TraceCost>,
}

/// A trace and what it cost: samples, or with cpu=times microseconds of CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceCost {
    pub serial: u32,
    pub cost: u64,
}

/// The CPU samples of a profile, summed over all its dumps (HPROF starts each dump from zero).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuSummary {
    pub total_samples: u64,
    pub dumps: usize,
    /// Samples in the tables' rows: less than the total when rows were cut at `cutoff`.
    pub listed_samples: u64,
    pub failed_walks: u64,
    pub dropped: u64,
    pub samplers: BTreeSet<String>,
    /// What profiling cost, microseconds of CPU by part, summed over the dumps.
    pub cost_us: BTreeMap<String, u64>,
    pub notes: BTreeSet<String>,
    /// Most self samples first.
    pub methods: Vec<MethodStat>,
    /// Which tables were summed (samples, or CPU time in microseconds).
    pub kind: Option<CpuTableKind>,
    /// The count column of each trace: samples, or true entries for CPU TIME.
    pub entries: HashMap<u32, u64>,
}

/// Sums the CPU SAMPLES tables of a profile by method.
pub fn summarize_cpu(profile: &TextProfile) -> CpuSummary {
    summarize(profile, CpuTableKind::Samples)
}

/// Sums a profile's tables of one kind by method. For CPU SAMPLES the cost is samples; for
/// CPU TIME (ms) it is microseconds of CPU (each row's share of its table's total), and
/// `entries` holds the true entry counts.
pub fn summarize(profile: &TextProfile, kind: CpuTableKind) -> CpuSummary {
    let mut summary = CpuSummary {
        kind: Some(kind),
        ..CpuSummary::default()
    };
    let mut per_trace: HashMap<u32, u64> = HashMap::new();
    for table in profile.cpu_tables.iter().filter(|table| table.kind == kind) {
        summary.dumps += 1;
        let table_cost = match kind {
            CpuTableKind::Samples | CpuTableKind::Wall => table.total,
            CpuTableKind::Time => table.total * 1000,
        };
        summary.total_samples += table_cost;
        for row in &table.rows {
            let cost = match kind {
                CpuTableKind::Samples | CpuTableKind::Wall => row.count,
                CpuTableKind::Time => (row.self_percent / 100.0 * table_cost as f64).round() as u64,
            };
            *per_trace.entry(row.trace).or_default() += cost;
            *summary.entries.entry(row.trace).or_default() += row.count;
            summary.listed_samples += cost;
        }
    }
    for sampler in &profile.samplers {
        summary.failed_walks += sampler.failed_total();
        summary.dropped += sampler.dropped;
        summary.samplers.insert(sampler.sampler.clone());
        summary.notes.extend(sampler.note.clone());
        for (part, micros) in &sampler.cost_us {
            *summary.cost_us.entry(part.clone()).or_default() += micros;
        }
    }
    let mut stats: BTreeMap<String, MethodStat> = BTreeMap::new();
    let empty = Trace {
        serial: 0,
        thread: None,
        frames: Vec::new(),
    };
    for (&serial, &count) in &per_trace {
        let trace = profile.traces.get(&serial).unwrap_or(&empty);
        let top = trace
            .frames
            .first()
            .map(|frame| frame.qualified_method())
            .unwrap_or_else(|| "<empty trace>".into());
        let stat = stats.entry(top.clone()).or_insert_with(|| MethodStat {
            method: top.clone(),
            self_samples: 0,
            total_samples: 0,
            traces: Vec::new(),
        });
        stat.self_samples += count;
        stat.traces.push(TraceCost {
            serial,
            cost: count,
        });
        let on_stack: BTreeSet<String> =
            trace.frames.iter().map(|f| f.qualified_method()).collect();
        for method in on_stack {
            stats
                .entry(method.clone())
                .or_insert_with(|| MethodStat {
                    method,
                    self_samples: 0,
                    total_samples: 0,
                    traces: Vec::new(),
                })
                .total_samples += count;
        }
    }
    summary.methods = stats.into_values().collect();
    for stat in &mut summary.methods {
        stat.traces
            .sort_by(|a, b| b.cost.cmp(&a.cost).then(a.serial.cmp(&b.serial)));
    }
    summary.methods.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then(a.method.cmp(&b.method))
    });
    summary
}

/// One class of a heap histogram, ranked by shallow bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassStat {
    pub rank: usize,
    pub class_name: String,
    pub instances: u64,
    pub bytes: u64,
    /// The class's share of all shallow bytes of the dump, in percent.
    pub percent: f64,
}

/// The `top` classes of a heap dump by shallow bytes (then instances, then name).
pub fn top_classes(histogram: &HeapHistogram, top: usize) -> Vec<ClassStat> {
    let total = histogram.total().bytes.max(1) as f64;
    histogram
        .sorted()
        .into_iter()
        .take(top)
        .enumerate()
        .map(|(index, (name, count))| ClassStat {
            rank: index + 1,
            class_name: name.to_string(),
            instances: count.instances,
            bytes: count.bytes,
            percent: 100.0 * count.bytes as f64 / total,
        })
        .collect()
}

/// An allocation site with the frames of its trace.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteStat {
    pub row: SiteRow,
    /// Innermost first; empty when the profile does not define the trace.
    pub frames: Vec<Frame>,
}

/// The allocation sites of a profile: its last SITES table (HPROF's site figures grow from the
/// start of the program, so the last table holds the others), with traces resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct SitesSummary {
    /// How many SITES tables the profile has.
    pub tables: usize,
    pub date: String,
    pub ordered_by: SitesOrder,
    /// Over every site, when the profile says (HPROF binary does, HPROF text does not).
    pub totals: Option<SiteTotals>,
    /// Over the rows the table lists (those above its cutoff).
    pub listed: SiteTotals,
    /// How many rows the table lists.
    pub rows: usize,
    /// The first `top` rows.
    pub top: Vec<SiteStat>,
}

/// The top allocation sites of a profile, `None` when it has no SITES table.
///
/// `order` ranks the sites again, by live or by allocated bytes, whatever order the table was
/// written in; each row's share is then of the listed sites' bytes in that order.
pub fn summarize_sites(
    profile: &TextProfile,
    top: usize,
    order: Option<SitesOrder>,
) -> Option<SitesSummary> {
    let table = profile.last_sites()?;
    let mut listed = SiteTotals::default();
    for row in &table.rows {
        listed.live_bytes += row.site.live_bytes;
        listed.live_objects += row.site.live_objects;
        listed.allocated_bytes += row.site.allocated_bytes;
        listed.allocated_objects += row.site.allocated_objects;
    }
    let ordered_by = order.unwrap_or(table.ordered_by);
    let mut rows = table.rows.clone();
    if ordered_by != table.ordered_by {
        let bytes = |row: &SiteRow| match ordered_by {
            SitesOrder::LiveBytes => row.site.live_bytes,
            SitesOrder::AllocatedBytes => row.site.allocated_bytes,
        };
        rows.sort_by(|a, b| {
            bytes(b)
                .cmp(&bytes(a))
                .then(a.site.trace.cmp(&b.site.trace))
                .then_with(|| a.site.class_name.cmp(&b.site.class_name))
        });
        let total: u64 = rows.iter().map(bytes).sum();
        let mut accum = 0.0;
        for (index, row) in rows.iter_mut().enumerate() {
            row.rank = index as u32 + 1;
            row.self_percent = 100.0 * bytes(row) as f64 / total.max(1) as f64;
            accum += row.self_percent;
            row.accum_percent = accum;
        }
    }
    let top = rows
        .iter()
        .take(top)
        .map(|row| SiteStat {
            row: row.clone(),
            frames: profile
                .traces
                .get(&row.site.trace)
                .map(|trace| trace.frames.clone())
                .unwrap_or_default(),
        })
        .collect();
    Some(SitesSummary {
        tables: profile.sites.len(),
        date: table.date.clone(),
        ordered_by,
        totals: table.totals,
        listed,
        rows: table.rows.len(),
        top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::hprof_text::{
        read, CpuTable, FrameLine, SiteEntry, SitesTable, TextInstance, TextPrimitiveArray,
        TextWriter,
    };

    fn frame(method: &str) -> Frame {
        let (class_name, method_name) = method.rsplit_once('.').unwrap();
        Frame {
            class_name: class_name.into(),
            method_name: method_name.into(),
            source_file: None,
            line: FrameLine::Unknown,
        }
    }

    #[test]
    fn sums_dumps_by_top_method_and_counts_totals_once_per_trace() {
        let mut writer = TextWriter::new(Vec::new());
        writer.header("d").unwrap();
        let traces = [
            (300001, vec![frame("A.hot"), frame("A.main")]),
            (
                300002,
                vec![frame("A.hot"), frame("A.hot"), frame("A.main")],
            ),
            (300003, vec![frame("A.cold"), frame("A.main")]),
        ];
        for (serial, frames) in &traces {
            writer
                .trace(&Trace {
                    serial: *serial,
                    thread: None,
                    frames: frames.clone(),
                })
                .unwrap();
        }
        let method = |serial: u32| {
            Some(traces.iter().find(|t| t.0 == serial).unwrap().1[0].qualified_method())
        };
        let first = CpuTable::rank(
            CpuTableKind::Samples,
            "d".into(),
            vec![(300001, 6, method(300001)), (300003, 2, method(300003))],
            0.0,
        );
        let second = CpuTable::rank(
            CpuTableKind::Samples,
            "d".into(),
            vec![(300002, 4, method(300002)), (300001, 2, method(300001))],
            0.0,
        );
        writer.cpu_table(&first).unwrap();
        writer.cpu_table(&second).unwrap();
        let profile = read(writer.into_inner().as_slice()).unwrap();
        let summary = summarize_cpu(&profile);
        assert_eq!((summary.total_samples, summary.dumps), (14, 2));
        let hot = &summary.methods[0];
        assert_eq!(
            (hot.method.as_str(), hot.self_samples, hot.total_samples),
            ("A.hot", 12, 12)
        );
        assert_eq!(
            hot.traces,
            vec![
                TraceCost {
                    serial: 300001,
                    cost: 8
                },
                TraceCost {
                    serial: 300002,
                    cost: 4
                }
            ]
        );
        let main = summary
            .methods
            .iter()
            .find(|m| m.method == "A.main")
            .unwrap();
        assert_eq!((main.self_samples, main.total_samples), (0, 14));
    }

    #[test]
    fn top_classes_rank_by_bytes_with_shares() {
        let mut writer = TextWriter::new(Vec::new());
        writer.header("d").unwrap();
        writer.heap_dump_begin(4, 200, "d").unwrap();
        for (id, size, class_name) in [(1, 24, "A"), (2, 24, "A"), (3, 32, "B")] {
            writer
                .instance(&TextInstance {
                    id,
                    size,
                    trace: 300001,
                    class_name,
                    class_id: 0x10,
                    fields: &[],
                })
                .unwrap();
        }
        writer
            .primitive_array(&TextPrimitiveArray {
                id: 4,
                size: 120,
                trace: 300001,
                length: 26,
                type_name: "int[]",
            })
            .unwrap();
        writer.heap_dump_end().unwrap();
        let profile = read(writer.into_inner().as_slice()).unwrap();
        let top = top_classes(profile.last_heap_dump().unwrap(), 2);
        assert_eq!(top.len(), 2);
        assert_eq!(
            (
                top[0].rank,
                top[0].class_name.as_str(),
                top[0].instances,
                top[0].bytes
            ),
            (1, "int[]", 1, 120)
        );
        assert_eq!(top[0].percent, 60.0);
        assert_eq!(
            (top[1].class_name.as_str(), top[1].instances, top[1].bytes),
            ("A", 2, 48)
        );
        assert_eq!(top[1].percent, 24.0);
    }

    #[test]
    fn sites_summary_takes_the_last_table_and_resolves_traces() {
        let mut writer = TextWriter::new(Vec::new());
        writer.header("d").unwrap();
        writer
            .trace(&Trace {
                serial: 300002,
                thread: None,
                frames: vec![frame("Gen.make"), frame("Gen.main")],
            })
            .unwrap();
        let site = |trace, class_name: &str, live_bytes| SiteEntry {
            trace,
            class_name: class_name.into(),
            live_bytes,
            live_objects: live_bytes / 8,
            allocated_bytes: live_bytes * 2,
            allocated_objects: live_bytes / 4,
        };
        let first = SitesTable::rank("first".into(), vec![site(300002, "A", 80)], 0.0);
        let sites = vec![
            site(300002, "byte[]", 800),
            site(300003, "A", 160),
            site(300002, "A", 40),
        ];
        let last = SitesTable::rank("last".into(), sites, 0.1);
        writer.sites(&first).unwrap();
        writer.sites(&last).unwrap();
        let profile = read(writer.into_inner().as_slice()).unwrap();
        let summary = summarize_sites(&profile, 1, None).unwrap();
        assert_eq!((summary.tables, summary.date.as_str()), (2, "last"));
        assert_eq!(summary.rows, 2, "the 40-byte site is below the 10% cutoff");
        assert_eq!(summary.listed.live_bytes, 960);
        assert_eq!(summary.listed.allocated_objects, 240);
        assert_eq!(summary.totals, None, "not in HPROF's text");
        assert_eq!(summary.top.len(), 1);
        let top = &summary.top[0];
        assert_eq!(top.row.site.class_name, "byte[]");
        assert_eq!(top.row.self_percent, 80.0);
        assert_eq!(top.frames[0].qualified_method(), "Gen.make");
        assert!(summarize_sites(&TextProfile::default(), 5, None).is_none());
    }

    #[test]
    fn sites_ranked_again_by_allocated_bytes() {
        let site = |trace, class_name: &str, live_bytes, allocated_bytes| SiteEntry {
            trace,
            class_name: class_name.into(),
            live_bytes,
            live_objects: 1,
            allocated_bytes,
            allocated_objects: 1,
        };
        let table = SitesTable::rank(
            "d".into(),
            vec![
                site(300001, "Kept", 900, 1_000),
                site(300002, "Churn", 100, 9_000),
            ],
            0.0,
        );
        let profile = TextProfile {
            sites: vec![table],
            ..TextProfile::default()
        };
        let live = summarize_sites(&profile, 2, None).unwrap();
        assert_eq!(live.top[0].row.site.class_name, "Kept");
        let allocated = summarize_sites(&profile, 2, Some(SitesOrder::AllocatedBytes)).unwrap();
        assert_eq!(allocated.ordered_by, SitesOrder::AllocatedBytes);
        let ranked: Vec<_> = allocated
            .top
            .iter()
            .map(|stat| {
                (
                    stat.row.rank,
                    stat.row.site.class_name.as_str(),
                    stat.row.self_percent,
                )
            })
            .collect();
        assert_eq!(ranked, [(1, "Churn", 90.0), (2, "Kept", 10.0)]);
        assert_eq!(allocated.top[1].row.accum_percent, 100.0);
    }
}
