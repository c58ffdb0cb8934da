//! Method parameter tracing's figures: per traced method and specification, how many calls each
//! recorded value had and how long they took, wall clock and CPU. The agent fills them at exit
//! (the `MPT` record of HPROF text), the analysis from a trace; both print them ranked, slowest
//! value first.
//!
//! In format, not analysis: the agent aggregates with [`MptAggregator`] at run time and depends
//! on format alone, and HPROF text's `MPT` record writes and reads [`MptTable`]s.

use std::collections::HashMap;

pub use crate::trace::attrs::ValueType;

/// What a call recorded for one specification: the value's type (the trace's `type`, e.g.
/// `int`, `string`, `error`) and its text (the trace's `value`, e.g. `100`, `NullValue`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueKey {
    pub value_type: ValueType,
    pub value: String,
}

impl ValueKey {
    pub fn new(value_type: ValueType, value: impl Into<String>) -> ValueKey {
        ValueKey {
            value_type,
            value: value.into(),
        }
    }
}

/// The calls that recorded one value, and their times in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueStats {
    pub key: ValueKey,
    pub calls: u64,
    pub wall_total_ns: u64,
    pub wall_max_ns: u64,
    pub cpu_total_ns: u64,
    pub cpu_max_ns: u64,
}

impl ValueStats {
    pub fn new(key: ValueKey) -> ValueStats {
        ValueStats {
            key,
            calls: 0,
            wall_total_ns: 0,
            wall_max_ns: 0,
            cpu_total_ns: 0,
            cpu_max_ns: 0,
        }
    }

    /// Counts one finished call. Totals saturate rather than wrap: a wrapped total would rank
    /// the slowest value last.
    pub fn record(&mut self, wall_ns: u64, cpu_ns: u64) {
        self.calls += 1;
        self.wall_total_ns = self.wall_total_ns.saturating_add(wall_ns);
        self.wall_max_ns = self.wall_max_ns.max(wall_ns);
        self.cpu_total_ns = self.cpu_total_ns.saturating_add(cpu_ns);
        self.cpu_max_ns = self.cpu_max_ns.max(cpu_ns);
    }

    /// Mean wall time per call (0 without calls), rounded to the nearest nanosecond.
    pub fn wall_mean_ns(&self) -> u64 {
        mean(self.wall_total_ns, self.calls)
    }

    pub fn cpu_mean_ns(&self) -> u64 {
        mean(self.cpu_total_ns, self.calls)
    }
}

fn mean(total: u64, calls: u64) -> u64 {
    if calls == 0 {
        return 0;
    }
    ((u128::from(total) + u128::from(calls) / 2) / u128::from(calls)) as u64
}

/// One specification's figures for one method: a row per value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MptTable {
    /// The method in Java source form, `example.Slow.work(int)`.
    pub method: String,
    /// The specification's canonical text (`MptSpec`'s Display), `Slow.work(int) 1`.
    pub spec: String,
    pub rows: Vec<ValueStats>,
    /// Calls entered and never exited before the trace (or the run) ended: in no row.
    pub unfinished: u64,
}

impl MptTable {
    pub fn new(method: impl Into<String>, spec: impl Into<String>) -> MptTable {
        MptTable {
            method: method.into(),
            spec: spec.into(),
            rows: Vec::new(),
            unfinished: 0,
        }
    }

    /// Counts a finished call under its value. This searches the rows; [`MptAggregator`]
    /// indexes them, for tables with many values (the `id` modifier gives one per object).
    pub fn record(&mut self, key: ValueKey, wall_ns: u64, cpu_ns: u64) {
        let row = match self.rows.iter().position(|row| row.key == key) {
            Some(index) => &mut self.rows[index],
            None => {
                self.rows.push(ValueStats::new(key));
                self.rows.last_mut().expect("just pushed")
            }
        };
        row.record(wall_ns, cpu_ns);
    }

    /// Finished calls, all values together.
    pub fn calls(&self) -> u64 {
        self.rows.iter().map(|row| row.calls).sum()
    }

    /// The rows, slowest mean wall time first; on equal means, more calls first, then by
    /// value text (then type), so that the order never depends on the order of recording.
    pub fn ranked(&self) -> Vec<&ValueStats> {
        let mut rows: Vec<&ValueStats> = self.rows.iter().collect();
        rows.sort_by(|a, b| {
            b.wall_mean_ns()
                .cmp(&a.wall_mean_ns())
                .then(b.calls.cmp(&a.calls))
                .then_with(|| a.key.value.cmp(&b.key.value))
                .then_with(|| a.key.value_type.as_str().cmp(b.key.value_type.as_str()))
        });
        rows
    }

    /// Puts the rows in [`MptTable::ranked`]'s order.
    pub fn rank(&mut self) {
        let order: Vec<ValueStats> = self.ranked().into_iter().cloned().collect();
        self.rows = order;
    }
}

/// Builds tables call by call, finding the table and the row by hash: the agent's and the
/// analysis's one way to aggregate.
#[derive(Clone, Debug, Default)]
pub struct MptAggregator {
    tables: Vec<MptTable>,
    /// Per table (same index): where each value's row is.
    rows: Vec<RowIndex>,
    /// method → spec → the table's index. Nested so that a lookup borrows the names instead
    /// of copying them.
    index: HashMap<String, HashMap<String, usize>>,
}

/// Where each value's row is in its table.
type RowIndex = HashMap<ValueKey, usize>;

impl MptAggregator {
    pub fn new() -> MptAggregator {
        MptAggregator::default()
    }

