//! The NMOS APIs under `/x-nmos/`: IS-04 v1.3's Node API and IS-05
//! v1.1's Connection API, answered from the supervisor's view of the
//! rules (`Request::Nmos`).
//!
//! As the specifications ask: every path answers with and without its
//! trailing slash (no redirect: a client that PATCHes `staged/` keeps its
//! body); listings are arrays of names ending in `/`; errors are `{code,
//! error, debug}`; every answer carries CORS headers, and an OPTIONS
//! preflight is answered for every path; JSON is `application/json` and
//! transport files `application/sdp`, exactly.

use axum::body::Body;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcr_core::control::Reply;
use mcr_core::control::Request;
use mcr_core::nmos::{CONNECTION_API, NODE_API, NmosView};
use serde_json::{Value, json};

use super::access::{Needs, Peer};
use super::app::App;
use super::problem::Problem;

/// An NMOS error: `{code, error, debug}`.
fn error(status: StatusCode, what: impl Into<String>) -> Response {
    let body = json!({"code": status.as_u16(), "error": what.into(), "debug": null});
    (status, json_body(&body)).into_response()
}

/// A problem (from the access check or the supervisor) as an NMOS error.
fn from_problem(p: &Problem) -> Response {
    error(p.status, p.detail.clone())
}

fn json_body(v: &Value) -> ([(header::HeaderName, HeaderValue); 1], String) {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        v.to_string(),
    )
}

fn ok(v: &Value) -> Response {
    (StatusCode::OK, json_body(v)).into_response()
}

/// A listing: the names, each ending in `/`.
fn listing(names: &[&str]) -> Response {
    ok(&json!(names.iter().map(|n| format!("{n}/")).collect::<Vec<_>>()))
}

/// The CORS headers every answer carries.
fn cors(r: &mut Response, req: &HeaderMap) {
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, PUT, POST, PATCH, HEAD, OPTIONS, DELETE"),
    );
    let asked = req
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or(HeaderValue::from_static("Content-Type, Accept, Authorization"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("3600"));
}

/// Every request under `/x-nmos`.
pub async fn serve(State(app): State<App>, req: HttpRequest) -> Response {
    let headers = req.headers().clone();
    let mut r = answer(&app, req).await;
    cors(&mut r, &headers);
    r
}

async fn answer(app: &App, req: HttpRequest) -> Response {
    let method = req.method().clone();
    if method == Method::OPTIONS {
        return StatusCode::OK.into_response();
    }
    let Some(peer) = req.extensions().get::<Peer>().copied() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the client's address is unknown");
    };
    let needs = if matches!(method, Method::GET | Method::HEAD) {
        Needs::Read
    } else {
        Needs::Change
    };
    if let Err(p) = app.access.check_nmos(peer.0, req.headers(), needs) {
        return from_problem(&p);
    }
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path
        .trim_start_matches("/x-nmos")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let body: Body = req.into_body();
    let is_read = matches!(method, Method::GET | Method::HEAD);
    // IS-05 changes: PATCH staged, POST bulk.
    if matches!(method, Method::PATCH | Method::POST) {
        return change(app, &method, &parts, body, &path).await;
    }
    // The listings above the versions need no view.
    match parts.as_slice() {
        [] => return read_only(is_read, &path, || listing(&["node", "connection"])),
        ["node"] => return read_only(is_read, &path, || listing(&[NODE_API])),
        ["connection"] => return read_only(is_read, &path, || listing(&[CONNECTION_API])),
        [api, v, ..] if (*api == "node" && *v != NODE_API) || (*api == "connection" && *v != CONNECTION_API) => {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "{api} API version {v} is not served (only {})",
                    if *api == "node" { NODE_API } else { CONNECTION_API }
                ),
            );
        }
        _ => {}
    }
    let view = match app.ask(Request::Nmos {}).await {
        Ok(Reply::Nmos(v)) => v,
        Ok(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "mcrd answered something else"),
        Err(p) => return from_problem(&p),
    };
    match parts.as_slice() {
        ["node", _, rest @ ..] => node_api(&view, rest, is_read, &method, &path),
        ["connection", _, rest @ ..] => connection_api(&view, rest, is_read, &method, &path),
        _ => error(StatusCode::NOT_FOUND, format!("no {path}")),
    }
}

fn read_only(is_read: bool, path: &str, f: impl FnOnce() -> Response) -> Response {
    if is_read {
        f()
    } else {
        error(StatusCode::METHOD_NOT_ALLOWED, format!("{path} is read only"))
    }
}

fn by_id<'a>(list: &'a [Value], id: &str) -> Option<&'a Value> {
    list.iter().find(|r| r["id"] == id)
}

fn node_api(view: &NmosView, rest: &[&str], is_read: bool, method: &Method, path: &str) -> Response {
    let list = |name: &str| -> Option<&Vec<Value>> {
        Some(match name {
            "devices" => &view.devices,
            "sources" => &view.sources,
            "flows" => &view.flows,
            "senders" => &view.senders,
            "receivers" => &view.receivers,
            _ => return None,
        })
    };
    match rest {
        // A receiver's target (deprecated in v1.3; IS-05 does this).
        ["receivers", id, "target"] if *method == Method::PUT => {
            if by_id(&view.receivers, id).is_none() {
                return error(StatusCode::NOT_FOUND, format!("no receiver {id}"));
            }
            error(
                StatusCode::NOT_IMPLEMENTED,
                "a receiver is connected through the Connection API (IS-05), not /target",
            )
        }
        _ if !is_read => error(StatusCode::METHOD_NOT_ALLOWED, format!("{path} is read only")),
        [] => listing(&["self", "sources", "flows", "devices", "senders", "receivers"]),
        ["self"] => ok(&view.node),
        [name] => match list(name) {
            Some(l) => ok(&Value::Array(l.clone())),
            None => error(StatusCode::NOT_FOUND, format!("no {path}")),
        },
        [name, id] => match list(name).map(|l| by_id(l, id)) {
            Some(Some(r)) => ok(r),
            Some(None) => error(StatusCode::NOT_FOUND, format!("no {} {id}", name.trim_end_matches('s'))),
            None => error(StatusCode::NOT_FOUND, format!("no {path}")),
        },
        _ => error(StatusCode::NOT_FOUND, format!("no {path}")),
    }
}

