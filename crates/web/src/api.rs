//! The UI's routes: its pages and assets, and the JSON API they call (docs/ui.md lists it).
//! Every route but the login page's needs a caller (`auth::require`); queries are checked
//! strictly: an unknown parameter, a bad id or a bad view option is a 400 naming it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use openprof_analysis::profile::Profile;
use openprof_analysis::views::{self, ViewOptions, ViewRequest};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::auth::{self, Caller};
use crate::profiles::{ProfileError, Source};
use crate::Web;

/// A mutex's guard, also after a panic elsewhere (the data stays usable: each holder leaves it
/// consistent).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Creates a directory readable by its owner only (what the UI keeps is the application's).
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|error| anyhow::anyhow!("can't create {}: {error}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// The app's pages may load only its own script and style, and be framed by nobody.
const APP_POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-src 'self'; \
                          frame-ancestors 'none'; form-action 'self'; base-uri 'none'";
/// The flame graph page (the views' self-contained file) has its script and style inline and
/// fetches nothing; only the app may frame it.
const VIEW_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
                           style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'";
/// The headers of a flame graph page, a source's or the fleet's.
pub(crate) const VIEW_HEADERS: [(header::HeaderName, &str); 3] = [
    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
    (header::CONTENT_SECURITY_POLICY, VIEW_POLICY),
    (header::CACHE_CONTROL, "no-store"),
];

pub fn page(html: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, APP_POLICY),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub fn router(web: Arc<Web>) -> Router {
    let protected = Router::new()
        .route("/", get(|| async { page(INDEX.to_string()) }))
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript", APP_JS) }),
        )
        .route("/view/flame", get(flame_page))
        .route("/api/session", get(session))
        .route("/api/fleet", get(fleet))
        .route("/api/fleet/pprof", get(crate::fleet_profile::fleet_pprof))
        .route("/api/fleet/top", get(crate::fleet_profile::fleet_top))
        .route("/api/fleet/values", get(crate::fleet_profile::fleet_values))
        .route("/api/fleet/calls", get(crate::fleet_profile::fleet_calls))
        .route(
            "/view/fleet/flame",
            get(crate::fleet_profile::fleet_flame_page),
        )
        .route("/api/profile", get(profile_data))
        .route("/api/methods", get(methods))
        .route("/api/statistics", get(statistics))
        .route("/api/export", get(export))
        .route("/api/mpt", get(mpt))
        .route("/api/mpt/calls", get(mpt_calls))
        .route("/api/snapshots", get(snapshots).post(take_snapshot))
        .route("/api/actions", get(actions))
        .route("/api/agents/{agent}/command", post(command))
        .route("/api/agents/{agent}/live", post(live))
        .route("/logout", post(auth::logout))
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            auth::require,
        ));
    Router::new()
        .route("/login", get(auth::login_page).post(auth::login))
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css", APP_CSS) }),
        )
        .merge(protected)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such page or API").into_response() })
        .with_state(web)
}

/// An API error: its status and a message naming what was wrong, answered as
/// `{"error": MESSAGE}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    pub(crate) message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

pub fn error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
    error(StatusCode::BAD_REQUEST, message)
}

impl From<ProfileError> for ApiError {
    fn from(problem: ProfileError) -> ApiError {
        match problem {
            ProfileError::NotFound(message) => error(StatusCode::NOT_FOUND, message),
            ProfileError::Unreadable(message) => error(StatusCode::UNPROCESSABLE_ENTITY, message),
        }
    }
}

/// A query string's parameters, in order, percent-decoded; a parameter may repeat.
pub(crate) fn parameters(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    fn decode(text: &str) -> Result<String, ApiError> {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b'+' => out.push(b' '),
                b'%' => {
                    let hex = text
                        .get(at + 1..at + 3)
                        .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                        .ok_or_else(|| bad_request(format!("bad percent-encoding in {text:?}")))?;
                    out.push(hex);
                    at += 2;
                }
                byte => out.push(byte),
            }
            at += 1;
        }
        String::from_utf8(out).map_err(|_| bad_request(format!("{text:?} is not UTF-8")))
    }
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

/// What a profile request names: its source (and a base for a differential view) and how to
/// show it.
struct ProfileRequest {
    source: Requested,
    base: Option<Requested>,
    view: ViewRequest,
}

