//! The routes: the page and its assets, `/metrics`, and the JSON API. Each
//! API route is one control-socket request, answered by the supervisor's
//! loop; its reply is the JSON the control socket answers with (without
//! `ok`), and a refusal is a problem document with the same message.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, get, post};
use mcr_core::control::{ControlError, ErrorKind, RateHistory, Reply, Request, RuleStats, RuleStatus, StatsReport};
use mcr_core::control::{EventRecord, WorkerStatus};
use mcr_core::rule::Rule;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::MAX_BODY_BYTES;
use super::access::{Access, Needs, Peer};
use super::app::App;
use super::problem::Problem;
use crate::supervisor::control::Call;

/// The page and its assets, built into the binary.
const INDEX_HTML: &str = include_str!("../../../assets/index.html");
const APP_JS: &str = include_str!("../../../assets/app.js");
const APP_CSS: &str = include_str!("../../../assets/app.css");
/// The API's description.
pub const OPENAPI: &str = include_str!("openapi.json");

type Answer = Result<Response, Problem>;

/// Every route.
pub fn router(calls: mpsc::Sender<Call>, access: Arc<Access>, tls: bool) -> Router {
    let app = App { calls, access };
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/metrics", get(metrics))
        .route("/api/openapi.json", get(openapi))
        .route("/api/problems", get(problems))
        .route("/api/version", reads(|| Request::Version { protocol: None }))
        .route("/api/overview", get(overview))
        .route("/api/rules", reads(|| Request::List {}).post(add))
        .route("/api/rules/{name}", get(show).put(put).delete(remove))
        .route("/api/rules/{name}/switch", post(switch))
        .route("/api/store", reads(|| Request::Store {}))
        .route("/api/role", reads(|| Request::Role { set: None }).put(role))
        .route("/api/stats", reads(|| Request::Stats {}))
        .route("/api/workers", reads(|| Request::Workers {}))
        .route("/api/events", reads(|| Request::Events {}))
        .route("/api/history", reads(|| Request::History {}))
        .route("/api/config", reads(|| Request::Config {}))
        .route("/api/reload", post(reload))
        .route("/api/save", post(save))
        // The NMOS APIs route their own paths (each with and without its
        // trailing slash).
        .route("/x-nmos", any(super::nmos::serve))
        .route("/x-nmos/", any(super::nmos::serve))
        .route("/x-nmos/{*rest}", any(super::nmos::serve))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(move |req, next| headers(req, next, tls)))
        // What the page polls is JSON of a few KB per rule: gzip (when the
        // client takes it) makes it about a tenth.
        .layer(
            tower_http::compression::CompressionLayer::new()
                .gzip(true)
                .quality(tower_http::CompressionLevel::Fastest),
        )
        .with_state(app)
}

/// The router for a connection beyond [`super::MAX_CLIENTS`].
pub fn busy() -> Router {
    Router::new().fallback(|| async {
        let mut r = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!("{} clients are connected already; try again later", super::MAX_CLIENTS),
        )
        .into_response();
        // Answered, then closed: it keeps nothing open.
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    })
}

/// Headers on every answer: no sniffing, no framing, no caching of live
/// data, and the page's content security policy.
async fn headers(req: axum::extract::Request, next: Next, tls: bool) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
        ),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    if tls {
        h.insert(
            "strict-transport-security",
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    r
}

fn with_type(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

async fn index() -> Response {
    with_type(INDEX_HTML, "text/html; charset=utf-8")
}

async fn app_js() -> Response {
    with_type(APP_JS, "text/javascript; charset=utf-8")
}

async fn app_css() -> Response {
    with_type(APP_CSS, "text/css; charset=utf-8")
}

async fn openapi() -> Response {
    with_type(OPENAPI, "application/json")
}

/// What each kind of problem means (`type` in a problem document is
/// `/api/problems#KIND`).
async fn problems() -> Response {
    json(
        StatusCode::OK,
        &serde_json::json!({
            "bad_request": "The request is not JSON, not of the right shape, or names a field MCR does not know; the detail says which.",
            "too_large": "The request body is longer than 1 MiB.",
            "unauthorized": "No bearer token, or not the one in mcrd's --http-token-file.",
            "forbidden": "Changes over HTTP are off (no --http-token-file), or a client beyond this host asked without a token file to check it by.",
            "not_found": "No such rule, or no such path.",
            "method_not_allowed": "The path does not take that method.",
            "invalid_rule": "The rule was refused; `field` names the part at fault.",
            "invalid_request": "The request names something the rule does not have or cannot do.",
            "invalid_config": "The config file could not be read or is not valid (PATH:LINE:COLUMN: what); nothing changed.",
            "internal": "mcrd could not carry out a valid request (a file it could not write, say).",
            "busy": "Too many clients are connected; try again after Retry-After.",
            "shutting_down": "mcrd is stopping.",
        }),
    )
}

async fn not_found(method: Method, uri: axum::http::Uri) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no {method} {}: the API is described at /api/openapi.json", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method} (see /api/openapi.json)", uri.path()),
    )
}

