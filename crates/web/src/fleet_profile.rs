//! The fleet's profile, summed in ClickHouse from the windows the collector forwards there
//! (`openprof serve --clickhouse`), in three forms:
//!
//! - `GET /api/fleet/pprof?FLEET` as gzipped pprof, for scrapers that read pprof over HTTP
//!   (Parca, Grafana Alloy) and for `go tool pprof URL`;
//! - `GET /view/fleet/flame?FLEET[&compare=SECONDS]`: the views' flame graph page (the one every
//!   flame graph is), or with `compare` the differential page against the same time that many
//!   seconds earlier, for the UI's frame;
//! - `GET /api/fleet/top?FLEET[&bucket=SECONDS][&top=N]`: the top methods of each time bucket,
//!   as JSON.
//!
//! `FLEET` is the question `openprof fleet` asks ([`crate::fleet_query`]): `service=`,
//! `label=NAME:VALUE`, `sample_label=NAME=VALUE` (both repeatable), `agent=`, `event=`, and
//! `seconds=` (the last N; 60 by default) or `since=` and `until=` (seconds since the epoch).
//! Opened by the control credential like every route; a bad parameter is a 400 naming it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use openprof_analysis::profile::{Event, Profile};
use openprof_analysis::views::{self, ViewOptions};
use openprof_collector::clickhouse::{utc_text, ClickHouse, WindowFilter};
use serde_json::{json, Value};

use crate::api::{bad_request, blocking, error, parameters, ApiError, VIEW_HEADERS};
use crate::fleet_query::{
    check_agent_label, check_sample_label, window_event, window_event_names, FleetQuery,
};
use crate::Web;

/// The time a request may ask for with `seconds=`, at most: a week.
const MOST_SECONDS: u64 = 7 * 24 * 3600;
/// How far back `compare=` may reach: a year.
const MOST_COMPARE_SECONDS: u64 = 366 * 24 * 3600;
/// The methods a bucket of `/api/fleet/top` lists, at most.
const MOST_TOP: u64 = 100;
/// What a fleet route answers when the collector has no ClickHouse.
pub const NO_CLICKHOUSE: &str =
    "this collector forwards no windows to ClickHouse (openprof serve --clickhouse URL)";

/// A fleet route's question, its time in words, and the values of the route's own parameters.
struct FleetRequest {
    query: FleetQuery,
    range: String,
    own: HashMap<String, String>,
}

