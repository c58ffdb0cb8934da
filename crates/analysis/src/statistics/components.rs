//! Component statistics: an event's weights by package, by a user's map of packages to
//! components, and by class loader where the input tells it; self where the time is spent (the
//! leaf's package), total where it passes (each package, component or loader once per stack).
//!
//! The map is text, one rule a line, first match wins (docs/statistics.md):
//!
//! ```text
//! # comments run to the end of the line
//! persistence = com.acme.db.*
//! web = com.acme.http.*, com.acme.rest
//! ```

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::index::{thread_order, StatisticsIndex, NONE, SELF};
use super::{ResourceKind, StatsError, WeightedRow, Weights, DEFAULT_PACKAGE};
use crate::profile::{Event, Unit};

/// The component of code no rule names.
pub const OTHER: &str = "other";
/// The loader of classes the input names no loader for.
pub const UNKNOWN_LOADER: &str = "[unknown loader]";

/// A malformed component map: where (line and column from 1, in characters) and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ComponentMapError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// One package pattern, as a sequence of package names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    /// This package name.
    Name(String),
    /// Any one package name (`*` before the end).
    Any,
    /// This package and every package under it (`*` at the end).
    Below,
}

/// A rule: code in packages the pattern matches belongs to the component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ComponentRule {
    pub component: String,
    pub pattern: String,
    /// The map's line it came from.
    pub line: usize,
    #[serde(skip)]
    segments: Vec<Segment>,
}

impl ComponentRule {
    /// Whether the rule's pattern matches a package (`com.acme.db`; [`DEFAULT_PACKAGE`] for
    /// the default package, which only `*` matches).
    pub fn matches(&self, package: &str) -> bool {
        if package == DEFAULT_PACKAGE {
            return self.segments == [Segment::Below];
        }
        let mut names = package.split('.');
        for segment in &self.segments {
            match segment {
                Segment::Below => return true,
                Segment::Any => {
                    if names.next().is_none() {
                        return false;
                    }
                }
                Segment::Name(name) => {
                    if names.next() != Some(name.as_str()) {
                        return false;
                    }
                }
            }
        }
        names.next().is_none()
    }
}

/// Ordered rules mapping packages to components; code no rule matches is [`OTHER`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ComponentMap {
    pub rules: Vec<ComponentRule>,
}

impl fmt::Display for ComponentMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for rule in &self.rules {
            writeln!(f, "{} = {}", rule.component, rule.pattern)?;
        }
        Ok(())
    }
}

impl ComponentMap {
    /// Parses a map: lines `COMPONENT = PATTERN[, PATTERN]...`, `#` comments, blank lines.
    /// A pattern is a package (`com.acme.db`: that package only), a package and every package
    /// under it (`com.acme.db.*`), `*` for every package, or `*` for any one name inside a
    /// pattern (`com.acme.*.dao`).
    pub fn parse(text: &str) -> Result<ComponentMap, ComponentMapError> {
        let mut rules = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or_default();
            if content.trim().is_empty() {
                continue;
            }
            let fail = |byte: usize, message: String| ComponentMapError {
                line,
                column: raw[..byte].chars().count() + 1,
                message,
            };
            let Some(equals) = content.find('=') else {
                let first = content.len() - content.trim_start().len();
                return Err(fail(
                    first,
                    "expected COMPONENT = PATTERN[, PATTERN]... (a component, '=', then package patterns)"
                        .to_string(),
                ));
            };
            let component = content[..equals].trim();
            if component.is_empty() {
                return Err(fail(equals, "no component name before '='".to_string()));
            }
            if let Some(comma) = content[..equals].find(',') {
                return Err(fail(
                    comma,
                    format!("a component name holds no ',': {component:?}"),
                ));
            }
            let patterns = &content[equals + 1..];
            if patterns.trim().is_empty() {
                return Err(fail(
                    equals + 1,
                    format!("no package pattern after '=' for {component:?}"),
                ));
            }
            let mut at = equals + 1;
            for piece in patterns.split(',') {
                let start = at + piece.len() - piece.trim_start().len();
                let pattern = piece.trim();
                let segments = parse_pattern(pattern)
                    .map_err(|(offset, message)| fail(start + offset, message))?;
                rules.push(ComponentRule {
                    component: component.to_string(),
                    pattern: pattern.to_string(),
                    line,
                    segments,
                });
                at += piece.len() + 1;
            }
        }
        if rules.is_empty() {
            return Err(ComponentMapError {
                line: 1,
                column: 1,
                message: "the map has no rules: write COMPONENT = PATTERN lines, e.g. \
                          persistence = com.acme.db.*"
                    .to_string(),
            });
        }
        Ok(ComponentMap { rules })
    }

    /// The component of a package: the first rule's that matches, else [`OTHER`]. Native code
    /// and marks (`[native]`, `[truncated]`) are in no package, so in no rule's.
    pub fn component_of(&self, package: &str) -> &str {
        if package.starts_with('[') {
            return OTHER;
        }
        self.rules
            .iter()
            .find(|rule| rule.matches(package))
            .map_or(OTHER, |rule| rule.component.as_str())
    }
}