/// Who asks, and how.
#[derive(Debug)]
struct Asker {
    peer: Peer,
    headers: HeaderMap,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Asker {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Problem> {
        let peer = parts.extensions.get::<Peer>().copied().ok_or_else(|| {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the client's address is unknown",
            )
        })?;
        Ok(Asker {
            peer,
            headers: parts.headers.clone(),
        })
    }
}

impl App {
    fn may(&self, who: &Asker, needs: Needs) -> Result<(), Problem> {
        self.access.check(who.peer.0, &who.headers, needs)
    }
}

fn json<T: Serialize>(status: StatusCode, v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(body) => {
            let mut r = (status, body).into_response();
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Err(e) => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()).into_response(),
    }
}

fn ok(reply: &Reply) -> Answer {
    Ok(json(StatusCode::OK, reply))
}

/// A request body, read whole up to [`MAX_BODY_BYTES`].
async fn body_of(body: Body) -> Result<Bytes, Problem> {
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| {
        let e = e.into_inner();
        if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the request body is longer than {MAX_BODY_BYTES} bytes"),
            )
        } else {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the request body could not be read: {e}"),
            )
        }
    })
}

/// A rule's name from the path; a path that is not one (bad
/// percent-encoding, say) is refused as a problem, like every refusal.
#[derive(Debug)]
struct RuleName(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RuleName {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Problem> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(name)) => Ok(RuleName(name)),
            Err(e) => Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the rule's name in the path: {}", e.body_text()),
            )),
        }
    }
}

/// A JSON body of type `T`; an empty body is `T`'s default when `empty`
/// is given.
fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str, empty: Option<T>) -> Result<T, Problem> {
    if bytes.trim_ascii().is_empty()
        && let Some(e) = empty
    {
        return Ok(e);
    }
    serde_json::from_slice(bytes)
        .map_err(|e| Problem::new(StatusCode::BAD_REQUEST, "bad_request", format!("not {what}: {e}")))
}

async fn metrics(State(app): State<App>, who: Asker) -> Answer {
    app.may(&who, Needs::Read)?;
    let Reply::Stats(stats) = app.ask(Request::Stats {}).await? else {
        return Err(unexpected());
    };
    let Reply::Rules { rules, .. } = app.ask(Request::List {}).await? else {
        return Err(unexpected());
    };
    let Reply::Workers { workers } = app.ask(Request::Workers {}).await? else {
        return Err(unexpected());
    };
    let text = mcr_core::metrics::render(env!("CARGO_PKG_VERSION"), &stats, &rules, &workers);
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(mcr_core::metrics::CONTENT_TYPE),
    );
    Ok(r)
}

fn unexpected() -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the daemon answered with another kind of reply",
    )
}

/// A route that reads: one request to the supervisor, its reply as JSON.
fn reads(request: fn() -> Request) -> MethodRouter<App> {
    get(move |State(app): State<App>, who: Asker| async move {
        app.may(&who, Needs::Read)?;
        ok(&app.ask(request()).await?)
    })
}

/// Everything the page shows, in one answer.
#[derive(Debug, Serialize)]
struct Overview {
    daemon: String,
    rules: Vec<RuleStatus>,
    stats: Box<StatsReport>,
    workers: Vec<WorkerStatus>,
    history: RateHistory,
    events: Vec<EventRecord>,
    /// The NMOS node, when mcrd is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    nmos: Option<mcr_core::nmos::NmosGlance>,
}