/// A source as asked for: a snapshot is resolved against the snapshot list.
#[derive(Clone, Copy)]
enum Requested {
    Agent(Uuid),
    Trace(Uuid),
    Snapshot(Uuid),
}

fn uuid_of(key: &str, value: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(value).map_err(|_| bad_request(format!("{key}={value:?} is not an id")))
}

fn profile_request(query: Option<&str>) -> Result<ProfileRequest, ApiError> {
    profile_request_with(query, &[]).map(|(request, _)| request)
}

/// A profile request, and the values of the route's own parameters (`extra`).
fn profile_request_with(
    query: Option<&str>,
    extra: &[&str],
) -> Result<(ProfileRequest, HashMap<String, String>), ApiError> {
    let mut own = HashMap::new();
    let mut source = None;
    let mut base = None;
    let mut view = ViewRequest::default();
    let flag = |key: &str, value: &str| -> Result<bool, ApiError> {
        match value {
            "" | "1" | "true" | "on" => Ok(true),
            "0" | "false" | "off" => Ok(false),
            _ => Err(bad_request(format!("{key}={value:?} is not true or false"))),
        }
    };
    let number = |key: &str, value: &str| -> Result<f64, ApiError> {
        value
            .parse::<f64>()
            .map_err(|_| bad_request(format!("{key}={value:?} is not a number")))
    };
    for (key, value) in parameters(query)? {
        let mut set_source = |requested: Requested| -> Result<(), ApiError> {
            if source.replace(requested).is_some() {
                return Err(bad_request(
                    "name one source: agent=, trace= or snapshot=".to_string(),
                ));
            }
            Ok(())
        };
        match key.as_str() {
            "agent" => set_source(Requested::Agent(uuid_of(&key, &value)?))?,
            "trace" => set_source(Requested::Trace(uuid_of(&key, &value)?))?,
            "snapshot" => set_source(Requested::Snapshot(uuid_of(&key, &value)?))?,
            "base" => base = Some(Requested::Snapshot(uuid_of(&key, &value)?)),
            "event" => view.event = Some(value),
            "include" => view.include.push(value),
            "exclude" => view.exclude.push(value),
            "label" => view.labels.push(value),
            "threads" => view.threads = flag(&key, &value)?,
            "reverse" => view.reverse = flag(&key, &value)?,
            "total" => view.total = flag(&key, &value)?,
            "simple" => view.simple = flag(&key, &value)?,
            "lines" => view.lines = flag(&key, &value)?,
            "from" => view.from = Some(number(&key, &value)?),
            "to" => view.to = Some(number(&key, &value)?),
            "minwidth" => view.minwidth = number(&key, &value)?,
            "title" => view.title = Some(value),
            // Only for exports: the file's format.
            "format" => {}
            other if extra.contains(&other) => {
                own.insert(key.clone(), value);
            }
            other => {
                return Err(bad_request(format!(
                    "{other:?} is not a parameter; the parameters are agent, trace, snapshot, \
                     base, event, include, exclude, label, threads, reverse, total, simple, lines, \
                     from, to, minwidth, title (and format, for an export){}",
                    if extra.is_empty() {
                        String::new()
                    } else {
                        format!(", and here {}", extra.join(", "))
                    }
                )))
            }
        }
    }
    let source = source.ok_or_else(|| bad_request("name a source: agent=, trace= or snapshot="))?;
    Ok((ProfileRequest { source, base, view }, own))
}

/// Reads a requested source's profile (blocking: the store and the reader).
fn load(web: &Web, requested: Requested) -> Result<Arc<Profile>, ApiError> {
    let store = web.store.as_ref();
    match requested {
        Requested::Agent(agent) => Ok(web
            .profiles
            .get(store, &Source::Agent { agent, upto: None })?),
        Requested::Trace(trace) => Ok(web.profiles.get(store, &Source::Trace(trace))?),
        Requested::Snapshot(id) => {
            let snapshot = web
                .snapshots
                .get(id)
                .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no snapshot {id}")))?;
            let upto = |sequence: u64| Source::Agent {
                agent: snapshot.agent,
                upto: Some(sequence),
            };
            let at_end = web.profiles.get(store, &upto(snapshot.to_sequence))?;
            let mut period = if snapshot.from_sequence == 0 {
                (*at_end).clone()
            } else {
                match web.profiles.get(store, &upto(snapshot.from_sequence)) {
                    Ok(at_start) => at_end.since(&at_start),
                    // Nothing readable before: the whole reading is the period.
                    Err(ProfileError::NotFound(_)) => (*at_end).clone(),
                    Err(other) => return Err(other.into()),
                }
            };
            period.source = format!("snapshot {}", snapshot.name);
            Ok(Arc::new(period))
        }
    }
}