    /// The index of the table of (method, spec), made on first use: callers that record many
    /// calls of one table keep it and use `record_in`.
    pub fn table(&mut self, method: &str, spec: &str) -> usize {
        if !self.index.contains_key(method) {
            self.index.insert(method.to_string(), HashMap::new());
        }
        let specs = self.index.get_mut(method).expect("just made");
        if let Some(&table) = specs.get(spec) {
            return table;
        }
        self.tables.push(MptTable::new(method, spec));
        self.rows.push(RowIndex::new());
        specs.insert(spec.to_string(), self.tables.len() - 1);
        self.tables.len() - 1
    }

    /// Counts a finished call of `method` that recorded `key` for `spec`.
    pub fn record(&mut self, method: &str, spec: &str, key: ValueKey, wall_ns: u64, cpu_ns: u64) {
        let table = self.table(method, spec);
        self.record_in(table, key, wall_ns, cpu_ns);
    }

    /// Counts a finished call in the table `table` (from `table`) that recorded `key`.
    pub fn record_in(&mut self, table: usize, key: ValueKey, wall_ns: u64, cpu_ns: u64) {
        let (Some(stats), Some(rows)) = (self.tables.get_mut(table), self.rows.get_mut(table))
        else {
            return;
        };
        let row = match rows.get(&key) {
            Some(row) => *row,
            None => {
                stats.rows.push(ValueStats::new(key.clone()));
                rows.insert(key, stats.rows.len() - 1);
                stats.rows.len() - 1
            }
        };
        stats.rows[row].record(wall_ns, cpu_ns);
    }

    /// Counts a call of `method` under `spec` that was entered and never exited.
    pub fn unfinished(&mut self, method: &str, spec: &str) {
        self.unfinished_calls(method, spec, 1);
    }

    /// Counts `calls` calls of `method` under `spec` that were entered and never exited.
    pub fn unfinished_calls(&mut self, method: &str, spec: &str, calls: u64) {
        let table = self.table(method, spec);
        let table = &mut self.tables[table];
        table.unfinished = table.unfinished.saturating_add(calls);
    }

    /// The tables, by method then specification, each with its rows ranked.
    pub fn finish(self) -> Vec<MptTable> {
        let mut tables = self.tables;
        tables.sort_by(|a, b| a.method.cmp(&b.method).then_with(|| a.spec.cmp(&b.spec)));
        for table in &mut tables {
            table.rank();
        }
        tables
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(value: &str) -> ValueKey {
        ValueKey::new(ValueType::Int, value)
    }

    #[test]
    fn stats_sum_and_average() {
        let mut stats = ValueStats::new(int("1"));
        assert_eq!((stats.wall_mean_ns(), stats.cpu_mean_ns()), (0, 0));
        stats.record(10, 1);
        stats.record(25, 4);
        assert_eq!(stats.calls, 2);
        assert_eq!((stats.wall_total_ns, stats.wall_max_ns), (35, 25));
        assert_eq!((stats.cpu_total_ns, stats.cpu_max_ns), (5, 4));
        assert_eq!((stats.wall_mean_ns(), stats.cpu_mean_ns()), (18, 3));
        stats.record(u64::MAX, 0);
        assert_eq!(stats.wall_total_ns, u64::MAX);
    }

    #[test]
    fn rows_rank_by_mean_then_calls_then_value() {
        let mut table = MptTable::new("example.Slow.work(int)", "Slow.work(int) 1");
        table.record(int("1"), 100, 0);
        table.record(int("b"), 500, 0);
        table.record(int("a"), 500, 0);
        table.record(int("2"), 50, 0);
        table.record(int("2"), 150, 0);
        table.record(ValueKey::new(ValueType::Error, "NullValue"), 900, 0);
        let order: Vec<&str> = table
            .ranked()
            .iter()
            .map(|r| r.key.value.as_str())
            .collect();
        assert_eq!(order, ["NullValue", "a", "b", "2", "1"]);
        assert_eq!(table.calls(), 6);
        table.rank();
        assert_eq!(table.rows[3].key, int("2"));
    }

    #[test]
    fn the_aggregator_keeps_one_table_per_method_and_spec() {
        let mut aggregator = MptAggregator::new();
        aggregator.record("B.f(int)", "B.f(int) 1", int("1"), 10, 1);
        aggregator.record("A.f(int)", "A.f(int) 1", int("1"), 10, 1);
        aggregator.record("B.f(int)", "B.f(int) 1", int("2"), 30, 1);
        aggregator.record("B.f(int)", "B.f(int) 1", int("1"), 20, 1);
        aggregator.record("B.f(int)", "B.f(int) 1 id", int("7"), 20, 1);
        aggregator.unfinished("B.f(int)", "B.f(int) 1");
        aggregator.unfinished("C.g()", "C.g() 0");
        let tables = aggregator.finish();
        let names: Vec<(&str, &str)> = tables
            .iter()
            .map(|t| (t.method.as_str(), t.spec.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("A.f(int)", "A.f(int) 1"),
                ("B.f(int)", "B.f(int) 1"),
                ("B.f(int)", "B.f(int) 1 id"),
                ("C.g()", "C.g() 0"),
            ]
        );
        let b = &tables[1];
        assert_eq!(b.unfinished, 1);
        assert_eq!(b.rows[0].key, int("2"));
        assert_eq!((b.rows[1].calls, b.rows[1].wall_total_ns), (2, 30));
        assert!(tables[3].rows.is_empty() && tables[3].unfinished == 1);
    }
}