async fn overview(State(app): State<App>, who: Asker) -> Answer {
    app.may(&who, Needs::Read)?;
    let (
        Reply::Rules { rules, .. },
        Reply::Stats(stats),
        Reply::Workers { workers },
        Reply::History(history),
        Reply::Events { events },
    ) = (
        app.ask(Request::List {}).await?,
        app.ask(Request::Stats {}).await?,
        app.ask(Request::Workers {}).await?,
        app.ask(Request::History {}).await?,
        app.ask(Request::Events {}).await?,
    )
    else {
        return Err(unexpected());
    };
    // (Not a node: an error, and no NMOS on the page.)
    let nmos = match app.ask(Request::NmosGlance {}).await {
        Ok(Reply::NmosGlance(g)) => Some(g),
        _ => None,
    };
    Ok(json(
        StatusCode::OK,
        &Overview {
            daemon: env!("CARGO_PKG_VERSION").into(),
            rules,
            stats,
            workers,
            history,
            events,
            nmos,
        },
    ))
}

/// `GET /api/rules/NAME`: the rule, how it stands and its counters.
#[derive(Debug, Serialize)]
struct Shown {
    result: &'static str,
    #[serde(flatten)]
    status: RuleStatus,
    stats: Option<RuleStats>,
}

async fn show(State(app): State<App>, who: Asker, RuleName(name): RuleName) -> Answer {
    app.may(&who, Needs::Read)?;
    let Reply::Rules { mut rules, .. } = app.ask(Request::List {}).await? else {
        return Err(unexpected());
    };
    let Some(i) = rules.iter().position(|r| r.rule.name == name) else {
        let known = rules.iter().map(|r| r.rule.name.as_str());
        return Err(mcr_core::control::no_such_rule(&name, known).into());
    };
    let status = rules.swap_remove(i);
    let Reply::Stats(stats) = app.ask(Request::Stats {}).await? else {
        return Err(unexpected());
    };
    let stats = stats.rules.into_iter().find(|s| s.name == name);
    Ok(json(
        StatusCode::OK,
        &Shown {
            result: "rule",
            status,
            stats,
        },
    ))
}

async fn add_rule(app: &App, rule: Rule) -> Answer {
    let reply = app.ask(Request::Add { rule }).await?;
    let status = match &reply {
        Reply::Added { replaced: false, .. } => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    let mut r = json(status, &reply);
    if let Reply::Added {
        rule, replaced: false, ..
    } = &reply
        && let Ok(v) = HeaderValue::from_str(&format!("/api/rules/{}", percent_encode(rule)))
    {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// A rule name as one path segment.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn add(State(app): State<App>, who: Asker, body: Body) -> Answer {
    app.may(&who, Needs::Change)?;
    let rule = decode::<Rule>(&body_of(body).await?, "a rule", None)?;
    add_rule(&app, rule).await
}

async fn put(State(app): State<App>, who: Asker, RuleName(name): RuleName, body: Body) -> Answer {
    app.may(&who, Needs::Change)?;
    let mut v = decode::<serde_json::Value>(&body_of(body).await?, "a rule", None)?;
    if let Some(o) = v.as_object_mut() {
        match o.get("name") {
            None => {
                o.insert("name".into(), serde_json::Value::String(name.clone()));
            }
            Some(n) if n.as_str() != Some(&name) => {
                return Err(ControlError::new(
                    ErrorKind::InvalidRule,
                    format!("the rule's name {n} is not the one in the path, `{name}`"),
                )
                .into_problem_at("name"));
            }
            Some(_) => {}
        }
    }
    let rule = serde_json::from_value::<Rule>(v)
        .map_err(|e| Problem::new(StatusCode::BAD_REQUEST, "bad_request", format!("not a rule: {e}")))?;
    add_rule(&app, rule).await
}

trait AtField {
    fn into_problem_at(self, field: &str) -> Problem;
}

impl AtField for ControlError {
    fn into_problem_at(self, field: &str) -> Problem {
        Problem::from(self).at(field)
    }
}

async fn remove(State(app): State<App>, who: Asker, RuleName(name): RuleName) -> Answer {
    app.may(&who, Needs::Change)?;
    ok(&app.ask(Request::Remove { name }).await?)
}

/// `POST /api/rules/NAME/switch`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchBody {
    /// The input's number from 1, its text, or `auto`; none is `auto`.
    #[serde(default)]
    input: Option<String>,
}

async fn switch(State(app): State<App>, who: Asker, RuleName(rule): RuleName, body: Body) -> Answer {
    app.may(&who, Needs::Change)?;
    let b = decode::<SwitchBody>(
        &body_of(body).await?,
        "a switch (`{\"input\": \"2\"}`)",
        Some(SwitchBody::default()),
    )?;
    ok(&app.ask(Request::Switch { rule, input: b.input }).await?)
}

/// `PUT /api/role`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleBody {
    /// `active` or `standby`.
    role: mcr_core::config::Role,
}