/// Runs blocking work (the store, reading profiles, the collector's control client) off the
/// runtime's workers.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Err(error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")))
}

/// A request's profile, its base (a differential view's) and its view options.
type Resolved = (Arc<Profile>, Option<Arc<Profile>>, ViewOptions);

/// How far the store went for a requested source: a view of it made since is still right.
fn mark(web: &Web, requested: Requested) -> Result<String, ApiError> {
    let store = web.store.as_ref();
    Ok(match requested {
        Requested::Agent(agent) => format!(
            "agent {agent} {}",
            crate::profiles::mark_of(store, &Source::Agent { agent, upto: None })?
        ),
        Requested::Trace(trace) => format!(
            "trace {trace} {}",
            crate::profiles::mark_of(store, &Source::Trace(trace))?
        ),
        // A snapshot never changes.
        Requested::Snapshot(id) => format!("snapshot {id}"),
    })
}

/// A view (`what`, made by `make`) of a request, from the cache when its sources have nothing
/// newer.
fn cached_view(
    web: &Web,
    what: &str,
    query: &str,
    request: &ProfileRequest,
    make: impl FnOnce() -> Result<Vec<u8>, ApiError>,
) -> Result<Arc<Vec<u8>>, ApiError> {
    let mut key = format!("{what}?{query}#{}", mark(web, request.source)?);
    if let Some(base) = request.base {
        key.push_str(&mark(web, base)?);
    }
    web.views.get_or_make(key, make)
}

