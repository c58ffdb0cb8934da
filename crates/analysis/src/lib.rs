//! Statistics over profiles: which methods the CPU samples fall in, and the traces behind them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use openprof_format::hprof_text::{CpuTableKind, TextProfile, Trace};

/// One method's share of the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodStat {
    /// `class.method`.
    pub method: String,
    /// Samples whose innermost frame is this method.
    pub self_samples: u64,
    /// Samples whose trace contains this method anywhere (counted once per sample).
    pub total_samples: u64,
    /// The traces with this method on top, most sampled first: (trace serial, samples).
    pub traces: Vec<(u32, u64)>,
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
            CpuTableKind::Samples => table.total,
            CpuTableKind::Time => table.total * 1000,
        };
        summary.total_samples += table_cost;
        for row in &table.rows {
            let cost = match kind {
                CpuTableKind::Samples => row.count,
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
        stat.traces.push((serial, count));
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
            .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    summary.methods.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then(a.method.cmp(&b.method))
    });
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::hprof_text::{read, CpuTable, Frame, FrameLine, TextWriter};

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
        assert_eq!(hot.traces, vec![(300001, 8), (300002, 4)]);
        let main = summary
            .methods
            .iter()
            .find(|m| m.method == "A.main")
            .unwrap();
        assert_eq!((main.self_samples, main.total_samples), (0, 14));
    }
}