pub async fn fleet_pprof(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let request = match fleet_request(query.as_deref(), &[], now_seconds()) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let clickhouse = clickhouse_of(&web)?;
        let profile = profile_of(&clickhouse, &request.query, "the fleet", || {
            "no windows in ClickHouse for these agents in this time".to_string()
        })?;
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

/// The flame graph page of the fleet's windows, or with `compare=SECONDS` the differential
/// page of them against the same time that many seconds earlier (the base).
pub async fn fleet_flame_page(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let now = now_seconds();
    let parsed = fleet_request(query.as_deref(), &["compare"], now).and_then(|request| {
        let compare = request
            .own
            .get("compare")
            .map(|text| whole_number("compare", text, MOST_COMPARE_SECONDS, " seconds (a year)"))
            .transpose()?;
        Ok((request, compare))
    });
    let (request, compare) = match parsed {
        Ok(parsed) => parsed,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let clickhouse = clickhouse_of(&web)?;
        let profile = profile_of(&clickhouse, &request.query, source_of(&request), || {
            format!(
                "no windows in ClickHouse for these agents and labels in {}",
                request.range
            )
        })?;
        let options = ViewOptions::default();
        let mut html = Vec::new();
        let written = match compare {
            Some(earlier) => {
                let base = profile_of(
                    &clickhouse,
                    &request.query.earlier(earlier, now),
                    format!("{earlier} s earlier"),
                    || {
                        format!(
                            "compare={earlier}: no windows in ClickHouse for these agents and \
                             labels {earlier} s before {}",
                            request.range
                        )
                    },
                )?;
                views::html::write_diff(&profile, &base, &options, &mut html)
            }
            None => views::html::write(&profile, &options, &mut html),
        };
        written.map_err(|problem| error(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string()))?;
        Ok(html)
    })
    .await;
    match result {
        Ok(html) => (VIEW_HEADERS, html).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// The top methods (by self weight: a stack's leaf) of each `bucket=` seconds (60 by default),
/// `top=` of them a bucket (5 by default), summed in ClickHouse: `{event, bucketSeconds, top,
/// buckets: [{start, time, methods: [{method, value}]}]}`, buckets in time order (`start` in
/// seconds since the epoch, `time` in UTC), methods heaviest first.
pub async fn fleet_top(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let parsed =
        fleet_request(query.as_deref(), &["bucket", "top"], now_seconds()).and_then(|request| {
            let bucket = match request.own.get("bucket") {
                Some(text) => whole_number("bucket", text, MOST_SECONDS, " seconds (a week)")?,
                None => 60,
            };
            let top = match request.own.get("top") {
                Some(text) => whole_number("top", text, MOST_TOP, "")?,
                None => 5,
            };
            Ok((request, bucket, top))
        });
    let (request, bucket, top) = match parsed {
        Ok(parsed) => parsed,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let clickhouse = clickhouse_of(&web)?;
        // `top` is at most MOST_TOP: it fits.
        let rows = clickhouse
            .top_methods_over_time(&request.query.filter, bucket, top as u32)
            .map_err(|problem| error(StatusCode::BAD_GATEWAY, problem))?;
        Ok(json!({
            "event": request.query.event.name(),
            "bucketSeconds": bucket,
            "top": top,
            "buckets": buckets_of(rows),
        }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// ClickHouse's rows of top methods (bucket, method, value; in bucket order) as one JSON
/// object per bucket.
fn buckets_of(rows: Vec<(u64, String, u64)>) -> Vec<Value> {
    let mut buckets: Vec<(u64, Vec<Value>)> = Vec::new();
    for (start, method, value) in rows {
        let row = json!({ "method": method, "value": value });
        match buckets.last_mut() {
            Some((last, methods)) if *last == start => methods.push(row),
            _ => buckets.push((start, vec![row])),
        }
    }
    buckets
        .into_iter()
        .map(|(start, methods)| json!({ "start": start, "time": utc_text(start), "methods": methods }))
        .collect()
}

/// The ClickHouse the collector forwards into, or the 404 that says it forwards nowhere.
fn clickhouse_of(web: &Web) -> Result<ClickHouse, ApiError> {
    web.config
        .clickhouse
        .clone()
        .ok_or_else(|| error(StatusCode::NOT_FOUND, NO_CLICKHOUSE))
}

/// The profile ClickHouse sums for `query`: a 502 when ClickHouse fails, a 404 (`missing`'s
/// message) when no window matches.
fn profile_of(
    clickhouse: &ClickHouse,
    query: &FleetQuery,
    source: impl Into<String>,
    missing: impl FnOnce() -> String,
) -> Result<Profile, ApiError> {
    query
        .profile(clickhouse, source)
        .map_err(|problem| error(StatusCode::BAD_GATEWAY, problem))?
        .ok_or_else(|| error(StatusCode::NOT_FOUND, missing()))
}

/// A flame graph's source, which its title shows with the event: whose windows, and when.
fn source_of(request: &FleetRequest) -> String {
    let filter = &request.query.filter;
    let mut selection: Vec<String> = filter
        .labels
        .iter()
        .chain(&filter.sample_labels)
        .cloned()
        .collect();
    if let Some(agent) = filter.agent {
        selection.push(format!("agent {agent}"));
    }
    let whom = if selection.is_empty() {
        "every agent".to_string()
    } else {
        selection.join(", ")
    };
    format!("the fleet: {whom}, {}", request.range)
}

/// A fleet route's parameters (see the module's documentation), with `now` the end of a
/// `seconds=` range, and the values of the route's own parameters (`own_names`).
fn fleet_request(
    query: Option<&str>,
    own_names: &[&str],
    now: u64,
) -> Result<FleetRequest, ApiError> {
    let mut filter = WindowFilter::default();
    let mut event = Event::Cpu;
    let (mut seconds, mut since, mut until) = (None, None, None);
    let mut own = HashMap::new();
    for (key, value) in parameters(query)? {
        match key.as_str() {
            "service" if value.is_empty() => {
                return Err(bad_request(
                    "service= is empty: give the name its agents have as label=service:NAME",
                ))
            }
            "service" => filter.labels.push(format!("service:{value}")),
            "label" => {
                check_agent_label(&value)
                    .map_err(|fault| bad_request(format!("label={value:?}: {fault}")))?;
                filter.labels.push(value);
            }
            "sample_label" => {
                check_sample_label(&value)
                    .map_err(|fault| bad_request(format!("sample_label={value:?}: {fault}")))?;
                filter.sample_labels.push(value);
            }
            "agent" => {
                filter.agent =
                    Some(uuid::Uuid::parse_str(&value).map_err(|_| {
                        bad_request(format!("agent={value:?} is not an agent's id"))
                    })?)
            }
            "event" => {
                event = window_event(&value).ok_or_else(|| {
                    bad_request(format!(
                        "event={value:?}: the fleet's windows hold {}",
                        window_event_names()
                    ))
                })?
            }
            "seconds" => {
                seconds = Some(whole_number(
                    "seconds",
                    &value,
                    MOST_SECONDS,
                    " seconds (a week)",
                )?)
            }
            "since" => since = Some(epoch_seconds("since", &value)?),
            "until" => until = Some(epoch_seconds("until", &value)?),
            other if own_names.contains(&other) => {
                own.insert(key, value);
            }
            other => {
                let own_list: String = own_names.iter().map(|name| format!(", {name}")).collect();
                return Err(bad_request(format!(
                    "{other}= is not a parameter of the fleet's profile: service, label, \
                     sample_label, agent, event, seconds, since, until{own_list}"
                )));
            }
        }
    }
    let range = match (seconds, since, until) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(bad_request(
                "seconds= with since= or until=: give the last seconds, or since= (and until=)",
            ))
        }
        (None, None, Some(_)) => {
            return Err(bad_request("until= needs since= (seconds since the epoch)"))
        }
        (None, Some(since), Some(until)) if until <= since => {
            return Err(bad_request(format!(
                "until={until}: give a time after since={since}"
            )))
        }
        (None, Some(since), until) => {
            filter.since = Some(since);
            filter.until = until;
            match until {
                Some(until) => format!("{} to {} UTC", utc_text(since), utc_text(until)),
                None => format!("since {} UTC", utc_text(since)),
            }
        }
        (seconds, None, None) => {
            let seconds = seconds.unwrap_or(60);
            filter.since = Some(now.saturating_sub(seconds));
            format!("the last {seconds} s")
        }
    };
    Ok(FleetRequest {
        query: FleetQuery::new(event, filter),
        range,
        own,
    })
}

/// A whole number from 1 to `most` (`unit` says of what, after the number), or a 400 naming
/// `key`.
fn whole_number(key: &str, text: &str, most: u64, unit: &str) -> Result<u64, ApiError> {
    text.parse()
        .ok()
        .filter(|number| (1..=most).contains(number))
        .ok_or_else(|| bad_request(format!("{key}={text:?}: give 1 to {most}{unit}")))
}

/// A time as seconds since the epoch, or a 400 naming `key`.
fn epoch_seconds(key: &str, text: &str) -> Result<u64, ApiError> {
    text.parse()
        .map_err(|_| bad_request(format!("{key}={text:?}: give seconds since the epoch")))
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_parameters_are_checked_by_name() {
        let request = fleet_request(
            Some("service=checkout&label=team:pay&seconds=15"),
            &[],
            1_000,
        )
        .unwrap();
        assert_eq!(
            request.query.filter.labels,
            ["service:checkout", "team:pay"]
        );
        assert_eq!(request.query.filter.since, Some(985));
        assert_eq!(request.query.filter.until, None);
        assert_eq!(request.query.filter.event.as_deref(), Some("cpu"));
        for (query, named) in [
            ("label=team", "NAME:VALUE"),
            (
                "sample_label=user",
                "sample_label=\"user\": give NAME=VALUE",
            ),
            ("service=", "service= is empty"),
            ("seconds=0", "seconds="),
            ("seconds=999999999", "seconds="),
            ("agent=x", "not an agent's id"),
            ("event=cpu_time", "event=\"cpu_time\""),
            ("window=5", "window= is not a parameter"),
            ("compare=5", "compare= is not a parameter"),
            ("since=x", "since=\"x\""),
            ("until=5", "until= needs since="),
            ("since=9&until=9", "until=9"),
            ("seconds=5&since=9", "seconds= with since="),
        ] {
            let problem = fleet_request(Some(query), &[], 1_000).err().unwrap();
            assert!(
                problem.message.contains(named),
                "{query}: {}",
                problem.message
            );
        }
    }

    #[test]
    fn a_range_of_epoch_seconds_and_the_routes_own_parameters_are_taken() {
        let request = fleet_request(
            Some("since=100&until=160&event=lock_owner&sample_label=user%3Dalice&compare=30"),
            &["compare"],
            1_000,
        )
        .unwrap();
        let filter = &request.query.filter;
        assert_eq!((filter.since, filter.until), (Some(100), Some(160)));
        assert_eq!(filter.event.as_deref(), Some("lock_owner"));
        assert_eq!(filter.sample_labels, ["user=alice"]);
        assert_eq!(request.own.get("compare").map(String::as_str), Some("30"));
        assert_eq!(
            request.range,
            "1970-01-01 00:01:40 to 1970-01-01 00:02:40 UTC"
        );
        let problem = fleet_request(Some("bucket=1"), &["compare"], 1_000)
            .err()
            .unwrap();
        assert!(
            problem.message.ends_with("since, until, compare"),
            "{}",
            problem.message
        );
        assert!(whole_number("top", "101", MOST_TOP, "")
            .unwrap_err()
            .message
            .contains("top=\"101\": give 1 to 100"));
    }

    #[test]
    fn top_rows_are_grouped_by_bucket() {
        let buckets = buckets_of(vec![
            (60, "A.a".into(), 5),
            (60, "B.b".into(), 2),
            (120, "A.a".into(), 7),
        ]);
        assert_eq!(buckets.len(), 2);
        assert_eq!(buckets[0]["time"], "1970-01-01 00:01:00");
        assert_eq!(buckets[0]["methods"][1]["method"], "B.b");
        assert_eq!(buckets[1]["methods"][0]["value"], 7);
    }
}