async fn role(State(app): State<App>, who: Asker, body: Body) -> Answer {
    app.may(&who, Needs::Change)?;
    let b = decode::<RoleBody>(&body_of(body).await?, "a role (`{\"role\": \"active\"}`)", None)?;
    ok(&app.ask(Request::Role { set: Some(b.role) }).await?)
}

async fn reload(State(app): State<App>, who: Asker, body: Body) -> Answer {
    app.may(&who, Needs::Change)?;
    decode::<Empty>(&body_of(body).await?, "an empty object", Some(Empty {}))?;
    ok(&app.ask(Request::Reload {}).await?)
}

/// A body that may hold nothing (`{}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// `POST /api/save`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveBody {
    /// Where, as for `mcrctl save --to`.
    #[serde(default)]
    to: Option<std::path::PathBuf>,
}

async fn save(State(app): State<App>, who: Asker, body: Body) -> Answer {
    app.may(&who, Needs::Change)?;
    let b = decode::<SaveBody>(
        &body_of(body).await?,
        "a save (`{\"to\": \"/etc/mcr/x.toml\"}` or nothing)",
        Some(SaveBody::default()),
    )?;
    ok(&app.ask(Request::Save { to: b.to }).await?)
}

/// The routes the router serves, as `METHOD PATH` with `{name}` for the
/// rule's name: what the OpenAPI description must list, no more, no less.
#[cfg(test)]
pub const ROUTES: &[&str] = &[
    "GET /",
    "GET /assets/app.js",
    "GET /assets/app.css",
    "GET /metrics",
    "GET /api/openapi.json",
    "GET /api/problems",
    "GET /api/version",
    "GET /api/overview",
    "GET /api/rules",
    "POST /api/rules",
    "GET /api/rules/{name}",
    "PUT /api/rules/{name}",
    "DELETE /api/rules/{name}",
    "POST /api/rules/{name}/switch",
    "GET /api/store",
    "GET /api/role",
    "PUT /api/role",
    "GET /api/stats",
    "GET /api/workers",
    "GET /api/events",
    "GET /api/history",
    "GET /api/config",
    "POST /api/reload",
    "POST /api/save",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_description_lists_every_route_and_no_other() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        assert!(
            doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
            "an OpenAPI 3 document"
        );
        let mut described = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("a path item") {
                if method == "parameters" {
                    continue;
                }
                described.push(format!("{} {path}", method.to_uppercase()));
                assert!(op["responses"].is_object(), "{method} {path} has responses");
                assert!(op["summary"].is_string(), "{method} {path} has a summary");
            }
        }
        described.sort();
        let mut routed: Vec<String> = ROUTES.iter().map(|s| s.to_string()).collect();
        routed.sort();
        assert_eq!(described, routed);
        // Every reference resolves.
        let text = OPENAPI;
        for (i, _) in text.match_indices("\"$ref\"") {
            let rest = &text[i..];
            let start = rest.find("#/").expect("a local reference");
            let end = rest[start..].find('"').expect("its end") + start;
            let pointer = &rest[start + 1..end];
            assert!(doc.pointer(pointer).is_some(), "unresolved $ref {pointer}");
        }
    }

    #[test]
    fn a_rule_name_is_one_path_segment() {
        assert_eq!(percent_encode("feed-a_1.x~"), "feed-a_1.x~");
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }
}