/// A pattern's segments, or where (a byte offset in it) and what is wrong.
fn parse_pattern(pattern: &str) -> Result<Vec<Segment>, (usize, String)> {
    if pattern.is_empty() {
        return Err((0, "empty package pattern".to_string()));
    }
    let parts: Vec<&str> = pattern.split('.').collect();
    let mut segments = Vec::with_capacity(parts.len());
    let mut offset = 0;
    for (index, part) in parts.iter().enumerate() {
        let last = index + 1 == parts.len();
        let segment = if *part == "*" {
            if last {
                Segment::Below
            } else {
                Segment::Any
            }
        } else if part.contains('*') {
            let mut names: Vec<&str> = parts[..index].to_vec();
            names.push(part.trim_matches('*'));
            names.retain(|name| !name.is_empty());
            names.push("*");
            return Err((
                offset,
                format!(
                    "{pattern:?}: a * stands for a whole package name (write {} for a package \
                     and the packages under it)",
                    names.join(".")
                ),
            ));
        } else if let Some(problem) = identifier_problem(part) {
            return Err((
                offset,
                format!("{pattern:?} is not a package pattern: {problem}"),
            ));
        } else {
            Segment::Name(part.to_string())
        };
        segments.push(segment);
        offset += part.len() + 1;
    }
    Ok(segments)
}

/// Why a package name is not a Java identifier, if it is not.
fn identifier_problem(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Some("an empty package name (two dots, or a dot at an end)".to_string());
    };
    if !(first.is_alphabetic() || first == '_' || first == '$') {
        return Some(format!("{name:?} does not start as a Java name does"));
    }
    if let Some(bad) = chars.find(|c| !(c.is_alphanumeric() || *c == '_' || *c == '$')) {
        return Some(format!("{bad:?} is not part of a Java name"));
    }
    None
}

/// An event by package, by component and by class loader.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentStats {
    pub source: String,
    pub event: Event,
    pub unit: Unit,
    pub total_value: u64,
    pub total_count: u64,
    pub by_thread: bool,
    pub packages: Vec<WeightedRow>,
    /// With a map: its rules and the components.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<ComponentRule>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<WeightedRow>>,
    /// Where the input tells class loaders.
    pub loaders: Option<Vec<WeightedRow>>,
    /// Why there are no loaders, when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaders_note: Option<String>,
}

