//! Who may use the UI: whoever proves the control credential, once, on the login page (then a
//! session cookie: HttpOnly, SameSite=Strict, 12 hours, and Secure over HTTPS) or with each API
//! request (`Authorization: Bearer TOKEN`). Everything but the login page and its style needs
//! one of them; a request with neither gets 401 (the API) or the login page (a page), and no
//! data.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;

use crate::Web;

/// The session cookie's name.
pub const COOKIE: &str = "openprof_session";
/// How long a login lasts.
const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);
/// How long a wrong credential is answered after: guessing stays slow.
const REFUSAL_DELAY: Duration = Duration::from_millis(300);

/// Wrong credentials an address may give in [`GUESS_WINDOW`] before its next tries are answered
/// 429 without being checked, until the window ends.
pub const MAX_WRONG: u32 = 20;
pub const GUESS_WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most: past it, those whose window ended are forgotten first.
const ADDRESSES_KEPT: usize = 10_000;

/// Wrong credentials by address (bearer tokens and the login page alike): guessing is throttled
/// per address, and logged as a count every few seconds rather than a line a guess.
#[derive(Default)]
pub struct Guesses {
    /// Each address's window start and wrong credentials in it.
    wrong: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    warnings: openprof_collector::repeated_warnings::RepeatedWarnings,
}

impl Guesses {
    /// How long `address` must still wait before its credential is checked again, if it must.
    pub fn throttled(&self, address: IpAddr) -> Option<Duration> {
        let wrong = crate::api::lock(&self.wrong);
        let (since, count) = wrong.get(&address)?;
        let left = GUESS_WINDOW.checked_sub(since.elapsed())?;
        (*count >= MAX_WRONG).then_some(left)
    }

    /// Counts a wrong credential from `address`, and says so in the log (in counts).
    pub fn wrong(&self, address: IpAddr, how: &str) {
        {
            let mut wrong = crate::api::lock(&self.wrong);
            if wrong.len() >= ADDRESSES_KEPT {
                wrong.retain(|_, (since, _)| since.elapsed() < GUESS_WINDOW);
                if wrong.len() >= ADDRESSES_KEPT {
                    wrong.clear();
                }
            }
            let entry = wrong.entry(address).or_insert((Instant::now(), 0));
            if entry.0.elapsed() >= GUESS_WINDOW {
                *entry = (Instant::now(), 0);
            }
            entry.1 = entry.1.saturating_add(1);
        }
        self.warnings.warn(
            "wrong credential",
            format_args!("web UI: a wrong credential ({how}) from {address}"),
        );
    }

    /// Logs the counts of the wrong credentials since they were last logged.
    pub fn flush(&self) {
        self.warnings.flush();
    }
}

/// The answer to a throttled address.
fn too_many(left: Duration) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, left.as_secs().max(1).to_string())],
        axum::Json(serde_json::json!({
            "error": format!("too many wrong credentials from this address: try again in {} s", left.as_secs().max(1))
        })),
    )
        .into_response()
}

/// Who a request comes from, for the action log.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The name given at login (not checked: anyone with the credential may give any), or
    /// `api` for a bearer token.
    pub name: String,
    pub address: SocketAddr,
}

impl Caller {
    pub fn describe(&self) -> String {
        format!("{} from {}", self.name, self.address.ip())
    }
}

struct Session {
    name: String,
    expires: Instant,
}

/// The logged-in browsers, by session id.
#[derive(Default)]
pub struct Sessions {
    sessions: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    fn open(&self, name: String) -> String {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the operating system's random numbers");
        let id: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut sessions = crate::api::lock(&self.sessions);
        let now = Instant::now();
        sessions.retain(|_, session| session.expires > now);
        sessions.insert(
            id.clone(),
            Session {
                name,
                expires: now + SESSION_LIFE,
            },
        );
        id
    }

    fn name_of(&self, id: &str) -> Option<String> {
        let sessions = crate::api::lock(&self.sessions);
        sessions
            .get(id)
            .filter(|session| session.expires > Instant::now())
            .map(|session| session.name.clone())
    }

    fn close(&self, id: &str) {
        crate::api::lock(&self.sessions).remove(id);
    }
}

