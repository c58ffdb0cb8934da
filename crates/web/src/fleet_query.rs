//! A question to the fleet's windows in ClickHouse, as `openprof fleet` and the web UI's fleet
//! routes both ask it: which event, which agents and samples (labels), which time, and for a
//! differential view the same time some while earlier; checked the same way by both, and
//! answered with the profile ClickHouse sums.

use openprof_analysis::profile::{Event, Profile};
use openprof_collector::clickhouse::{ClickHouse, WindowFilter};
use openprof_collector::windows::WINDOW_EVENTS;

/// The event of this name when windows count it ([`WINDOW_EVENTS`]: docs/clickhouse.md,
/// "Forwarding").
pub fn window_event(name: &str) -> Option<Event> {
    WINDOW_EVENTS
        .contains(&name)
        .then(|| Event::from_name(name))
        .flatten()
}

/// The events windows count, as a refusal lists them: `cpu, wall, ... and alloc_objects`.
pub fn window_event_names() -> String {
    match WINDOW_EVENTS.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, others)) => format!("{} and {last}", others.join(", ")),
        None => String::new(),
    }
}

/// An agent's label as its `label=` option gives it; what to give instead otherwise.
pub fn check_agent_label(label: &str) -> Result<(), &'static str> {
    if label.contains(':') {
        Ok(())
    } else {
        Err("give NAME:VALUE, as the agent's label= option has it")
    }
}

/// A sample's label (a traced call's value, the application's context); what to give instead
/// otherwise.
pub fn check_sample_label(label: &str) -> Result<(), &'static str> {
    if label.contains('=') {
        Ok(())
    } else {
        Err("give NAME=VALUE, e.g. user=alice or 'MptSlow.work(int) 1=20'")
    }
}

/// The windows asked for and the event summed.
#[derive(Clone, Debug)]
pub struct FleetQuery {
    pub event: Event,
    /// Its `event` is `event`'s name (see [`FleetQuery::new`]).
    pub filter: WindowFilter,
}

impl FleetQuery {
    pub fn new(event: Event, filter: WindowFilter) -> FleetQuery {
        FleetQuery {
            event,
            filter: WindowFilter {
                event: Some(event.name().to_string()),
                ..filter
            },
        }
    }

    /// The same question of the time as long, `earlier_seconds` before (its end is `now` when
    /// the range has none): a differential view's base.
    pub fn earlier(&self, earlier_seconds: u64, now: u64) -> FleetQuery {
        let end = self.filter.until.unwrap_or(now);
        FleetQuery {
            event: self.event,
            filter: WindowFilter {
                since: self
                    .filter
                    .since
                    .map(|since| since.saturating_sub(earlier_seconds)),
                until: Some(end.saturating_sub(earlier_seconds)),
                ..self.filter.clone()
            },
        }
    }

    /// The stacks summed in ClickHouse as a profile named `source`; `None` when no window
    /// matches. `Err`: ClickHouse failed or is away.
    pub fn profile(
        &self,
        clickhouse: &ClickHouse,
        source: impl Into<String>,
    ) -> Result<Option<Profile>, String> {
        let stacks = clickhouse.stacks(&self.filter)?;
        if stacks.is_empty() {
            return Ok(None);
        }
        Ok(Some(Profile::of_stacks(source, self.event, stacks)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_windows_events_are_taken() {
        assert_eq!(window_event("lock_owner"), Some(Event::LockOwner));
        assert_eq!(window_event("cpu_time"), None);
        assert_eq!(window_event("CPU"), None);
        assert!(window_event_names().starts_with("cpu, wall, "));
        for name in WINDOW_EVENTS {
            assert!(window_event(name).is_some(), "{name}");
        }
    }

    #[test]
    fn labels_are_checked_by_their_separator() {
        assert!(check_agent_label("team:pay").is_ok());
        assert!(check_agent_label("team=pay")
            .unwrap_err()
            .contains("NAME:VALUE"));
        assert!(check_sample_label("MptJoined.lookup(java.lang.String) 1=slow").is_ok());
        assert!(check_sample_label("user")
            .unwrap_err()
            .contains("NAME=VALUE"));
    }

    #[test]
    fn the_earlier_range_is_as_long_and_ends_that_much_before() {
        let last_hour = FleetQuery::new(
            Event::Wall,
            WindowFilter {
                labels: vec!["service:shop".into()],
                since: Some(10_000 - 3_600),
                ..WindowFilter::default()
            },
        );
        assert_eq!(last_hour.filter.event.as_deref(), Some("wall"));
        let minute_before = last_hour.earlier(60, 10_000);
        assert_eq!(minute_before.filter.since, Some(10_000 - 3_600 - 60));
        assert_eq!(minute_before.filter.until, Some(10_000 - 60));
        assert_eq!(minute_before.filter.labels, ["service:shop"]);
        assert_eq!(minute_before.filter.event.as_deref(), Some("wall"));
        // Before the epoch there is nothing: the range stays at its start.
        assert_eq!(last_hour.earlier(86_400, 10_000).filter.until, Some(0));
        let day_ago = FleetQuery::new(
            Event::Cpu,
            WindowFilter {
                since: Some(200_000),
                until: Some(203_600),
                ..WindowFilter::default()
            },
        )
        .earlier(86_400, 999_999);
        assert_eq!(day_ago.filter.since, Some(200_000 - 86_400));
        assert_eq!(day_ago.filter.until, Some(203_600 - 86_400));
        assert_eq!(day_ago.filter.event.as_deref(), Some("cpu"));
    }
}
