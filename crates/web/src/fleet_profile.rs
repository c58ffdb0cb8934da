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
//! and two questions of calls rather than samples, as JSON (`openprof fleet --values` and
//! `--calls`):
//!
//! - `GET /api/fleet/values?AGENTS[&method=M]`: method parameter tracing's values, summed over
//!   the windows of HPROF text agents;
//! - `GET /api/fleet/calls?AGENTS[&top=N]`: calls per method, counted from the methodEntry
//!   elements of the traces of format=x agents.
//!
//! `FLEET` is the question `openprof fleet` asks ([`crate::fleet_query`]): `service=`,
//! `label=NAME:VALUE`, `sample_label=NAME=VALUE` (both repeatable), `agent=`, `event=`, and
//! `seconds=` (the last N; 60 by default) or `since=` and `until=` (seconds since the epoch).
//! `AGENTS` is the same without `sample_label=` and `event=`, which count samples: calls have
//! neither, and those two routes refuse them by name. Opened by the control credential like
//! every route; a bad parameter is a 400 naming it.

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
use openprof_collector::windows::ValueCalls;
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

/// The methods `/api/fleet/calls` lists when not told: as many as `openprof fleet --calls`.
const DEFAULT_CALLS_TOP: u64 = 20;

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
/// buckets: [{start, time, total, methods: [{method, value}]}]}`, buckets in time order
/// (`start` in seconds since the epoch, `time` in UTC), methods heaviest first, `total` the
/// bucket's weight in every method.
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
        let totals = clickhouse
            .samples_over_time(&request.query.filter, bucket)
            .map_err(|problem| error(StatusCode::BAD_GATEWAY, problem))?;
        Ok(json!({
            "event": request.query.event.name(),
            "bucketSeconds": bucket,
            "top": top,
            "buckets": buckets_of(rows, totals),
        }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// Method parameter tracing's values of the agents' windows (HPROF text agents with `mpt=`),
/// summed in ClickHouse per method, specification and value (`method=`: one method's only, as
/// `package.Class.method(types)`): `{values: [{method, spec, type, value, calls, wallMeanMs,
/// wallMaxMs, wallTotalMs, cpuMeanMs, cpuMaxMs}]}`, the most wall time first; the maxima are
/// the slowest call since an agent started (docs/clickhouse.md, "Schema"). No values is an
/// empty list.
pub async fn fleet_values(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let parsed = agents_request(query.as_deref(), &["method"], now_seconds()).and_then(|request| {
        match request.own.get("method") {
            Some(method) if method.trim().is_empty() => Err(bad_request(
                "method= is empty: give package.Class.method(types), or leave it out for every \
                 traced method",
            )),
            _ => Ok(request),
        }
    });
    let request = match parsed {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let clickhouse = clickhouse_of(&web)?;
        let values = clickhouse
            .traced_values(
                &request.query.filter,
                request.own.get("method").map(String::as_str),
            )
            .map_err(|problem| error(StatusCode::BAD_GATEWAY, problem))?;
        Ok(json!({ "values": values.iter().map(value_json).collect::<Vec<_>>() }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// One traced value's figures as `/api/fleet/values` (and `/api/mpt`) name them, times in ms.
fn value_json(value: &ValueCalls) -> Value {
    let ms = |nanos: u64| nanos as f64 / 1e6;
    let calls = value.calls.max(1) as f64;
    json!({
        "method": value.method,
        "spec": value.spec,
        "type": value.value_type,
        "value": value.value,
        "calls": value.calls,
        "wallMeanMs": ms(value.wall_total_ns) / calls,
        "wallMaxMs": ms(value.wall_max_ns),
        "wallTotalMs": ms(value.wall_total_ns),
        "cpuMeanMs": ms(value.cpu_total_ns) / calls,
        "cpuMaxMs": ms(value.cpu_max_ns),
    })
}

/// The methods called most in the agents' traces (format=x agents with `cpu=times`): their
/// methodEntry elements counted in ClickHouse, `top=` methods (20 by default, at most 100):
/// `{top, methods: [{method, calls}]}`, most calls first. No traces is an empty list.
pub async fn fleet_calls(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let parsed = agents_request(query.as_deref(), &["top"], now_seconds()).and_then(|request| {
        let top = match request.own.get("top") {
            Some(text) => whole_number("top", text, MOST_TOP, "")?,
            None => DEFAULT_CALLS_TOP,
        };
        Ok((request, top))
    });
    let (request, top) = match parsed {
        Ok(parsed) => parsed,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let clickhouse = clickhouse_of(&web)?;
        // `top` is at most MOST_TOP: it fits.
        let calls = clickhouse
            .method_calls(&request.query.filter, top as u32)
            .map_err(|problem| error(StatusCode::BAD_GATEWAY, problem))?;
        Ok(json!({
            "top": top,
            "methods": calls
                .into_iter()
                .map(|(method, calls)| json!({ "method": method, "calls": calls }))
                .collect::<Vec<_>>(),
        }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// ClickHouse's rows of top methods (bucket, method, value; in bucket order) and its totals of
/// every bucket (bucket, value; in order) as one JSON object per bucket: `total` counts the
/// methods below the top too, so a bucket whose top is short of it has other methods.
fn buckets_of(rows: Vec<(u64, String, u64)>, totals: Vec<(u64, u64)>) -> Vec<Value> {
    let mut rows = rows.into_iter().peekable();
    totals
        .into_iter()
        .map(|(start, total)| {
            let mut methods = Vec::new();
            // Rows of a bucket without a total (none in one answer) are left out with it.
            while rows.next_if(|(bucket, ..)| *bucket < start).is_some() {}
            while let Some((_, method, value)) = rows.next_if(|(bucket, ..)| *bucket == start) {
                methods.push(json!({ "method": method, "value": value }));
            }
            json!({ "start": start, "time": utc_text(start), "total": total, "methods": methods })
        })
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

/// A fleet route's parameters (`FLEET`: see the module's documentation), with `now` the end of
/// a `seconds=` range, and the values of the route's own parameters (`own_names`).
fn fleet_request(
    query: Option<&str>,
    own_names: &[&str],
    now: u64,
) -> Result<FleetRequest, ApiError> {
    request_of(query, own_names, now, true)
}

/// The parameters of a route of calls (`AGENTS`: `FLEET` without `sample_label=` and `event=`,
/// which are refused by name: calls carry no sample labels and count no event).
fn agents_request(
    query: Option<&str>,
    own_names: &[&str],
    now: u64,
) -> Result<FleetRequest, ApiError> {
    request_of(query, own_names, now, false)
}

/// [`fleet_request`] (`samples`) or [`agents_request`].
fn request_of(
    query: Option<&str>,
    own_names: &[&str],
    now: u64,
    samples: bool,
) -> Result<FleetRequest, ApiError> {
    let own_list: String = own_names.iter().map(|name| format!(", {name}")).collect();
    let mut filter = WindowFilter::default();
    let mut event = Event::Cpu;
    let (mut seconds, mut since, mut until) = (None, None, None);
    let mut own = HashMap::new();
    for (key, value) in parameters(query)? {
        match key.as_str() {
            "sample_label" | "event" if !samples => {
                return Err(bad_request(format!(
                    "{key}= counts samples, and traced values and calls are counted per call: \
                     give service, label, agent, seconds, since, until{own_list}"
                )))
            }
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
            other if samples => {
                return Err(bad_request(format!(
                    "{other}= is not a parameter of the fleet's profile: service, label, \
                     sample_label, agent, event, seconds, since, until{own_list}"
                )));
            }
            other => {
                return Err(bad_request(format!(
                    "{other}= is not a parameter of the fleet's calls: service, label, agent, \
                     seconds, since, until{own_list}"
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
    fn the_routes_of_calls_refuse_what_counts_samples_by_name() {
        let request = agents_request(
            Some("service=shop&agent=7f0c1a52-1111-4222-8333-444455556666&method=A.b()"),
            &["method"],
            1_000,
        )
        .unwrap();
        assert_eq!(request.query.filter.labels, ["service:shop"]);
        assert!(request.query.filter.sample_labels.is_empty());
        assert_eq!(request.query.filter.since, Some(940));
        assert_eq!(request.own.get("method").map(String::as_str), Some("A.b()"));
        for (query, named) in [
            ("sample_label=user%3Dalice", "sample_label= counts samples"),
            ("event=wall", "event= counts samples"),
            (
                "compare=5",
                "compare= is not a parameter of the fleet's calls",
            ),
            ("seconds=0", "seconds=\"0\""),
        ] {
            let problem = agents_request(Some(query), &["top"], 1_000).err().unwrap();
            assert!(
                problem.message.contains(named),
                "{query}: {}",
                problem.message
            );
            if query.starts_with("compare") {
                assert!(
                    problem.message.ends_with("since, until, top"),
                    "{}",
                    problem.message
                );
            }
        }
    }

    #[test]
    fn a_traced_value_is_named_as_the_json_api_names_it() {
        let value = value_json(&ValueCalls {
            method: "MptJoined.lookup(java.lang.String)".into(),
            spec: "MptJoined.lookup(java.lang.String) 1".into(),
            value_type: "string",
            value: "<b>slow</b>".into(),
            calls: 4,
            wall_total_ns: 20_000_000,
            cpu_total_ns: 16_000_000,
            wall_max_ns: 7_000_000,
            cpu_max_ns: 6_000_000,
        });
        assert_eq!(value["type"], "string");
        assert_eq!(value["value"], "<b>slow</b>");
        assert_eq!(value["calls"], 4);
        assert_eq!(value["wallMeanMs"], 5.0);
        assert_eq!(value["wallMaxMs"], 7.0);
        assert_eq!(value["wallTotalMs"], 20.0);
        assert_eq!(value["cpuMeanMs"], 4.0);
        assert_eq!(value["cpuMaxMs"], 6.0);
    }

    #[test]
    fn top_rows_are_grouped_by_bucket() {
        let buckets = buckets_of(
            vec![
                (60, "A.a".into(), 5),
                (60, "B.b".into(), 2),
                (180, "A.a".into(), 7),
            ],
            vec![(60, 9), (120, 3), (180, 7)],
        );
        assert_eq!(buckets.len(), 3);
        assert_eq!(buckets[0]["time"], "1970-01-01 00:01:00");
        assert_eq!(buckets[0]["total"], 9);
        assert_eq!(buckets[0]["methods"][1]["method"], "B.b");
        // A bucket whose stacks are not yet named has a total and no methods.
        assert_eq!(buckets[1]["methods"].as_array().unwrap().len(), 0);
        assert_eq!(buckets[2]["methods"][0]["value"], 7);
        assert_eq!(buckets[2]["total"], 7);
    }
}