impl StatisticsIndex {
    /// The event (default: the first kept, CPU first) by package, by the map's components (with
    /// a map) and by class loader (where the input tells them); with `by_thread`, split by
    /// thread.
    pub fn components(
        &self,
        event: Option<Event>,
        map: Option<&ComponentMap>,
        by_thread: bool,
    ) -> Result<ComponentStats, StatsError> {
        let (event, slot) = self.event_and_slot(event)?;
        let (total_value, total_count) = self.event_totals[slot];
        let packages = self.grouped(
            slot,
            by_thread,
            |class| self.parent[class as usize],
            |group| self.name(group).to_string(),
        );
        let components = map.map(|map| {
            let mut names: Vec<&str> = Vec::new();
            for component in map
                .rules
                .iter()
                .map(|rule| rule.component.as_str())
                .chain([OTHER])
            {
                if !names.contains(&component) {
                    names.push(component);
                }
            }
            let number_of = |component: &str| {
                names
                    .iter()
                    .position(|name| *name == component)
                    .expect("every component is named") as u32
            };
            let by_package: HashMap<u32, u32> = self
                .of_kind(ResourceKind::Package)
                .map(|package| (package, number_of(map.component_of(self.name(package)))))
                .collect();
            let other = number_of(OTHER);
            self.grouped(
                slot,
                by_thread,
                |class| {
                    by_package
                        .get(&self.parent[class as usize])
                        .copied()
                        .unwrap_or(other)
                },
                |group| names[group as usize].to_string(),
            )
        });
        let (loaders, loaders_note) = if self.has_loaders {
            let mut labels: Vec<String> = self.loaders.values().cloned().collect();
            labels.sort();
            labels.dedup();
            let unknown = labels.len() as u32;
            let numbers: HashMap<&str, u32> = labels
                .iter()
                .enumerate()
                .map(|(number, label)| (label.as_str(), number as u32))
                .collect();
            let rows = self.grouped(
                slot,
                by_thread,
                |class| {
                    self.loaders
                        .get(&class)
                        .map_or(unknown, |label| numbers[label.as_str()])
                },
                |group| {
                    labels
                        .get(group as usize)
                        .cloned()
                        .unwrap_or_else(|| UNKNOWN_LOADER.to_string())
                },
            );
            (Some(rows), None)
        } else {
            (
                None,
                Some(format!(
                    "{} does not tell class loaders (traces, format=x, and JFR recordings do)",
                    self.source
                )),
            )
        };
        Ok(ComponentStats {
            source: self.source.clone(),
            event,
            unit: event.unit(),
            total_value,
            total_count,
            by_thread,
            packages,
            rules: map.map(|map| map.rules.clone()),
            components,
            loaders,
            loaders_note,
        })
    }

    /// The cells of one event by group of their stacks' classes: self for the leaf's class's
    /// group, total for each group on the stack once.
    fn grouped(
        &self,
        slot: usize,
        by_thread: bool,
        group_of: impl Fn(u32) -> u32,
        name_of: impl Fn(u32) -> String,
    ) -> Vec<WeightedRow> {
        let mut weights: HashMap<(u32, u32), Weights> = HashMap::new();
        // Without threads, a stack's cells are summed first and groups are numbered densely.
        let mut dense: Vec<Weights> = Vec::new();
        let mut groups: Vec<(u32, bool)> = Vec::new();
        for run in self.cells.chunk_by(|a, b| a.stack == b.stack) {
            let (value, count) = run
                .iter()
                .filter(|cell| cell.event as usize == slot)
                .fold((0, 0), |(value, count), cell| {
                    (value + cell.value, count + cell.count)
                });
            if value == 0 && count == 0 {
                continue;
            }
            groups.clear();
            for &entry in self.stack_classes.get(run[0].stack) {
                let group = group_of(entry & !SELF);
                let is_self = entry & SELF != 0;
                match groups.iter_mut().find(|(known, _)| *known == group) {
                    Some(known) => known.1 |= is_self,
                    None => groups.push((group, is_self)),
                }
            }
            if by_thread {
                for cell in run.iter().filter(|cell| cell.event as usize == slot) {
                    for &(group, is_self) in &groups {
                        weights
                            .entry((group, cell.thread))
                            .or_default()
                            .add(cell.value, cell.count, is_self);
                    }
                }
            } else {
                for &(group, is_self) in &groups {
                    if dense.len() <= group as usize {
                        dense.resize(group as usize + 1, Weights::default());
                    }
                    dense[group as usize].add(value, count, is_self);
                }
            }
        }
        for (group, sum) in dense.into_iter().enumerate() {
            if !sum.is_zero() {
                weights.insert((group as u32, NONE), sum);
            }
        }
        let mut rows: Vec<WeightedRow> = weights
            .into_iter()
            .map(|((group, thread), weights)| {
                WeightedRow::new(
                    name_of(group),
                    (thread != NONE).then(|| self.reference(thread)),
                    weights,
                    self.event_totals[slot].0,
                )
            })
            .collect();
        rows.sort_by(|a, b| {
            b.weights
                .self_value
                .cmp(&a.weights.self_value)
                .then(b.weights.total_value.cmp(&a.weights.total_value))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| thread_order(&a.thread).cmp(&thread_order(&b.thread)))
        });
        rows
    }
}
