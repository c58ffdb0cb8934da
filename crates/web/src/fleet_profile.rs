//! The fleet's CPU profile as pprof, from the windows the collector forwards to ClickHouse:
//! `GET /api/fleet/pprof?service=S&label=NAME:VALUE&sample_label=NAME=VALUE&agent=ID&seconds=N`,
//! for scrapers that
//! read pprof over HTTP (Parca, Grafana Alloy) and for `go tool pprof URL`. The sum runs in
//! ClickHouse; opened by the control credential like every route (a bearer token).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use openprof_analysis::profile::{Event, Profile};
use openprof_analysis::views::{self, ViewOptions};
use openprof_collector::clickhouse::WindowFilter;

use crate::api::{bad_request, blocking, error, parameters, ApiError};
use crate::Web;

/// The window a scrape asks for, at most: a week.
const MOST_SECONDS: u64 = 7 * 24 * 3600;

pub async fn fleet_pprof(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let filter = match filter_of(query.as_deref()) {
        Ok(filter) => filter,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let clickhouse = web.config.clickhouse.clone().ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                "this collector forwards no windows to ClickHouse (openprof serve --clickhouse)",
            )
        })?;
        let stacks = clickhouse
            .stacks(&filter)
            .map_err(|problem| error(StatusCode::BAD_GATEWAY, problem))?;
        if stacks.is_empty() {
            return Err(error(
                StatusCode::NOT_FOUND,
                "no windows in ClickHouse for these agents in this time",
            ));
        }
        let profile = Profile::of_stacks("the fleet", Event::Cpu, stacks);
        let mut bytes = Vec::new();
        views::write(
            &profile,
            views::OutputFormat::Pprof,
            &ViewOptions::default(),
            &mut bytes,
        )
        .map_err(|problem| error(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string()))?;
        Ok(bytes)
    })
    .await;
    match result {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// The query's agents, samples and time: `service=`, `label=NAME:VALUE` (repeatable),
/// `sample_label=NAME=VALUE` (repeatable), `agent=`,
/// `seconds=` (default 60: the last minute).
fn filter_of(query: Option<&str>) -> Result<WindowFilter, ApiError> {
    let mut filter = WindowFilter::default();
    let mut seconds = 60;
    for (key, value) in parameters(query)? {
        match key.as_str() {
            "service" => filter.labels.push(format!("service:{value}")),
            "label" if value.contains(':') => filter.labels.push(value),
            "label" => {
                return Err(bad_request(format!(
                    "label={value:?}: give NAME:VALUE, as the agent's label= option has it"
                )))
            }
            "sample_label" if value.contains('=') => filter.sample_labels.push(value),
            "sample_label" => {
                return Err(bad_request(format!(
                    "sample_label={value:?}: give NAME=VALUE, e.g. user=alice"
                )))
            }
            "agent" => {
                filter.agent = Some(uuid::Uuid::parse_str(&value).map_err(|_| {
                    bad_request(format!("agent={value:?} is not an agent's id"))
                })?)
            }
            "seconds" => {
                seconds = value
                    .parse()
                    .ok()
                    .filter(|seconds| (1..=MOST_SECONDS).contains(seconds))
                    .ok_or_else(|| {
                        bad_request(format!(
                            "seconds={value:?}: give 1 to {MOST_SECONDS} (a week)"
                        ))
                    })?
            }
            other => {
                return Err(bad_request(format!(
                    "{other}= is not a parameter of the fleet's profile: service, label, agent, seconds"
                )))
            }
        }
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    filter.since = Some(now.saturating_sub(seconds));
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_parameters_are_checked_by_name() {
        let filter = filter_of(Some("service=checkout&label=team:pay&seconds=15")).unwrap();
        assert_eq!(filter.labels, ["service:checkout", "team:pay"]);
        assert!(filter.since.is_some());
        for (query, named) in [
            ("label=team", "NAME:VALUE"),
            ("seconds=0", "seconds="),
            ("seconds=999999999", "seconds="),
            ("agent=x", "not an agent's id"),
            ("window=5", "window= is not a parameter"),
        ] {
            let problem = filter_of(Some(query)).unwrap_err();
            assert!(
                problem.message.contains(named),
                "{query}: {}",
                problem.message
            );
        }
    }
}
