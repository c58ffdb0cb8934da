//! Class filters, as TPTP's trace format defines them: a block of include/exclude patterns, each an exact
//! name, a prefix wildcard ("*print": names ending in "print") or a suffix wildcard ("java*":
//! names starting with "java"). The first matching pattern decides; no match means included; a
//! new block replaces the old one.

use super::attrs::{FilterMode, GenericPattern};
use super::Filter;

/// One pattern of a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterRule {
    /// The pattern without its wildcard.
    pub text: String,
    pub wildcard: GenericPattern,
    pub mode: FilterMode,
}

impl FilterRule {
    /// Reads a pattern as written (`java*`, `*print`, `Exact`).
    pub fn new(pattern: &str, mode: FilterMode) -> Result<FilterRule, String> {
        let (text, wildcard) = if let Some(text) = pattern.strip_prefix('*') {
            (text, GenericPattern::Prefix)
        } else if let Some(text) = pattern.strip_suffix('*') {
            (text, GenericPattern::Suffix)
        } else {
            (pattern, GenericPattern::None)
        };
        if text.contains('*') {
            return Err(format!(
                "filter pattern '{pattern}': a '*' may stand only at its start or its end"
            ));
        }
        if pattern.is_empty() {
            return Err("an empty filter pattern".into());
        }
        Ok(FilterRule {
            text: text.to_string(),
            wildcard,
            mode,
        })
    }

    /// The pattern as written, wildcard included.
    pub fn pattern(&self) -> String {
        match self.wildcard {
            GenericPattern::None => self.text.clone(),
            GenericPattern::Prefix => format!("*{}", self.text),
            GenericPattern::Suffix => format!("{}*", self.text),
        }
    }

    pub fn matches(&self, class_name: &str) -> bool {
        match self.wildcard {
            GenericPattern::None => class_name == self.text,
            GenericPattern::Prefix => class_name.ends_with(&self.text),
            GenericPattern::Suffix => class_name.starts_with(&self.text),
        }
    }
}

/// A block of filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterBlock {
    pub rules: Vec<FilterRule>,
}

impl FilterBlock {
    /// The inline form `+PATTERN;-PATTERN;...` (+ include, - exclude, in order).
    pub fn parse_inline(text: &str) -> Result<FilterBlock, String> {
        let rules = text
            .split(';')
            .filter(|item| !item.is_empty())
            .map(|item| {
                let (mode, pattern) = match item.split_at(1) {
                    ("+", pattern) => (FilterMode::Include, pattern),
                    ("-", pattern) => (FilterMode::Exclude, pattern),
                    _ => {
                        return Err(format!(
                            "filter '{item}' must start with + (include) or - (exclude)"
                        ))
                    }
                };
                FilterRule::new(pattern, mode)
            })
            .collect::<Result<_, _>>()?;
        Ok(FilterBlock { rules })
    }

    /// The file form: one `include PATTERN` or `exclude PATTERN` per line; blank lines and lines
    /// starting with `#` are skipped.
    pub fn parse_file(text: &str) -> Result<FilterBlock, String> {
        let mut rules = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (mode, pattern) = match line.split_once(char::is_whitespace) {
                Some(("include", pattern)) => (FilterMode::Include, pattern.trim()),
                Some(("exclude", pattern)) => (FilterMode::Exclude, pattern.trim()),
                _ => {
                    return Err(format!(
                        "line {}: '{line}' is not 'include PATTERN' or 'exclude PATTERN'",
                        index + 1
                    ))
                }
            };
            rules.push(
                FilterRule::new(pattern, mode).map_err(|e| format!("line {}: {e}", index + 1))?,
            );
        }
        Ok(FilterBlock { rules })
    }

    /// Whether a class (in Java source form, `java.lang.String`) is traced.
    pub fn includes(&self, class_name: &str) -> bool {
        self.rules
            .iter()
            .find(|rule| rule.matches(class_name))
            .is_none_or(|rule| rule.mode == FilterMode::Include)
    }

    /// The block in the inline form `parse_inline` reads.
    pub fn inline(&self) -> String {
        let rules: Vec<String> = self
            .rules
            .iter()
            .map(|rule| {
                let sign = match rule.mode {
                    FilterMode::Include => '+',
                    FilterMode::Exclude => '-',
                };
                format!("{sign}{}", rule.pattern())
            })
            .collect();
        rules.join(";")
    }

    /// The JDK classes (of a few that stand for it) that the block includes only because no
    /// pattern matches them: a block that names the program's classes without ending in an
    /// exclusion (`-*`) lets the whole JDK through.
    pub fn jdk_included_by_default(&self) -> Vec<&'static str> {
        const JDK: [&str; 3] = ["java.lang.String", "java.util.HashMap", "sun.nio.ch.IOUtil"];
        if self.rules.is_empty() {
            return Vec::new();
        }
        JDK.into_iter()
            .filter(|class| !self.rules.iter().any(|rule| rule.matches(class)))
            .collect()
    }

    /// The block as filter elements, to echo in a trace.
    pub fn to_elements(&self) -> Vec<Filter> {
        self.rules
            .iter()
            .map(|rule| Filter {
                pattern: rule.pattern(),
                generic_pattern: rule.wildcard,
                mode: rule.mode,
                trace_id_ref: None,
                collation_value: None,
                content: super::NoContent,
            })
            .collect()
    }
}