/// The profile (and base) of a request, with its view options checked against it.
fn resolve(web: &Web, request: &ProfileRequest) -> Result<Resolved, ApiError> {
    let options = request.view.options("").map_err(bad_request)?;
    let profile = load(web, request.source)?;
    let base = request.base.map(|base| load(web, base)).transpose()?;
    if let Some(event) = options.event {
        if !profile.events().contains(&event) {
            return Err(bad_request(format!(
                "{} has no {} samples; it has {}",
                profile.source,
                event.name(),
                profile
                    .events()
                    .iter()
                    .map(|event| event.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok((profile, base, options))
}

/// Makes a view's bytes from the request and the route's own parameters.
type MakeView = fn(&Web, &ProfileRequest, &HashMap<String, String>) -> Result<Vec<u8>, ApiError>;

/// A view of a source (made by `make` from the request and the route's own parameters
/// `own`), made once and kept until the store has more for its sources, answered with
/// `headers`.
async fn view(
    web: Arc<Web>,
    query: Option<String>,
    what: &'static str,
    own: &'static [&'static str],
    headers: [(header::HeaderName, &'static str); 3],
    make: MakeView,
) -> Response {
    let (request, parameters) = match profile_request_with(query.as_deref(), own) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let query = query.unwrap_or_default();
    let made = blocking(move || {
        cached_view(&web, what, &query, &request, || {
            make(&web, &request, &parameters)
        })
    })
    .await;
    match made {
        Ok(body) => (headers, (*body).clone()).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// A JSON answer's headers.
const JSON: [(header::HeaderName, &str); 3] = [
    (header::CONTENT_TYPE, "application/json"),
    (header::CACHE_CONTROL, "no-store"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
];

/// The flame graph and call tree page, the views' own, for the app's frame.
async fn flame_page(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    view(web, query, "flame", &[], VIEW_HEADERS, |web, request, _| {
        let (profile, base, options) = resolve(web, request)?;
        let mut html = Vec::new();
        let written = match &base {
            Some(base) => views::html::write_diff(&profile, base, &options, &mut html),
            None => views::html::write(&profile, &options, &mut html),
        };
        written.map_err(|error| bad_request(error.to_string()))?;
        Ok(html)
    })
    .await
}

/// The flame graph page's data alone, for the live view to swap in.
async fn profile_data(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    view(web, query, "data", &[], JSON, |web, request, _| {
        let (profile, base, options) = resolve(web, request)?;
        views::html::page_data(&profile, base.as_deref(), &options)
            .map_err(|error| bad_request(error.to_string()))
    })
    .await
}

/// The hottest methods of a view: self and total weight, heaviest self first.
async fn methods(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    view(web, query, "methods", &[], JSON, |web, request, _| {
        let (profile, _, options) = resolve(web, request)?;
        let folded = views::fold(&profile, &options);
        let rows: Vec<Value> = views::tree::top_methods(&folded)
            .into_iter()
            .take(200)
            .map(|method| json!({"name": method.name, "self": method.self_weight, "total": method.total}))
            .collect();
        let value = json!({
            "event": folded.event.map(|event| event.name()),
            "total": folded.total,
            "events": profile.events().iter().map(|event| event.name()).collect::<Vec<_>>(),
            "methods": rows,
        });
        Ok(value.to_string().into_bytes())
    })
    .await
}

/// A profile as a file to keep: HTML, pprof, folded stacks, speedscope or a Chrome trace (as
/// `openprof convert` writes them), or a trace's document.
async fn export(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let format_name = match parameters(query.as_deref()) {
        Ok(parameters) => parameters
            .into_iter()
            .find(|(key, _)| key == "format")
            .map(|(_, value)| value)
            .unwrap_or_else(|| "html".into()),
        Err(problem) => return problem.into_response(),
    };
    let request = match profile_request(query.as_deref()) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        if format_name == "trace" {
            let Requested::Trace(trace) = request.source else {
                return Err(bad_request(
                    "format=trace is a trace's document: name a trace=",
                ));
            };
            let mut document = Vec::new();
            web.store
                .export_trace(trace, Default::default(), &mut document)
                .map_err(|problem| error(StatusCode::NOT_FOUND, problem.to_string()))?;
            return Ok((document, "application/xml", format!("trace-{trace}.xml")));
        }
        let format = views::OutputFormat::from_name(&format_name).ok_or_else(|| {
            bad_request(format!(
                "format={format_name:?}: one of {}, trace",
                views::OutputFormat::ALL
                    .map(views::OutputFormat::name)
                    .join(", ")
            ))
        })?;
        let (profile, _, options) = resolve(&web, &request)?;
        views::check(&profile, format, &options).map_err(bad_request)?;
        let mut bytes = Vec::new();
        views::write(&profile, format, &options, &mut bytes)
            .map_err(|error| bad_request(error.to_string()))?;
        let (content_type, extension) = match format {
            views::OutputFormat::Html => ("text/html; charset=utf-8", "html"),
            views::OutputFormat::Pprof => ("application/gzip", "pb.gz"),
            views::OutputFormat::Collapsed => ("text/plain; charset=utf-8", "collapsed"),
            views::OutputFormat::Speedscope => ("application/json", "json"),
            views::OutputFormat::ChromeTrace => ("application/json", "trace.json"),
        };
        let name: String = profile
            .source
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        Ok((bytes, content_type, format!("{name}.{extension}")))
    })
    .await;
    match result {
        Ok((bytes, content_type, file)) => (
            [
                (header::CONTENT_TYPE, content_type.to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{file}\""),
                ),
                // An HTML export is the views' page: scripts must not run on the UI's origin.
                (header::CONTENT_SECURITY_POLICY, "sandbox".to_string()),
            ],
            bytes,
        )
            .into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// The statistics of a source (docs/statistics.md has their JSON): `kind=methods`,
/// `allocations`, `threads` (with each thread's timeline), `components` (with `components=`, a
/// component map), `resource` (with `name=`: everything about one method, class, package or
/// thread), or with `base=` a snapshot, `diff` of `methods`, `allocations`, `threads` or
/// `components` (`of=`). `sort=` orders methods; `top=` bounds a resource's related rows.
async fn statistics(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    const OWN: [&str; 7] = ["kind", "sort", "components", "name", "top", "bucket", "of"];
    view(web, query, "statistics", &OWN, JSON, |web, request, own| {
        Ok(statistics_of(web, request, own)?.to_string().into_bytes())
    })
    .await
}

fn statistics_of(
    web: &Web,
    request: &ProfileRequest,
    own: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    use openprof_analysis::statistics::{
        thread_timeline, ComponentMap, DiffKind, MethodSort, StatisticsIndex, StatsDiff,
    };
    let refused =
        |problem: openprof_analysis::statistics::StatsError| bad_request(problem.to_string());
    let to_json = |value: Result<Value, serde_json::Error>| {
        value.map_err(|problem| error(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string()))
    };
    let kind = own.get("kind").map(String::as_str).unwrap_or("methods");
    let map = own
        .get("components")
        .filter(|text| !text.trim().is_empty())
        .map(|text| ComponentMap::parse(text))
        .transpose()
        .map_err(|problem| bad_request(format!("components: {problem}")))?;
    let (profile, base, options) = resolve(web, request)?;
    // The index depends on the samples a view keeps (from, to, include, exclude), not on the
    // event or sorting: every lookup of one view reads it once.
    let filter = format!(
        "{:?} {:?} {:?} {:?}",
        request.view.include, request.view.exclude, request.view.from, request.view.to
    );
    let new = web
        .indexes
        .get_or_make(format!("{}#{filter}", mark(web, request.source)?), || {
            Ok::<_, ApiError>(StatisticsIndex::build(&profile, &options))
        })?;
    let event = options.event;
    match kind {
        "methods" => {
            let sort = match own.get("sort") {
                Some(name) => MethodSort::from_name(name).ok_or_else(|| {
                    bad_request(format!(
                        "sort={name:?}: one of {}",
                        MethodSort::ALL.map(MethodSort::name).join(", ")
                    ))
                })?,
                None => MethodSort::SelfValue,
            };
            to_json(serde_json::to_value(
                new.methods(event, sort, options.by_thread)
                    .map_err(refused)?,
            ))
        }
        "allocations" => to_json(serde_json::to_value(
            new.allocations(event, options.by_thread).map_err(refused)?,
        )),
        "threads" => {
            let bucket_ns = match own.get("bucket") {
                Some(text) => Some(
                    text.parse::<f64>()
                        .ok()
                        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
                        .map(|seconds| (seconds * 1e9) as u64)
                        .ok_or_else(|| bad_request(format!("bucket={text:?} is not seconds")))?,
                ),
                None => None,
            };
            let threads = new.threads(event).map_err(refused)?;
            let timeline = thread_timeline(&profile, &options, event, bucket_ns).ok();
            to_json(Ok(json!({ "threads": threads, "timeline": timeline })))
        }
        "components" => to_json(serde_json::to_value(
            new.components(event, map.as_ref(), options.by_thread)
                .map_err(refused)?,
        )),
        "resource" => {
            let name = own.get("name").ok_or_else(|| {
                bad_request("kind=resource needs name= (a method, class, package or thread)")
            })?;
            let top = match own.get("top") {
                Some(text) => text
                    .parse::<usize>()
                    .map_err(|_| bad_request(format!("top={text:?} is not a number")))?,
                None => 20,
            };
            to_json(serde_json::to_value(new.lookup(name, top).map_err(
                |problem| error(StatusCode::NOT_FOUND, problem.to_string()),
            )?))
        }
        "diff" => {
            let base = base.ok_or_else(|| bad_request("kind=diff needs base= (a snapshot)"))?;
            let of = match own.get("of").map(String::as_str).unwrap_or("methods") {
                "methods" => DiffKind::Methods,
                "allocations" => DiffKind::Allocations,
                "threads" => DiffKind::Threads,
                "components" => DiffKind::Components,
                other => {
                    return Err(bad_request(format!(
                        "of={other:?}: one of methods, allocations, threads, components"
                    )))
                }
            };
            let diff = StatsDiff::of(
                of,
                &StatisticsIndex::build(&base, &options),
                &new,
                event,
                map.as_ref(),
            )
            .map_err(refused)?;
            to_json(serde_json::to_value(diff))
        }
        other => Err(bad_request(format!(
            "kind={other:?}: one of methods, allocations, threads, components, resource, diff"
        ))),
    }
}

/// Who the caller is, and what this UI can show: `clickhouse` says whether the fleet's routes
/// on ClickHouse answer (`serve --clickhouse`), `fleetEvents` which events they sum.
async fn session(State(web): State<Arc<Web>>, Extension(caller): Extension<Caller>) -> Json<Value> {
    Json(json!({
        "name": caller.name,
        "address": caller.address.ip().to_string(),
        "clickhouse": web.config.clickhouse.is_some(),
        "fleetEvents": openprof_collector::windows::WINDOW_EVENTS,
    }))
}

/// The fleet: nodes → processes → agents → traces, each agent with its live state.
async fn fleet(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let mut filter = crate::fleet::FleetFilter::default();
    match parameters(query.as_deref()) {
        Ok(parameters) => {
            for (key, value) in parameters {
                match key.as_str() {
                    "filter" => match crate::fleet::FleetFilter::parse(&value) {
                        Ok(parsed) => filter = parsed,
                        Err(problem) => return bad_request(problem).into_response(),
                    },
                    other => {
                        return bad_request(format!(
                            "{other:?} is not a parameter; the only one is filter"
                        ))
                        .into_response()
                    }
                }
            }
        }
        Err(problem) => return problem.into_response(),
    }
    let result = blocking(move || {
        let catalog = web
            .store
            .catalog()
            .map_err(|problem| error(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string()))?;
        let connected: Vec<Uuid> = web.connected.as_ref().map(|now| now()).unwrap_or_default();
        let agents: Vec<Value> = catalog
            .agents
            .iter()
            .filter(|agent| filter.matches(agent))
            .map(|agent| {
                let traces: Vec<Value> = catalog
                    .traces
                    .iter()
                    .filter(|trace| trace.agent == agent.agent)
                    .map(|trace| {
                        json!({
                            "trace": trace.trace,
                            "elements": trace.elements,
                            "duplicates": trace.duplicates,
                            "gaps": trace.gaps.iter().map(|(first, last)| json!([first.to_string(), last.to_string()])).collect::<Vec<_>>(),
                            "ended": trace.ended,
                        })
                    })
                    .collect();
                let process = agent.process.and_then(|process| {
                    catalog.processes.iter().find(|entry| entry.process == process)
                });
                json!({
                    "agent": agent.agent,
                    "hostname": agent.hostname,
                    "pid": agent.pid,
                    "process": process.map(|process| json!({"process": process.process, "node": process.node, "name": process.name})),
                    "format": agent.format,
                    "labels": agent.labels.iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>(),
                    "frames": agent.frames,
                    "bytes": agent.bytes,
                    "lastSequence": agent.last_sequence,
                    "clock": agent.clock.map(|clock| json!({"offsetNs": clock.offset_ns, "errorNs": clock.error_ns, "samples": clock.samples})),
                    "lostFrames": agent.lost_frames,
                    "lostBytes": agent.lost_bytes,
                    "finished": agent.finished,
                    "connected": connected.contains(&agent.agent),
                    "traces": traces,
                })
            })
            .collect();
        Ok(json!({
            "collector": web.config.collector.is_some(),
            "nodes": catalog.nodes.iter().map(|node| json!({"node": node.node, "hostname": node.hostname})).collect::<Vec<_>>(),
            "agents": agents,
        }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// Method parameter tracing's values of a source, slowest first per method.
async fn mpt(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let request = match profile_request(query.as_deref()) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let (tables, samples) = match request.source {
            Requested::Agent(agent) => {
                let profile = crate::profiles::mpt_of_agent(web.store.as_ref(), agent)?;
                let samples = crate::profiles::mpt_samples_by_value(&profile);
                (profile.mpt, samples)
            }
            Requested::Trace(trace) => (
                crate::profiles::mpt_of_trace(web.store.as_ref(), trace)?,
                HashMap::new(),
            ),
            Requested::Snapshot(_) => {
                return Err(bad_request(
                    "parameter values are shown per agent or trace, not per snapshot",
                ))
            }
        };
        Ok(crate::profiles::mpt_json(&tables, &samples))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// One traced value's calls over time (`method`, `spec`, `value` as `/api/mpt` names them): a
/// trace's calls exactly, an agent's per dump.
async fn mpt_calls(State(web): State<Arc<Web>>, RawQuery(query): RawQuery) -> Response {
    let (request, own) = match profile_request_with(query.as_deref(), &["method", "spec", "value"])
    {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let named = |key: &str| {
            own.get(key).cloned().ok_or_else(|| {
                bad_request(format!(
                    "name the value: method, spec and value ({key} is missing)"
                ))
            })
        };
        let selected = openprof_analysis::SelectedValue {
            method: named("method")?,
            spec: named("spec")?,
            value: named("value")?,
        };
        let (exact, points) = match request.source {
            Requested::Agent(agent) => {
                let profile = crate::profiles::mpt_of_agent(web.store.as_ref(), agent)?;
                (
                    false,
                    crate::profiles::mpt_calls_by_dump(&profile, &selected),
                )
            }
            Requested::Trace(trace) => (
                true,
                crate::profiles::mpt_calls_of_trace(web.store.as_ref(), trace, selected)?,
            ),
            Requested::Snapshot(_) => {
                return Err(bad_request(
                    "parameter values are shown per agent or trace, not per snapshot",
                ))
            }
        };
        Ok(json!({ "exact": exact, "points": points }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

async fn snapshots(State(web): State<Arc<Web>>) -> Json<Value> {
    Json(json!({ "snapshots": web.snapshots.list() }))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotRequest {
    agent: Uuid,
    name: String,
}

/// Takes a snapshot of an agent now: a live agent is asked to dump first, so that the snapshot
/// holds what it sampled up to this moment.
async fn take_snapshot(
    State(web): State<Arc<Web>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<SnapshotRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(request) = match body {
        Ok(body) => body,
        Err(rejection) => return bad_request(rejection.body_text()).into_response(),
    };
    let name = request.name.trim().to_string();
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return bad_request("a snapshot's name is 1 to 200 printable characters").into_response();
    }
    let result = blocking(move || {
        let live = web
            .connected
            .as_ref()
            .is_some_and(|now| now().contains(&request.agent));
        if live {
            let dumped = crate::control::send(&web, request.agent, openprof_format::wire::Command::DumpProfile);
            if !dumped.ok {
                return Err(error(StatusCode::CONFLICT, format!("the agent could not dump: {}", dumped.message)));
            }
            // The dump's output reaches the store shortly after the reply.
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        let catalog = web
            .store
            .catalog()
            .map_err(|problem| error(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string()))?;
        let agent = catalog
            .agents
            .iter()
            .find(|agent| agent.agent == request.agent)
            .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no agent {}", request.agent)))?;
        if agent.format == "x" {
            return Err(bad_request(
                "snapshots are of HPROF output (format=a or b); a trace marks its own with the snapshot command",
            ));
        }
        web.snapshots
            .take(&name, request.agent, agent.last_sequence, &caller.describe())
            .map_err(|problem| error(StatusCode::CONFLICT, problem.to_string()))
    })
    .await;
    match result {
        Ok(snapshot) => (StatusCode::CREATED, Json(json!(snapshot))).into_response(),
        Err(problem) => problem.into_response(),
    }
}

async fn actions(State(web): State<Arc<Web>>) -> Json<Value> {
    Json(json!({ "actions": web.audit.recent() }))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandRequest {
    command: String,
    #[serde(default)]
    argument: Option<String>,
}

/// A command to a live agent, as `openprof control` names them; logged with who asked.
async fn command(
    State(web): State<Arc<Web>>,
    Extension(caller): Extension<Caller>,
    UrlPath(agent): UrlPath<String>,
    body: Result<Json<CommandRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let agent = match uuid_of("agent", &agent) {
        Ok(agent) => agent,
        Err(problem) => return problem.into_response(),
    };
    let Json(request) = match body {
        Ok(body) => body,
        Err(rejection) => return bad_request(rejection.body_text()).into_response(),
    };
    let result = blocking(move || {
        let argument = request
            .argument
            .as_deref()
            .filter(|text| !text.trim().is_empty());
        Ok(crate::control::act(
            &web,
            &caller,
            agent,
            request.command.trim(),
            argument,
        ))
    })
    .await;
    match result {
        Ok(outcome) => {
            let status = if outcome.ok {
                StatusCode::OK
            } else {
                StatusCode::CONFLICT
            };
            (status, Json(json!(outcome))).into_response()
        }
        Err(problem) => problem.into_response(),
    }
}

/// The live view's heartbeat: has a live agent dump what it sampled (at most every
/// `LIVE_DUMP_EVERY`), and says how far the agent's stored output goes.
async fn live(State(web): State<Arc<Web>>, UrlPath(agent): UrlPath<String>) -> Response {
    let agent = match uuid_of("agent", &agent) {
        Ok(agent) => agent,
        Err(problem) => return problem.into_response(),
    };
    let result = blocking(move || {
        let connected = web
            .connected
            .as_ref()
            .is_some_and(|now| now().contains(&agent));
        let dumped = if connected {
            web.live.refresh(&web, agent)
        } else {
            None
        };
        let catalog = web
            .store
            .catalog()
            .map_err(|problem| error(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string()))?;
        let entry = catalog
            .agents
            .iter()
            .find(|entry| entry.agent == agent)
            .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no agent {agent}")))?;
        Ok(json!({
            "connected": connected,
            "lastSequence": entry.last_sequence,
            "dumped": dumped,
        }))
    })
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}