/// Compares without an early exit, so that the time taken says nothing about the credential.
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut difference = given.len() ^ expected.len();
    for (index, byte) in expected.iter().enumerate() {
        difference |= usize::from(byte ^ given.get(index).copied().unwrap_or(!byte));
    }
    difference == 0
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

/// The caller a request proves itself to be, if it does.
fn caller(web: &Web, headers: &HeaderMap, address: SocketAddr) -> Option<Caller> {
    if let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    {
        return same_secret(token.trim().as_bytes(), web.config.credential.as_bytes()).then(|| {
            Caller {
                name: "api".into(),
                address,
            }
        });
    }
    let id = cookie_value(headers, COOKIE)?;
    web.sessions
        .name_of(id)
        .map(|name| Caller { name, address })
}

/// Lets a request through only with a session or a bearer token. A state-changing request must
/// also be JSON: a form on another site cannot send one without the browser asking first.
pub async fn require(
    State(web): State<Arc<Web>>,
    ConnectInfo(address): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    let api = path.starts_with("/api/");
    let bearer = request.headers().contains_key(header::AUTHORIZATION);
    if bearer {
        if let Some(left) = web.guesses.throttled(address.ip()) {
            return too_many(left);
        }
    }
    let Some(caller) = caller(&web, request.headers(), address) else {
        if bearer {
            web.guesses.wrong(address.ip(), "a bearer token");
        }
        return if api {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                axum::Json(serde_json::json!({"error": "log in first, or give Authorization: Bearer <control token>"})),
            )
                .into_response()
        } else {
            Redirect::to("/login").into_response()
        };
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/json"));
        if !json {
            return (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                axum::Json(
                    serde_json::json!({"error": "send JSON (Content-Type: application/json)"}),
                ),
            )
                .into_response();
        }
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
    #[serde(default)]
    name: String,
}

const LOGIN_PAGE: &str = include_str!("../assets/login.html");

pub async fn login_page() -> Response {
    crate::api::page(LOGIN_PAGE.replace("<!--MESSAGE-->", ""))
}

/// The session cookie's `Set-Cookie` value: sent back only to this UI, never to a script, never
/// from another site, and over HTTPS only when the UI is served so.
fn session_cookie(web: &Web, id: &str, max_age: Duration) -> String {
    let secure = if web.config.tls.is_some() {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        max_age.as_secs()
    )
}

/// Checks the credential; a session cookie on success, the login page again (after a delay)
/// on failure.
pub async fn login(
    State(web): State<Arc<Web>>,
    ConnectInfo(address): ConnectInfo<SocketAddr>,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Some(left) = web.guesses.throttled(address.ip()) {
        return too_many(left);
    }
    if !same_secret(
        form.token.trim().as_bytes(),
        web.config.credential.as_bytes(),
    ) {
        tokio::time::sleep(REFUSAL_DELAY).await;
        web.guesses.wrong(address.ip(), "the login page");
        let mut response = crate::api::page(LOGIN_PAGE.replace(
            "<!--MESSAGE-->",
            "<p class=\"error\" id=\"refused\">That is not the control credential.</p>",
        ));
        *response.status_mut() = StatusCode::UNAUTHORIZED;
        return response;
    }
    let name: String = form
        .name
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    let name = if name.is_empty() {
        "anonymous".to_string()
    } else {
        name
    };
    let id = web.sessions.open(name);
    (
        [(header::SET_COOKIE, session_cookie(&web, &id, SESSION_LIFE))],
        Redirect::to("/"),
    )
        .into_response()
}

pub async fn logout(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie_value(&headers, COOKIE) {
        web.sessions.close(id);
    }
    (
        [(header::SET_COOKIE, session_cookie(&web, "", Duration::ZERO))],
        axum::Json(serde_json::json!({"ok": true})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"abcd", b"abc"));
        assert!(!same_secret(b"", b"abc"));
        assert!(same_secret(b"", b""));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; openprof_session=xyz; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_value(&headers, COOKIE), Some("xyz"));
        assert_eq!(cookie_value(&headers, "c"), None);
    }

    #[test]
    fn sessions_expire_and_close() {
        let sessions = Sessions::default();
        let id = sessions.open("ann".into());
        assert_eq!(sessions.name_of(&id).as_deref(), Some("ann"));
        assert_eq!(sessions.name_of("nope"), None);
        sessions.close(&id);
        assert_eq!(sessions.name_of(&id), None);
    }
}