/// The filters in force: a new block replaces the old one entirely.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    block: FilterBlock,
}

impl Filters {
    pub fn replace(&mut self, block: FilterBlock) {
        self.block = block;
    }

    pub fn includes(&self, class_name: &str) -> bool {
        self.block.includes(class_name)
    }

    pub fn block(&self) -> &FilterBlock {
        &self.block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wildcard_kind_matches_its_end_of_the_name() {
        let exact = FilterRule::new("java.lang.String", FilterMode::Exclude).unwrap();
        assert!(exact.matches("java.lang.String") && !exact.matches("java.lang.StringBuilder"));
        let ends = FilterRule::new("*print", FilterMode::Exclude).unwrap();
        assert_eq!(ends.wildcard, GenericPattern::Prefix);
        assert!(
            ends.matches("com.acme.print") && ends.matches("sprint") && !ends.matches("printer")
        );
        let starts = FilterRule::new("java*", FilterMode::Exclude).unwrap();
        assert_eq!(starts.wildcard, GenericPattern::Suffix);
        assert!(
            starts.matches("java.util.List")
                && starts.matches("javax.Foo")
                && !starts.matches("sun.java")
        );
        assert!(FilterRule::new("ja*va", FilterMode::Include).is_err());
    }

    #[test]
    fn the_first_match_decides_and_no_match_includes() {
        let block = FilterBlock::parse_inline("+java.util.HashMap;-java*;+*Test").unwrap();
        assert!(block.includes("java.util.HashMap"), "first match: included");
        assert!(!block.includes("java.util.TreeMap"), "second rule excludes");
        assert!(
            !block.includes("java.FooTest"),
            "the earlier exclude wins over the later include"
        );
        assert!(block.includes("com.acme.Main"), "no match: included");
        assert!(FilterBlock::default().includes("anything"));
    }

    #[test]
    fn a_block_that_names_only_the_program_lets_the_jdk_through() {
        let natural = FilterBlock::parse_inline("+Covers").unwrap();
        assert_eq!(natural.jdk_included_by_default().len(), 3);
        let closed = FilterBlock::parse_inline("+Covers;-*").unwrap();
        assert_eq!(closed.inline(), "+Covers;-*");
        assert!(closed.jdk_included_by_default().is_empty());
        let partly = FilterBlock::parse_inline("+com.acme*;-java*").unwrap();
        assert_eq!(partly.jdk_included_by_default(), ["sun.nio.ch.IOUtil"]);
        assert!(FilterBlock::default().jdk_included_by_default().is_empty());
    }

    #[test]
    fn a_new_block_replaces_the_old_one() {
        let mut filters = Filters::default();
        filters.replace(FilterBlock::parse_inline("-com.acme*").unwrap());
        assert!(!filters.includes("com.acme.Main"));
        filters.replace(FilterBlock::parse_inline("-org*").unwrap());
        assert!(filters.includes("com.acme.Main"), "the old block is gone");
        assert!(!filters.includes("org.x.Y"));
    }

    #[test]
    fn file_form_and_errors() {
        let block = FilterBlock::parse_file("# mine\ninclude com.acme.Keep\n\nexclude com.acme*\n")
            .unwrap();
        assert_eq!(
            block,
            FilterBlock::parse_inline("+com.acme.Keep;-com.acme*").unwrap()
        );
        assert!(FilterBlock::parse_file("keep com.acme")
            .unwrap_err()
            .contains("line 1"));
        assert!(FilterBlock::parse_inline("com.acme")
            .unwrap_err()
            .contains("must start with +"));
        let echoed = block.to_elements();
        assert_eq!(echoed[1].pattern, "com.acme*");
        assert_eq!(echoed[1].generic_pattern, GenericPattern::Suffix);
        assert_eq!(echoed[1].mode, FilterMode::Exclude);
    }
}