fn connection_api(view: &NmosView, rest: &[&str], is_read: bool, method: &Method, path: &str) -> Response {
    match rest {
        [] => read_only(is_read, path, || listing(&["bulk", "single"])),
        ["bulk"] => read_only(is_read, path, || listing(&["senders", "receivers"])),
        ["bulk", "senders" | "receivers"] => error(StatusCode::METHOD_NOT_ALLOWED, format!("{path} takes POST")),
        ["single"] => read_only(is_read, path, || listing(&["senders", "receivers"])),
        ["single", "senders"] => read_only(is_read, path, || {
            let ids: Vec<&str> = view.connection_senders.iter().map(|s| s.id.as_str()).collect();
            listing(&ids)
        }),
        ["single", "receivers"] => read_only(is_read, path, || {
            let ids: Vec<&str> = view.connection_receivers.iter().map(|s| s.id.as_str()).collect();
            listing(&ids)
        }),
        ["single", "senders", id, what @ ..] => {
            let Some(s) = view.connection_senders.iter().find(|s| s.id == *id) else {
                return error(StatusCode::NOT_FOUND, format!("no sender {id}"));
            };
            match what {
                _ if !is_read => error(StatusCode::METHOD_NOT_ALLOWED, format!("{path} does not take {method}")),
                [] => listing(&["constraints", "staged", "active", "transportfile", "transporttype"]),
                ["constraints"] => ok(&s.constraints),
                ["staged"] => ok(&s.staged),
                ["active"] => ok(&s.active),
                ["transporttype"] => ok(&Value::String(s.transport_type.clone())),
                ["transportfile"] => match &s.transport_file {
                    Some(sdp) => {
                        let mut r = sdp.clone().into_response();
                        let h = r.headers_mut();
                        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
                        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                        r
                    }
                    None => error(
                        StatusCode::NOT_FOUND,
                        format!("sender {id} is disabled: it has no transport file"),
                    ),
                },
                _ => error(StatusCode::NOT_FOUND, format!("no {path}")),
            }
        }
        ["single", "receivers", id, what @ ..] => {
            let Some(r) = view.connection_receivers.iter().find(|s| s.id == *id) else {
                return error(StatusCode::NOT_FOUND, format!("no receiver {id}"));
            };
            match what {
                _ if !is_read => error(StatusCode::METHOD_NOT_ALLOWED, format!("{path} does not take {method}")),
                [] => listing(&["constraints", "staged", "active", "transporttype"]),
                ["constraints"] => ok(&r.constraints),
                ["staged"] => ok(&r.staged),
                ["active"] => ok(&r.active),
                ["transporttype"] => ok(&Value::String(r.transport_type.clone())),
                _ => error(StatusCode::NOT_FOUND, format!("no {path}")),
            }
        }
        _ => error(StatusCode::NOT_FOUND, format!("no {path}")),
    }
}

/// Asks the supervisor to stage `body` for sender or receiver `id`: the
/// status and body IS-05 answers with.
async fn stage(app: &App, receiver: bool, id: &str, body: Value) -> (StatusCode, Value) {
    let asked = app
        .ask(Request::NmosStage {
            receiver,
            id: id.to_string(),
            body,
        })
        .await;
    match asked {
        Ok(Reply::NmosStaged { status, body }) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        ),
        Ok(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"code": 500, "error": "mcrd answered something else", "debug": null}),
        ),
        Err(p) => (
            p.status,
            json!({"code": p.status.as_u16(), "error": p.detail, "debug": null}),
        ),
    }
}

/// A PATCH of a `staged` endpoint, or a POST of a bulk one.
async fn change(app: &App, method: &Method, parts: &[&str], body: Body, path: &str) -> Response {
    let bytes = match axum::body::to_bytes(body, super::MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too long"),
    };
    let parsed: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    match (method, parts) {
        (
            &Method::PATCH,
            [
                "connection",
                _,
                "single",
                kind @ ("senders" | "receivers"),
                id,
                "staged",
            ],
        ) => {
            let (status, body) = stage(app, *kind == "receivers", id, parsed).await;
            (status, json_body(&body)).into_response()
        }
        (&Method::POST, ["connection", _, "bulk", kind @ ("senders" | "receivers")]) => {
            let Value::Array(items) = parsed else {
                return error(StatusCode::BAD_REQUEST, "a bulk request is an array of {id, params}");
            };
            let mut out = Vec::new();
            for item in items {
                let (Some(id), Some(params)) = (item.get("id").and_then(Value::as_str), item.get("params")) else {
                    return error(StatusCode::BAD_REQUEST, format!("{item} is not {{id, params}}"));
                };
                let (status, body) = stage(app, *kind == "receivers", id, params.clone()).await;
                let mut r = json!({"id": id, "code": status.as_u16()});
                if status.as_u16() >= 400 {
                    r["error"] = body["error"].clone();
                }
                out.push(r);
            }
            ok(&Value::Array(out))
        }
        _ => error(StatusCode::METHOD_NOT_ALLOWED, format!("{path} does not take {method}")),
    }
}
