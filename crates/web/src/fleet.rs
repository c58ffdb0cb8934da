//! The fleet's filter (`GET /api/fleet?filter=TEXT`): terms apart by white space, every one of
//! which an agent must match.
//!
//! - `label:NAME=VALUE`: the agent has label NAME with exactly VALUE;
//! - `label:NAME`: the agent has label NAME, whatever its value;
//! - any other text, case aside: a part of its host name or of a label's value, its pid, the
//!   start of its agent id, or its format.
//!
//! Label names and values are checked as the agent's `label=` option checks them, so a term
//! that could never match is refused by name rather than listing nothing.

use openprof_collector::store::AgentEntry;
use openprof_format::options::{is_label_name_char, is_label_value_char};

/// One term of the filter.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    /// `label:NAME=VALUE`, or `label:NAME` (any value).
    Label { name: String, value: Option<String> },
    /// Free text, lowercased.
    Text(String),
}

/// A fleet filter, read from its text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetFilter {
    terms: Vec<Term>,
}

impl FleetFilter {
    /// Reads a filter; a malformed `label:` term is refused, naming it and what is wrong.
    pub fn parse(text: &str) -> Result<FleetFilter, String> {
        let mut terms = Vec::new();
        for word in text.split_whitespace() {
            let Some(label) = word.strip_prefix("label:") else {
                terms.push(Term::Text(word.to_lowercase()));
                continue;
            };
            let usage = "use label:NAME=VALUE or label:NAME";
            let (name, value) = match label.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (label, None),
            };
            if name.is_empty() {
                return Err(format!(
                    "filter {word:?}: the label's name is empty; {usage}"
                ));
            }
            if let Some(c) = name.chars().find(|c| !is_label_name_char(*c)) {
                return Err(format!(
                    "filter {word:?}: {c:?} is not allowed in a label's name \
                     (letters, digits, '_', '.' and '-')"
                ));
            }
            if let Some(value) = value {
                if value.is_empty() {
                    return Err(format!(
                        "filter {word:?}: the label's value is empty; {usage}"
                    ));
                }
                if let Some(c) = value.chars().find(|c| !is_label_value_char(*c)) {
                    return Err(format!(
                        "filter {word:?}: {c:?} is not allowed in a label's value \
                         (letters, digits, '_', '.', '-', ':', '/', '@' and '+')"
                    ));
                }
            }
            terms.push(Term::Label {
                name: name.to_string(),
                value: value.map(str::to_string),
            });
        }
        Ok(FleetFilter { terms })
    }

    /// Whether the agent matches every term (an empty filter lists every agent).
    pub fn matches(&self, agent: &AgentEntry) -> bool {
        self.terms.iter().all(|term| match term {
            Term::Label { name, value } => agent.labels.iter().any(|(label, label_value)| {
                label == name && value.as_ref().is_none_or(|value| value == label_value)
            }),
            Term::Text(text) => {
                agent.hostname.to_lowercase().contains(text)
                    || agent.pid.to_string() == *text
                    || agent.agent.to_string().starts_with(text)
                    || agent.format == *text
                    || agent
                        .labels
                        .iter()
                        .any(|(_, value)| value.to_lowercase().contains(text))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn agent(hostname: &str, pid: u32, labels: &[(&str, &str)]) -> AgentEntry {
        AgentEntry {
            agent: Uuid::parse_str("3f2b8c1e-0000-4000-8000-000000000001").unwrap(),
            process: None,
            hostname: hostname.to_string(),
            pid,
            format: "a".to_string(),
            last_sequence: 0,
            frames: 0,
            bytes: 0,
            clock: None,
            lost_frames: 0,
            lost_bytes: 0,
            finished: false,
            labels: labels
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            identity: None,
        }
    }

    fn listed(filter: &str, agent: &AgentEntry) -> bool {
        FleetFilter::parse(filter).unwrap().matches(agent)
    }

    #[test]
    fn labels_are_matched_exactly_and_text_as_before() {
        let pay = agent("Build-7", 4242, &[("team", "pay"), ("env", "Test")]);
        let bare = agent("build-8", 17, &[]);
        for (filter, pay_listed, bare_listed) in [
            ("", true, true),
            ("  ", true, true),
            ("label:team=pay", true, false),
            ("label:team=other", false, false),
            ("label:team=Pay", false, false),
            ("label:team", true, false),
            ("label:owner", false, false),
            ("label:env=Test label:team=pay", true, false),
            ("label:env=Test label:team=other", false, false),
            // Free text: host, pid, id, format, and a label's value, case aside.
            ("build", true, true),
            ("BUILD-7", true, false),
            ("4242", true, false),
            ("3f2b8c1e", true, true),
            ("a", true, true),
            ("test", true, false),
            ("pa", true, false),
            ("build label:team", true, false),
            ("build-8 label:team", false, false),
            // Names are not values.
            ("team", false, false),
        ] {
            assert_eq!(listed(filter, &pay), pay_listed, "{filter:?} on pay");
            assert_eq!(listed(filter, &bare), bare_listed, "{filter:?} on bare");
        }
    }

    #[test]
    fn malformed_label_terms_are_named() {
        for (filter, problem) in [
            ("label:", "filter \"label:\": the label's name is empty"),
            ("label:=pay", "the label's name is empty"),
            (
                "label:team=",
                "filter \"label:team=\": the label's value is empty",
            ),
            ("label:te/am=pay", "'/' is not allowed in a label's name"),
            ("label:team=p\"y", "'\"' is not allowed in a label's value"),
            ("host label:a=b=c", "'=' is not allowed in a label's value"),
        ] {
            let error = FleetFilter::parse(filter).expect_err(filter);
            assert!(error.contains(problem), "{filter}: {error}");
        }
    }
}
