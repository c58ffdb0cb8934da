//! HPROF text's `SITES` record (heap=sites): the allocation sites ranked by live bytes and cut
//! at the cutoff, written in the layout of the JDK's HPROF agent (hprof_io.c) and read back.

use std::io::{self, Write};

use super::{cut, malformed, parse_number, TextReadError, TextWriter};

/// One allocation site: the objects of one class allocated at one trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteEntry {
    pub trace: u32,
    /// Java source form: `byte[]`, `java.lang.String`.
    pub class_name: String,
    pub live_bytes: u64,
    pub live_objects: u64,
    pub allocated_bytes: u64,
    pub allocated_objects: u64,
}

/// A row of a SITES table.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteRow {
    pub rank: u32,
    /// This site's share of all live bytes, in percent.
    pub self_percent: f64,
    /// The shares of the rows up to this one, in percent.
    pub accum_percent: f64,
    pub site: SiteEntry,
}

/// What a SITES table is ordered by, as its header says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SitesOrder {
    #[default]
    LiveBytes,
    AllocatedBytes,
}

impl SitesOrder {
    fn text(self) -> &'static str {
        match self {
            SitesOrder::LiveBytes => "live bytes",
            SitesOrder::AllocatedBytes => "allocated bytes",
        }
    }
}

/// The figures over every site, listed or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteTotals {
    pub live_bytes: u64,
    pub live_objects: u64,
    pub allocated_bytes: u64,
    pub allocated_objects: u64,
}

impl SiteTotals {
    /// The figures of `sites` summed (saturating: a total must not wrap).
    fn of(sites: &[SiteEntry]) -> SiteTotals {
        let mut totals = SiteTotals::default();
        for site in sites {
            totals.live_bytes = totals.live_bytes.saturating_add(site.live_bytes);
            totals.live_objects = totals.live_objects.saturating_add(site.live_objects);
            totals.allocated_bytes = totals.allocated_bytes.saturating_add(site.allocated_bytes);
            totals.allocated_objects = totals
                .allocated_objects
                .saturating_add(site.allocated_objects);
        }
        totals
    }
}

/// A `SITES BEGIN … END` table.
#[derive(Clone, Debug, PartialEq)]
pub struct SitesTable {
    /// The date as HPROF prints it (C's `ctime` layout, without the newline).
    pub date: String,
    pub ordered_by: SitesOrder,
    /// Totals over all sites. HPROF's text layout does not print them, so a table read from
    /// text has `None`; one ranked here, or read from HPROF binary, has them.
    pub totals: Option<SiteTotals>,
    pub rows: Vec<SiteRow>,
    /// Whether the table counts what was allocated since the previous incremental table (a
    /// continuous profile's window: HPROF binary's "incremental" flag, `, incremental` in the
    /// text header) rather than since the start.
    pub incremental: bool,
}

impl SitesTable {
    /// Ranks sites the way HPROF does (hprof_site.c): by live bytes, most first; each row's
    /// share is its live bytes over the live bytes of all sites, and the table stops at the
    /// first site whose share is below `cutoff`. Ties, which HPROF left to qsort, go by
    /// allocated bytes (most first), then trace serial, then class name. Totals count every
    /// site, the rows cut included.
    pub fn rank(date: String, mut sites: Vec<SiteEntry>, cutoff: f64) -> SitesTable {
        let totals = SiteTotals::of(&sites);
        sites.sort_by(|a, b| {
            b.live_bytes
                .cmp(&a.live_bytes)
                .then(b.allocated_bytes.cmp(&a.allocated_bytes))
                .then(a.trace.cmp(&b.trace))
                .then(a.class_name.cmp(&b.class_name))
        });
        let mut rows = Vec::new();
        let mut accum = 0.0;
        for site in sites {
            // HPROF divides by zero here (it asserts there are live bytes); we call that 0%.
            let ratio = if totals.live_bytes == 0 {
                0.0
            } else {
                site.live_bytes as f64 / totals.live_bytes as f64
            };
            if ratio < cutoff {
                break;
            }
            accum += ratio;
            rows.push(SiteRow {
                rank: rows.len() as u32 + 1,
                self_percent: ratio * 100.0,
                accum_percent: accum * 100.0,
                site,
            });
        }
        SitesTable {
            date,
            ordered_by: SitesOrder::LiveBytes,
            totals: Some(totals),
            rows,
            incremental: false,
        }
    }

    /// A window's table: `sites` hold what each site allocated in the window, every one with
    /// allocations is listed (no cutoff: a window is short, and its short-lived garbage is what
    /// it is read for), most allocated bytes first, each row's share that of the window's bytes.
    pub fn window(date: String, sites: Vec<SiteEntry>) -> SitesTable {
        let mut sites: Vec<SiteEntry> = sites
            .into_iter()
            .filter(|site| site.allocated_objects > 0 || site.allocated_bytes > 0)
            .collect();
        let totals = SiteTotals::of(&sites);
        sites.sort_by(|a, b| {
            b.allocated_bytes
                .cmp(&a.allocated_bytes)
                .then(a.trace.cmp(&b.trace))
                .then(a.class_name.cmp(&b.class_name))
        });
        let mut accum = 0.0;
        let rows = sites
            .into_iter()
            .enumerate()
            .map(|(index, site)| {
                let ratio = if totals.allocated_bytes == 0 {
                    0.0
                } else {
                    site.allocated_bytes as f64 / totals.allocated_bytes as f64
                };
                accum += ratio;
                SiteRow {
                    rank: index as u32 + 1,
                    self_percent: ratio * 100.0,
                    accum_percent: accum * 100.0,
                    site,
                }
            })
            .collect();
        SitesTable {
            date,
            ordered_by: SitesOrder::AllocatedBytes,
            totals: Some(totals),
            rows,
            incremental: true,
        }
    }
}

impl<W: Write> TextWriter<W> {
    /// A SITES table in hprof_io.c's layout: the header lines are printed even with no rows.
    pub fn sites(&mut self, table: &SitesTable) -> io::Result<()> {
        writeln!(
            self.out,
            "SITES BEGIN (ordered by {}{}) {}",
            table.ordered_by.text(),
            if table.incremental {
                INCREMENTAL_MARK
            } else {
                ""
            },
            table.date
        )?;
        writeln!(
            self.out,
            "          percent          live          alloc'ed  stack class"
        )?;
        writeln!(
            self.out,
            " rank   self  accum     bytes objs     bytes  objs trace name"
        )?;
        for row in &table.rows {
            let site = &row.site;
            writeln!(
                self.out,
                "{:5} {:5.2}% {:5.2}% {:9} {:4} {:9} {:5} {:5} {}",
                row.rank,
                row.self_percent,
                row.accum_percent,
                site.live_bytes,
                site.live_objects,
                site.allocated_bytes,
                site.allocated_objects,
                site.trace,
                site.class_name
            )?;
        }
        writeln!(self.out, "SITES END")
    }
}

/// What a window's SITES header adds after its order.
const INCREMENTAL_MARK: &str = ", incremental";

/// `SITES BEGIN (ordered by live bytes) date`: the order, whether the table is incremental, and
/// the date.
pub(super) fn parse_sites_header(
    line: &str,
    number: usize,
) -> Result<(SitesOrder, bool, String), TextReadError> {
    let rest = line
        .strip_prefix("SITES BEGIN (ordered by ")
        .ok_or_else(|| malformed(number, format!("not a SITES header: '{line}'")))?;
    let (order, date) = cut(rest, ")", number, "SITES BEGIN")?;
    let (order, incremental) = match order.strip_suffix(INCREMENTAL_MARK) {
        Some(order) => (order, true),
        None => (order, false),
    };
    let order = match order {
        "live bytes" => SitesOrder::LiveBytes,
        "allocated bytes" => SitesOrder::AllocatedBytes,
        other => {
            return Err(malformed(
                number,
                format!("SITES BEGIN: unknown order '{other}'"),
            ))
        }
    };
    Ok((order, incremental, date.trim().to_string()))
}

/// The two column lines under a SITES header.
pub(super) fn is_sites_column_line(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("percent ") || line.starts_with("rank ")
}

pub(super) fn parse_site_row(line: &str, number: usize) -> Result<SiteRow, TextReadError> {
    let mut fields = line.split_whitespace();
    let mut next = |what: &str| {
        fields
            .next()
            .ok_or_else(|| malformed(number, format!("SITES row: no {what}")))
    };
    let rank = parse_number(next("rank")?, number, "SITES rank")?;
    let percent = |field: &str, what: &str| -> Result<f64, TextReadError> {
        let digits = field
            .strip_suffix('%')
            .ok_or_else(|| malformed(number, format!("SITES row: {what} '{field}' has no '%'")))?;
        parse_number(digits, number, what)
    };
    let self_percent = percent(next("self")?, "self")?;
    let accum_percent = percent(next("accum")?, "accum")?;
    let live_bytes = parse_number(next("live bytes")?, number, "SITES live bytes")?;
    let live_objects = parse_number(next("live objs")?, number, "SITES live objs")?;
    let allocated_bytes = parse_number(next("alloc'ed bytes")?, number, "SITES alloc'ed bytes")?;
    let allocated_objects = parse_number(next("alloc'ed objs")?, number, "SITES alloc'ed objs")?;
    let trace = parse_number(next("stack trace")?, number, "SITES stack trace")?;
    let class_name = next("class name")?.to_string();
    if let Some(extra) = fields.next() {
        return Err(malformed(
            number,
            format!("SITES row: '{extra}' after the class name"),
        ));
    }
    Ok(SiteRow {
        rank,
        self_percent,
        accum_percent,
        site: SiteEntry {
            trace,
            class_name,
            live_bytes,
            live_objects,
            allocated_bytes,
            allocated_objects,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::read;
    use super::*;
    use proptest::prelude::*;

    fn site(trace: u32, class_name: &str, live: (u64, u64), allocated: (u64, u64)) -> SiteEntry {
        SiteEntry {
            trace,
            class_name: class_name.to_string(),
            live_bytes: live.0,
            live_objects: live.1,
            allocated_bytes: allocated.0,
            allocated_objects: allocated.1,
        }
    }

    fn text_of(write: impl FnOnce(&mut TextWriter<Vec<u8>>) -> io::Result<()>) -> String {
        let mut writer = TextWriter::new(Vec::new());
        write(&mut writer).unwrap();
        String::from_utf8(writer.into_inner()).unwrap()
    }

    fn profile_of(body: &str) -> Result<crate::hprof_text::TextProfile, TextReadError> {
        read(format!("JAVA PROFILE 1.0.1, created d\n\n--------\n\n{body}").as_bytes())
    }

    /// The SITES table of HPROF's documented example: two sites over 2,532,100 live bytes,
    /// twelve small ones cut.
    fn documented_sites() -> Vec<SiteEntry> {
        let mut sites = vec![
            site(
                301926,
                "java.util.zip.ZipEntry",
                (1117360, 13967),
                (1117360, 13967),
            ),
            site(
                301927,
                "com.sun.tools.javac.util.List",
                (223472, 13967),
                (223472, 13967),
            ),
        ];
        for i in 0..12 {
            let bytes = if i == 11 { 99276 } else { 99272 };
            sites.push(site(302000 + i, "byte[]", (bytes, 10), (bytes * 2, 20)));
        }
        sites
    }

    #[test]
    fn sites_have_hprofs_layout() {
        let table = SitesTable::rank("Fri Feb  6 13:13:42 2004".into(), documented_sites(), 0.05);
        let text = text_of(|writer| writer.sites(&table));
        assert_eq!(
            text,
            "SITES BEGIN (ordered by live bytes) Fri Feb  6 13:13:42 2004\n          \
             percent          live          alloc'ed  stack class\n \
             rank   self  accum     bytes objs     bytes  objs trace name\n    \
             1 44.13% 44.13%   1117360 13967   1117360 13967 301926 java.util.zip.ZipEntry\n    \
             2  8.83% 52.95%    223472 13967    223472 13967 301927 com.sun.tools.javac.util.List\n\
             SITES END\n"
        );
    }

    #[test]
    fn a_windows_table_lists_every_allocating_site_and_reads_back_incremental() {
        let sites = vec![
            site(300001, "A", (100, 1), (0, 0)),
            site(300002, "B", (0, 0), (600, 6)),
            site(300003, "C", (50, 1), (1400, 1)),
        ];
        let table = SitesTable::window("d".into(), sites);
        let order: Vec<&str> = (table.rows.iter())
            .map(|row| row.site.class_name.as_str())
            .collect();
        assert_eq!(
            order,
            ["C", "B"],
            "by allocated bytes, nothing without allocations"
        );
        assert!((table.rows[0].self_percent - 70.0).abs() < 1e-9);
        let text = text_of(|writer| writer.sites(&table));
        assert!(
            text.starts_with("SITES BEGIN (ordered by allocated bytes, incremental) d\n"),
            "{text}"
        );
        let read = profile_of(&text).unwrap();
        assert!(read.sites[0].incremental);
        assert_eq!(read.sites[0].rows.len(), 2);
        let complete = text_of(|writer| writer.sites(&SitesTable::rank("d".into(), vec![], 0.0)));
        assert!(!profile_of(&complete).unwrap().sites[0].incremental);
    }

    #[test]
    fn ranking_cuts_at_the_first_small_share_and_totals_count_every_site() {
        let table = SitesTable::rank(String::new(), documented_sites(), 0.05);
        assert_eq!(table.rows.len(), 2);
        let totals = table.totals.unwrap();
        assert_eq!(totals.live_bytes, 2_532_100);
        assert_eq!(totals.live_objects, 13967 * 2 + 120);
        assert_eq!(totals.allocated_bytes, 1117360 + 223472 + 2 * 1_191_268);
        assert_eq!(totals.allocated_objects, 13967 * 2 + 240);
        // 1117360 / 2532100 and (1117360 + 223472) / 2532100, by hand.
        assert!((table.rows[0].self_percent - 44.127799).abs() < 1e-5);
        assert!((table.rows[1].accum_percent - 52.953359).abs() < 1e-5);
        // A cutoff of 0 shows every site, and the shares add up to all of them.
        let all = SitesTable::rank(String::new(), documented_sites(), 0.0);
        assert_eq!(all.rows.len(), 14);
        assert!((all.rows[13].accum_percent - 100.0).abs() < 1e-9);
        assert_eq!(all.rows[2].site.live_bytes, 99276, "most live bytes first");
    }

    #[test]
    fn ties_go_by_allocated_bytes_then_trace() {
        let sites = vec![
            site(300003, "A", (100, 1), (100, 1)),
            site(300002, "B", (100, 1), (100, 1)),
            site(300009, "C", (100, 1), (900, 9)),
            site(300001, "D", (0, 0), (50, 1)),
        ];
        let table = SitesTable::rank(String::new(), sites, 0.0);
        let order: Vec<&str> = table
            .rows
            .iter()
            .map(|r| r.site.class_name.as_str())
            .collect();
        assert_eq!(order, ["C", "B", "A", "D"]);
        assert_eq!(table.rows[3].self_percent, 0.0);
        // Nothing live: every share is 0%, shown only when the cutoff is 0.
        let dead = vec![site(300001, "D", (0, 0), (50, 1))];
        assert_eq!(
            SitesTable::rank(String::new(), dead.clone(), 0.0)
                .rows
                .len(),
            1
        );
        assert!(SitesTable::rank(String::new(), dead, 0.01).rows.is_empty());
    }

    #[test]
    fn sites_read_back_without_totals() {
        let table = SitesTable::rank("d".into(), documented_sites(), 0.05);
        let text = text_of(|writer| writer.sites(&table));
        let profile = profile_of(&text).unwrap();
        let read = profile.last_sites().unwrap();
        assert_eq!(read.totals, None, "HPROF's text has no totals");
        assert_eq!(read.rows[1].site, table.rows[1].site);
        assert_eq!(read.rows[1].accum_percent, 52.95);
        // An empty table keeps its column lines, as HPROF's does.
        let empty = SitesTable::rank("d".into(), Vec::new(), 0.0);
        let text = text_of(|writer| writer.sites(&empty));
        assert_eq!(text.lines().count(), 4);
        assert!(profile_of(&text).unwrap().sites[0].rows.is_empty());
    }

    fn arb_site() -> impl Strategy<Value = SiteEntry> {
        (
            300000u32..400000,
            "[a-z]{1,6}(\\.[A-Z][a-zA-Z0-9$]{0,8}){0,3}(\\[\\]){0,2}",
            0u64..5_000_000,
            0u64..100_000,
            0u64..(u64::from(u32::MAX) * 4),
            0u64..1_000_000,
        )
            .prop_map(|(trace, class_name, live, objects, extra, extra_objects)| {
                SiteEntry {
                    trace,
                    class_name,
                    live_bytes: live,
                    live_objects: objects,
                    allocated_bytes: live + extra,
                    allocated_objects: objects + extra_objects,
                }
            })
    }

    proptest! {
        #[test]
        fn sites_tables_read_back_unchanged(
            sites in proptest::collection::vec(arb_site(), 0..40),
            cutoff in prop_oneof![Just(0.0), 0.0..0.2],
        ) {
            let table = SitesTable::rank("Sun Nov 22 02:18:41 2026".into(), sites.clone(), cutoff);
            let text = text_of(|writer| { writer.sites(&table)?; writer.sites(&table) });
            let profile = profile_of(&text).unwrap();
            prop_assert_eq!(profile.sites.len(), 2);
            let read = &profile.sites[1];
            prop_assert_eq!(&read.date, &table.date);
            prop_assert_eq!(read.ordered_by, SitesOrder::LiveBytes);
            prop_assert_eq!(read.rows.len(), table.rows.len());
            for (read_row, row) in read.rows.iter().zip(&table.rows) {
                prop_assert_eq!(read_row.rank, row.rank);
                prop_assert_eq!(&read_row.site, &row.site);
                prop_assert!((read_row.self_percent - row.self_percent).abs() < 0.006);
                prop_assert!((read_row.accum_percent - row.accum_percent).abs() < 0.006);
                prop_assert!(row.self_percent / 100.0 >= cutoff);
            }
            // The rows cut are exactly the sites whose share is below the cutoff.
            let total: u64 = sites.iter().map(|site| site.live_bytes).sum();
            let shown = sites
                .iter()
                .filter(|site| total == 0 || site.live_bytes as f64 / total as f64 >= cutoff)
                .count();
            prop_assert_eq!(table.rows.len(), if total == 0 && cutoff > 0.0 { 0 } else { shown });
        }
    }
}
