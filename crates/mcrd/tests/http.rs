//! mcrd's HTTP server: the JSON API (every endpoint and refusal, against
//! the control socket and the OpenAPI description), who may do what
//! (tokens, TLS, addresses beyond loopback), its limits, and the live page
//! in a real browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcr_core::control::{Request, Response};
use mcr_testbed::TempDir;
use mcr_testbed::http::{Answer, parse};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const MINUTES: Duration = Duration::from_secs(180);

/// What the JSON API's refusals are.
trait ProblemAnswer {
    /// A problem document with `status` and `kind`; its JSON.
    fn problem(&self, status: u16, kind: &str) -> Value;
}

impl ProblemAnswer for Answer {
    fn problem(&self, status: u16, kind: &str) -> Value {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(self.header("content-type"), Some("application/problem+json"));
        let p = self.json();
        assert_eq!(p["status"], status, "{p}");
        assert_eq!(p["kind"], kind, "{p}");
        assert_eq!(p["type"], format!("/api/problems#{kind}"), "{p}");
        assert!(p["detail"].as_str().is_some_and(|d| !d.is_empty()), "{p}");
        p
    }
}

/// Sends one request from inside `ns` to `addr` and reads the answer.
fn http(ns: &str, addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    mcr_testbed::http::request(ns, addr, method, path, headers, body)
}

/// The same request on the control socket; its response.
fn control(socket: &Path, req: &Request) -> Response {
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("control socket");
    let mut line = serde_json::to_vec(req).expect("json");
    line.push(b'\n');
    s.write_all(&line).expect("send");
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).expect("answer");
    serde_json::from_str(&answer).expect("a response")
}

/// Checks `v` against the schema at `schema` in the OpenAPI document:
/// types, required properties, and no property the description lacks.
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str) {
    if let Some(r) = schema["$ref"].as_str() {
        let target = doc.pointer(&r[1..]).unwrap_or_else(|| panic!("{at}: no {r}"));
        return conforms(doc, target, v, at);
    }
    if let Some(all) = schema["allOf"].as_array() {
        for s in all {
            conforms(doc, s, v, at);
        }
        return;
    }
    if let Some(any) = schema["oneOf"].as_array() {
        let fits = |s: &Value| std::panic::catch_unwind(|| conforms(doc, s, v, at)).is_ok();
        assert!(any.iter().any(fits), "{at}: {v} is none of {any:?}");
        return;
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    assert!(
        types.is_empty() || types.contains(&kind) || (kind == "integer" && types.contains(&"number")),
        "{at}: {v} is {kind}, the description says {types:?}"
    );
    if let Some(c) = schema.get("const") {
        assert_eq!(c, v, "{at}");
    }
    match v {
        Value::Object(o) => {
            let props = schema["properties"].as_object();
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().expect("a name");
                assert!(o.contains_key(r), "{at}: `{r}` is required and missing from {v}");
            }
            for (k, x) in o {
                match props.and_then(|p| p.get(k)) {
                    Some(s) => conforms(doc, s, x, &format!("{at}.{k}")),
                    None => match &schema["additionalProperties"] {
                        Value::Bool(false) => panic!("{at}: `{k}` is not in the description"),
                        s @ Value::Object(_) => conforms(doc, s, x, &format!("{at}.{k}")),
                        _ => {}
                    },
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                conforms(doc, &schema["items"], x, &format!("{at}[{i}]"));
            }
        }
        _ => {}
    }
}

/// The schema the description gives for `METHOD PATH`'s answer `status`.
fn described<'a>(doc: &'a Value, method: &str, path: &str, status: u16, media: &str) -> &'a Value {
    let op = &doc["paths"][path][method.to_ascii_lowercase()];
    let r = &op["responses"][status.to_string()];
    assert!(r.is_object(), "{method} {path}: no {status} in the description");
    &r["content"][media]["schema"]
}

/// A relay in a chain, serving HTTP on its loopback with a token.
struct Api {
    chain: Chain,
    relay: Relay,
    dir: TempDir,
    doc: Value,
}

const ADDR: &str = "127.0.0.1:9808";

impl Api {
    fn start(tag: &str) -> Api {
        let chain = Chain::new(tag).expect("chain");
        let dir = TempDir::new(tag).expect("temp dir");
        let token = token_file(&dir, 0o600);
        let config = dir
            .file(
                "mcrd.toml",
                "[daemon]\nworkers = 1\n\n[[rule]]\nname = \"from-file\"\ninput = \"veth1:239.1.1.9:5001\"\noutputs = [\"veth2:239.10.1.9:6001\"]\n",
            )
            .expect("config");
        let relay = Relay::start(
            &chain.relay,
            &[
                "--config",
                config.to_str().expect("utf-8"),
                "--http-listen",
                ADDR,
                "--http-token-file",
                token.to_str().expect("utf-8"),
            ],
        )
        .expect("mcrd");
        let doc = http(chain.relay.name(), ADDR, "GET", "/api/openapi.json", &[], b"").json();
        Api { chain, relay, dir, doc }
    }

    /// A request with the token; the answer, checked against the
    /// description when it is JSON.
    fn call(&self, method: &str, path: &str, described_as: &str, body: Option<Value>) -> Answer {
        let auth = format!("Bearer {TOKEN}");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let a = http(
            self.chain.relay.name(),
            ADDR,
            method,
            path,
            &[("Authorization", &auth), ("Content-Type", "application/json")],
            body.as_bytes(),
        );
        let media = match a.header("content-type") {
            Some("application/json") => "application/json",
            Some("application/problem+json") => "application/problem+json",
            _ => return a,
        };
        let schema = described(&self.doc, method, described_as, a.status, media);
        conforms(&self.doc, schema, &a.json(), &format!("{method} {path} {}", a.status));
        a
    }

    /// A request without a token.
    fn anonymous(&self, method: &str, path: &str, body: &[u8]) -> Answer {
        http(self.chain.relay.name(), ADDR, method, path, &[], body)
    }

    /// The same with some headers.
    fn anonymous_with(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        http(self.chain.relay.name(), ADDR, method, path, headers, b"")
    }
}

fn token_file(dir: &TempDir, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir
        .file(&format!("token-{mode:o}"), &format!("{TOKEN}\n"))
        .expect("token");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    p
}

fn rule(name: &str, input: &str, output: &str) -> Value {
    let (i_if, i_dst) = input.split_once(':').expect("IF:ADDR:PORT");
    let (o_if, o_dst) = output.split_once(':').expect("IF:ADDR:PORT");
    json!({
        "name": name,
        "input": {"interface": i_if, "destination": i_dst},
        "outputs": [{"interface": o_if, "destination": o_dst}],
    })
}

#[test]
fn every_endpoint_answers_as_the_control_socket_and_the_description_say() {
    let api = Api::start("http-api");
    let socket = api.relay.socket().to_path_buf();

    // The page, its assets and its headers.
    let page = api.anonymous("GET", "/", b"");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(
        page.header("content-security-policy")
            .is_some_and(|c| c.contains("default-src 'self'"))
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert!(page.text().contains("/assets/app.js"), "{}", page.text());
    for (path, ty) in [("/assets/app.js", "text/javascript"), ("/assets/app.css", "text/css")] {
        let a = api.anonymous("GET", path, b"");
        assert_eq!(a.status, 200, "{path}");
        assert!(a.header("content-type").is_some_and(|c| c.starts_with(ty)), "{path}");
        assert!(a.body.len() > 100, "{path} is only {} bytes", a.body.len());
    }

    // Reading needs no token on loopback; every answer is as described.
    let v = api.call("GET", "/api/version", "/api/version", None);
    assert_eq!(v.status, 200);
    assert_eq!(v.json()["daemon"], env!("CARGO_PKG_VERSION"));
    let anon = api.anonymous("GET", "/api/rules", b"");
    assert_eq!(anon.status, 200, "{}", anon.text());
    assert_eq!(anon.json()["rules"][0]["rule"]["name"], "from-file");

    // Changing needs the token.
    let a = rule("a", "veth1:239.1.1.1:5001", "veth2:239.10.1.1:6001");
    let body = a.to_string();
    let p = api
        .anonymous("POST", "/api/rules", body.as_bytes())
        .problem(401, "unauthorized");
    assert!(p["detail"].as_str().expect("detail").contains("Bearer"), "{p}");
    let wrong = http(
        api.chain.relay.name(),
        ADDR,
        "POST",
        "/api/rules",
        &[("Authorization", "Bearer 0123456789abcdef0123456789abcdeX")],
        body.as_bytes(),
    );
    let p = wrong.problem(401, "unauthorized");
    assert!(p["detail"].as_str().expect("detail").contains("not the one"), "{p}");
    assert!(
        wrong
            .header("www-authenticate")
            .is_some_and(|h| h.starts_with("Bearer"))
    );

    // Add: 201 with where the rule is; again: replaced, 200.
    let added = api.call("POST", "/api/rules", "/api/rules", Some(a.clone()));
    assert_eq!(added.status, 201, "{}", added.text());
    assert_eq!(added.header("location"), Some("/api/rules/a"));
    let j = added.json();
    assert_eq!(
        (j["result"].as_str(), j["rule"].as_str(), j["replaced"].as_bool()),
        (Some("added"), Some("a"), Some(false))
    );
    assert_eq!(j["joins"][0]["joined"], true, "{j}");
    let again = api.call("POST", "/api/rules", "/api/rules", Some(a.clone()));
    assert_eq!((again.status, again.json()["replaced"].as_bool()), (200, Some(true)));

    // A refused rule: the control socket's kind, field and message.
    let mut bad = rule("bad", "veth1:239.1.1.2:0", "veth2:239.10.1.2:6001");
    let refused = api.call("POST", "/api/rules", "/api/rules", Some(bad.clone()));
    let p = refused.problem(422, "invalid_rule");
    let by_socket = control(
        &socket,
        &Request::Add {
            rule: serde_json::from_value(bad.clone()).expect("a rule"),
        },
    );
    let mcr_core::control::Reply::Error { error } = by_socket.reply else {
        panic!("the control socket took it: {by_socket:?}");
    };
    assert_eq!(p["detail"], error.message);
    assert_eq!(p["field"].as_str(), error.field.as_deref());
    assert_eq!(p["field"], "input.destination", "{p}");
    // Not a rule at all, or one with a field MCR does not know.
    let p = api
        .call("POST", "/api/rules", "/api/rules", Some(json!([1, 2])))
        .problem(400, "bad_request");
    assert!(p["detail"].as_str().expect("detail").starts_with("not a rule"), "{p}");
    bad["colour"] = json!("red");
    let p = api
        .call("POST", "/api/rules", "/api/rules", Some(bad))
        .problem(400, "bad_request");
    assert!(
        p["detail"].as_str().expect("detail").contains("unknown field `colour`"),
        "{p}"
    );
    // Too large: refused before it is read whole.
    let huge = vec![b' '; (1 << 20) + 10];
    let auth = format!("Bearer {TOKEN}");
    http(
        api.chain.relay.name(),
        ADDR,
        "POST",
        "/api/rules",
        &[("Authorization", &auth)],
        &huge,
    )
    .problem(413, "too_large");

    // PUT names the rule in the path; a body naming another is refused.
    let mut b = rule("b", "veth1:239.1.1.3:5001", "veth2:239.10.1.3:6001");
    b.as_object_mut().expect("object").remove("name");
    let put = api.call("PUT", "/api/rules/b", "/api/rules/{name}", Some(b.clone()));
    assert_eq!(put.status, 201, "{}", put.text());
    b["name"] = json!("other");
    let p = api
        .call("PUT", "/api/rules/b", "/api/rules/{name}", Some(b))
        .problem(422, "invalid_rule");
    assert_eq!(p["field"], "name");

    // Reading: list, show, stats, workers, events, history, config, overview.
    let list = api.call("GET", "/api/rules", "/api/rules", None).json();
    let names: Vec<&str> = list["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["rule"]["name"].as_str())
        .collect();
    assert_eq!(names, ["from-file", "a", "b"]);
    let shown = api.call("GET", "/api/rules/a", "/api/rules/{name}", None);
    assert_eq!(shown.status, 200);
    let j = shown.json();
    assert_eq!(
        (j["rule"]["name"].as_str(), j["stats"]["name"].as_str()),
        (Some("a"), Some("a"))
    );
    let p = api
        .call("GET", "/api/rules/nope", "/api/rules/{name}", None)
        .problem(404, "not_found");
    assert!(p["detail"].as_str().expect("detail").contains("nope"), "{p}");
    let stats = api.call("GET", "/api/stats", "/api/stats", None).json();
    assert_eq!(stats["result"], "stats");
    assert_eq!(stats["rules"].as_array().map(Vec::len), Some(3));
    let workers = api.call("GET", "/api/workers", "/api/workers", None).json();
    assert_eq!(workers["workers"][0]["state"], "running", "{workers}");
    let events = api.call("GET", "/api/events", "/api/events", None).json();
    let said: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    for needle in [
        "worker 0 started",
        "rule `a` added",
        "rule `a` changed",
        "rule `b` added",
    ] {
        assert!(said.iter().any(|m| m.contains(needle)), "no `{needle}` in {said:?}");
    }
    // One rate sample a second per rule.
    let deadline = Instant::now() + MINUTES;
    let history = loop {
        let h = api.call("GET", "/api/history", "/api/history", None).json();
        if h["rules"]["b"]["pps"].as_array().is_some_and(|s| s.len() >= 2) || Instant::now() > deadline {
            break h;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        history["rules"]["b"]["pps"].as_array().is_some_and(|s| s.len() >= 2),
        "{history}"
    );
    let config = api.call("GET", "/api/config", "/api/config", None).json();
    assert!(
        config["text"].as_str().expect("text").contains("name = \"b\""),
        "{config}"
    );
    let overview = api.call("GET", "/api/overview", "/api/overview", None).json();
    assert_eq!(overview["rules"].as_array().map(Vec::len), Some(3));
    assert!(overview["history"]["rules"]["a"].is_object(), "{overview}");

    // Switch: a rule with one input does not fail over, as the socket says.
    let p = api
        .call(
            "POST",
            "/api/rules/a/switch",
            "/api/rules/{name}/switch",
            Some(json!({"input": "2"})),
        )
        .problem(422, "invalid_request");
    let by_socket = control(
        &socket,
        &Request::Switch {
            rule: "a".into(),
            input: Some("2".into()),
        },
    );
    let mcr_core::control::Reply::Error { error } = by_socket.reply else {
        panic!("{by_socket:?}");
    };
    assert_eq!(p["detail"], error.message);
    api.call(
        "POST",
        "/api/rules/a/switch",
        "/api/rules/{name}/switch",
        Some(json!({"to": 1})),
    )
    .problem(400, "bad_request");

    // The role: read freely, set with the token; the socket sees the
    // change, and the stats and /metrics say so.
    let role = api.call("GET", "/api/role", "/api/role", None).json();
    assert_eq!(
        (role["role"].as_str(), role["changed"].as_bool()),
        (Some("active"), Some(false))
    );
    api.anonymous("PUT", "/api/role", br#"{"role":"standby"}"#)
        .problem(401, "unauthorized");
    let set = api
        .call("PUT", "/api/role", "/api/role", Some(json!({"role": "standby"})))
        .json();
    assert_eq!(
        (set["role"].as_str(), set["changed"].as_bool()),
        (Some("standby"), Some(true))
    );
    let again = api
        .call("PUT", "/api/role", "/api/role", Some(json!({"role": "standby"})))
        .json();
    assert_eq!(again["changed"], false, "{again}");
    let by_socket = control(&socket, &Request::Role { set: None });
    let mcr_core::control::Reply::Role(r) = by_socket.reply else {
        panic!("{by_socket:?}");
    };
    assert_eq!((r.role, r.changes), (mcr_core::config::Role::Standby, 1));
    let stats = api.call("GET", "/api/stats", "/api/stats", None).json();
    assert_eq!(stats["role"]["role"], "standby", "{stats}");
    assert!(
        api.anonymous("GET", "/metrics", b"")
            .text()
            .contains("mcr_role{role=\"standby\"} 1")
    );
    api.call("PUT", "/api/role", "/api/role", Some(json!({"role": "primary"})))
        .problem(400, "bad_request");
    api.call("PUT", "/api/role", "/api/role", None)
        .problem(400, "bad_request");
    api.call("PUT", "/api/role", "/api/role", Some(json!({"role": "active"})));

    // Save (to a file beside the config) and reload (which brings back
    // the file's rules: a and b go).
    let to = api.dir.path().join("saved.toml");
    let saved = api.call("POST", "/api/save", "/api/save", Some(json!({"to": to})));
    assert_eq!(saved.status, 200, "{}", saved.text());
    assert_eq!(saved.json()["rules"], 3);
    let text = std::fs::read_to_string(&to).expect("saved file");
    assert!(text.contains("name = \"a\""), "{text}");
    let p = api
        .call("POST", "/api/save", "/api/save", Some(json!({"to": "/nowhere/x.toml"})))
        .problem(400, "bad_request");
    assert!(p["detail"].as_str().expect("detail").contains("saves only in"), "{p}");
    // A config file with a mistake changes nothing and says where it is.
    let config = api.dir.path().join("mcrd.toml");
    let good = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{good}wrokers = 3\n")).expect("break it");
    let p = api
        .call("POST", "/api/reload", "/api/reload", None)
        .problem(422, "invalid_config");
    let detail = p["detail"].as_str().expect("detail");
    assert!(
        detail.starts_with(&format!("{}:", config.display())) && detail.contains("wrokers"),
        "{p}"
    );
    std::fs::write(&config, good).expect("mend it");
    api.call("POST", "/api/reload", "/api/reload", Some(json!({"now": true})))
        .problem(400, "bad_request");
    let reloaded = api.call("POST", "/api/reload", "/api/reload", None).json();
    assert_eq!(reloaded["removed"], json!(["a", "b"]), "{reloaded}");
    assert_eq!(reloaded["unchanged"], 1, "{reloaded}");

    // Remove: the rule goes; again: not found.
    api.call("POST", "/api/rules", "/api/rules", Some(a));
    let removed = api.call("DELETE", "/api/rules/a", "/api/rules/{name}", None);
    assert_eq!(
        (removed.status, removed.json()["result"].as_str()),
        (200, Some("removed"))
    );
    api.call("DELETE", "/api/rules/a", "/api/rules/{name}", None)
        .problem(404, "not_found");
    api.anonymous("DELETE", "/api/rules/from-file", b"")
        .problem(401, "unauthorized");

    // /metrics, GET and HEAD; what is not there; a method not taken; a
    // Host that is not this one.
    let m = api.anonymous("GET", "/metrics", b"");
    assert_eq!(m.status, 200);
    assert!(
        m.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain; version=0.0.4"))
    );
    assert!(
        m.text().contains("mcr_rule_packets_total{rule=\"from-file\""),
        "{}",
        m.text()
    );
    let head = api.anonymous("HEAD", "/metrics", b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    api.anonymous("GET", "/nowhere", b"").problem(404, "not_found");
    api.anonymous("DELETE", "/api/stats", b"")
        .problem(405, "method_not_allowed");
    // A Host that is not this host's (a page elsewhere using a name of its
    // own for 127.0.0.1), or a request through a proxy, needs the token.
    let p = api
        .anonymous_with("GET", "/api/rules", &[("Host", "evil.example:9808")])
        .problem(401, "unauthorized");
    assert!(p["detail"].as_str().expect("detail").contains("evil.example"), "{p}");
    let p = api
        .anonymous_with("GET", "/api/rules", &[("X-Forwarded-For", "192.0.2.1")])
        .problem(401, "unauthorized");
    assert!(p["detail"].as_str().expect("detail").contains("proxy"), "{p}");
    let auth = format!("Bearer {TOKEN}");
    let with_token = api.anonymous_with(
        "GET",
        "/api/rules",
        &[("Host", "evil.example:9808"), ("Authorization", &auth)],
    );
    assert_eq!(with_token.status, 200, "{}", with_token.text());
    // A rule's name that is not one: refused as a problem too.
    api.anonymous("GET", "/api/rules/%FF", b"").problem(400, "bad_request");
    let kinds = api.anonymous("GET", "/api/problems", b"").json();
    assert!(kinds["invalid_rule"].is_string(), "{kinds}");
    api.relay.stop().expect("stopped");
}

/// `curl` from inside `ns`: the status (0 when there was no answer), the
/// body, and curl's complaint.
fn curl(ns: &mcr_testbed::Ns, args: &[&str]) -> (u16, String, String) {
    let out = ns
        .command("curl")
        .args(["-sS", "--max-time", "60", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl (scripts/deps installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        body.to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs mcrd in `ns`, which must refuse to start; its stderr.
fn refused_start(ns: &mcr_testbed::Ns, args: &[&str]) -> String {
    let out = ns
        .command(mcr_testbed::bin("mcrd").expect("mcrd"))
        .arg("--control-socket")
        .arg(format!("/tmp/{}-refused.sock", ns.name()))
        .args(args)
        .output()
        .expect("run mcrd");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "mcrd {args:?} should refuse to start: {err}"
    );
    err
}

#[test]
fn beyond_loopback_needs_tls_or_insecure_and_every_request_the_token() {
    let c = Chain::new("http-tls").expect("chain");
    let dir = TempDir::new("http-tls").expect("temp dir");
    let token = token_file(&dir, 0o600);
    let token = token.to_str().expect("utf-8");
    let open_token = token_file(&dir, 0o644);

    // What mcrd refuses at start, and says why.
    let err = refused_start(&c.relay, &["--http-listen", "0.0.0.0:9443"]);
    assert!(
        err.contains("beyond loopback") && err.contains("--http-insecure"),
        "{err}"
    );
    let err = refused_start(&c.relay, &["--http-token-file", open_token.to_str().expect("utf-8")]);
    assert!(err.contains("readable or writable by others"), "{err}");
    let err = refused_start(&c.relay, &["--http-reads-need-token"]);
    assert!(err.contains("needs --http-token-file"), "{err}");
    let garbage = dir.file("garbage.pem", "not a certificate\n").expect("file");
    let g = garbage.to_str().expect("utf-8");
    let err = refused_start(&c.relay, &["--http-tls-cert", g, "--http-tls-key", g]);
    assert!(
        err.contains("--http-tls-cert") && err.contains("no certificate"),
        "{err}"
    );

    // A certificate for the relay's address on the generator's side.
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .args(["-subj", "/CN=mcrd-test", "-addext"])
        .arg(format!("subjectAltName=IP:{},IP:127.0.0.1", Chain::RELAY_IN_ADDR))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let (cert_s, key_s) = (cert.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let relay = Relay::start(
        &c.relay,
        &[
            "--http-listen",
            "0.0.0.0:9443",
            "--http-tls-cert",
            cert_s,
            "--http-tls-key",
            key_s,
            "--http-token-file",
            token,
        ],
    )
    .expect("mcrd with TLS");
    let far = format!("https://{}:9443", Chain::RELAY_IN_ADDR);
    let auth = format!("Authorization: Bearer {TOKEN}");
    // From the generator's host: reading needs the token too.
    let (code, body, _) = curl(&c.generator, &["--cacert", cert_s, &format!("{far}/api/version")]);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("beyond loopback"), "{body}");
    let (code, body, _) = curl(
        &c.generator,
        &["--cacert", cert_s, "-H", &auth, &format!("{far}/api/version")],
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"daemon\""), "{body}");
    let (code, body, _) = curl(
        &c.generator,
        &[
            "--cacert",
            cert_s,
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "--data",
            &rule("tls", "veth1:239.1.1.1:5001", "veth2:239.10.1.1:6001").to_string(),
            &format!("{far}/api/rules"),
        ],
    );
    assert_eq!(code, 201, "{body}");
    let (code, _, _) = curl(
        &c.generator,
        &["--cacert", cert_s, "-H", &auth, &format!("{far}/metrics")],
    );
    assert_eq!(code, 200);
    // With HSTS, and on loopback without a token.
    let (code, body, _) = curl(
        &c.relay,
        &[
            "--cacert",
            cert_s,
            "-D",
            "/dev/stderr",
            "https://127.0.0.1:9443/api/rules",
        ],
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"tls\""), "{body}");
    // Plain HTTP to the TLS port gets no answer; a client that does not
    // know the certificate refuses it.
    let (code, _, _) = curl(
        &c.generator,
        &[&format!("http://{}:9443/api/version", Chain::RELAY_IN_ADDR)],
    );
    assert_eq!(code, 0, "plain HTTP answered on the TLS port");
    let (code, _, err) = curl(&c.generator, &[&format!("{far}/api/version")]);
    assert_eq!(code, 0);
    assert!(err.contains("certificate"), "{err}");
    relay.stop().expect("stopped");

    // --http-insecure: plain HTTP beyond loopback; without a token file,
    // a client there may do nothing, and none may change anything.
    let relay = Relay::start(&c.relay, &["--http-listen", "0.0.0.0:9444", "--http-insecure"]).expect("mcrd");
    let plain = format!("http://{}:9444", Chain::RELAY_IN_ADDR);
    let (code, body, _) = curl(&c.generator, &[&format!("{plain}/api/version")]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("--http-token-file"), "{body}");
    let (code, body, _) = curl(&c.relay, &["-X", "DELETE", "http://127.0.0.1:9444/api/rules/x"]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("changes over HTTP are off"), "{body}");
    relay.stop().expect("stopped");

    // Reads that need the token, on loopback too.
    let relay = Relay::start(
        &c.relay,
        &[
            "--http-listen",
            ADDR,
            "--http-token-file",
            token,
            "--http-reads-need-token",
        ],
    )
    .expect("mcrd");
    let (code, body, _) = curl(&c.relay, &["http://127.0.0.1:9808/api/version"]);
    assert_eq!(code, 401, "{body}");
    let (code, body, _) = curl(&c.relay, &["-H", &auth, "http://127.0.0.1:9808/api/version"]);
    assert_eq!(code, 200, "{body}");
    relay.stop().expect("stopped");

    // none: no listener at all.
    let relay = Relay::start(&c.relay, &["--http-listen", "none"]).expect("mcrd");
    let (code, _, err) = curl(&c.relay, &["http://127.0.0.1:9808/api/version"]);
    assert_eq!(code, 0);
    assert!(err.contains("onnect"), "{err}");
    relay.stop().expect("stopped");
}

#[test]
fn the_default_address_serves_and_slow_or_too_many_clients_are_cut_off() {
    let c = Chain::new("http-limits").expect("chain");
    let ns = c.relay.name().to_string();
    // Something else holds the default address: mcrd says so and runs.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let ns = ns.clone();
        std::thread::spawn(move || {
            mcr_sys::netns::enter(&ns).expect("enter");
            let l = std::net::TcpListener::bind(ADDR).expect("hold the default address");
            held_tx.send(()).expect("say so");
            let _ = release_rx.recv();
            drop(l);
        })
    };
    held_rx.recv().expect("held");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd runs without HTTP");
    assert!(
        relay
            .log()
            .contains("cannot listen on the default address 127.0.0.1:9808"),
        "{}",
        relay.log()
    );
    relay.stop().expect("stopped");
    release_tx.send(()).expect("release");
    holder.join().expect("holder");

    // Free: served there with no flag at all.
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    assert_eq!(http(&ns, ADDR, "GET", "/api/version", &[], b"").status, 200);

    // 64 clients that say nothing hold every slot: one more is told to
    // come back later; once they go, it is served again.
    let answers = {
        let ns = ns.clone();
        std::thread::spawn(move || {
            mcr_sys::netns::enter(&ns).expect("enter");
            let idle: Vec<std::net::TcpStream> = (0..64)
                .map(|_| std::net::TcpStream::connect(ADDR).expect("connect"))
                .collect();
            // Each is accepted (and holds its slot) before the next is
            // read from the backlog.
            std::thread::sleep(Duration::from_millis(500));
            let one_more = http_here("GET", "/api/version");
            drop(idle);
            one_more
        })
        .join()
        .expect("clients")
    };
    answers.problem(503, "busy");
    assert_eq!(answers.header("retry-after"), Some("1"));
    let deadline = Instant::now() + MINUTES;
    while http(&ns, ADDR, "GET", "/api/version", &[], b"").status != 200 {
        assert!(Instant::now() < deadline, "the slots were never given back");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A client that never finishes its request head is disconnected.
    let closed = {
        let ns = ns.clone();
        std::thread::spawn(move || {
            mcr_sys::netns::enter(&ns).expect("enter");
            let mut s = std::net::TcpStream::connect(ADDR).expect("connect");
            s.write_all(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .expect("half a head");
            s.set_read_timeout(Some(MINUTES)).expect("timeout");
            let mut rest = Vec::new();
            // Ends (EOF, or the server's 408 and EOF) rather than waiting.
            s.read_to_end(&mut rest).map(|_| rest)
        })
        .join()
        .expect("slow client")
    };
    let rest = closed.expect("closed, not timed out on our side");
    assert!(
        rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    relay.stop().expect("stopped");
}

/// [`http`] from a thread already in the namespace.
fn http_here(method: &str, path: &str) -> Answer {
    let mut s = std::net::TcpStream::connect(ADDR).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    s.write_all(format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("answer");
    parse(&raw)
}

/// Where the test leaves its screenshots.
fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots")
}

#[test]
fn the_page_shows_every_rule_live_in_a_real_browser() {
    use mcr_testbed::browser::Browser;
    use mcr_testbed::traffic::Mcrgen;
    const N: u64 = 3000;
    const PATIENCE: Duration = Duration::from_secs(90);
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let c = Chain::new("http-page").expect("chain");
    let relay = Relay::start(&c.relay, &["--http-listen", ADDR]).expect("mcrd");
    let names = ["feed-1", "feed-2", "feed-3", "going"];
    for (i, name) in names.iter().enumerate() {
        relay
            .add_rule(
                name,
                &format!("veth1:239.1.1.{}:{}", i + 1, 5001 + i),
                &[&format!("veth2:239.10.1.{}:{}", i + 1, 6001 + i)],
            )
            .expect("add");
    }
    // Chromium starts (slowly, on a busy host) and shows the page before
    // the traffic does: the 30 s of traffic are for what the page shows.
    let mut b = Browser::open(&c.relay, &format!("http://{ADDR}/")).expect("open the page");
    let rx = Mcrgen::streams("239.10.1.1+4:6001+", Chain::SINK_IF)
        .arg("--idle-timeout")
        .arg("3s")
        .recv(&c.sink)
        .expect("recv");
    let sender = c.send_from_generator_meanwhile("239.1.1.1+4:5001+", N, "400", MINUTES);
    // Every rule, each with a rate, while the traffic flows.
    let every_rule_moves = format!(
        "(() => {{ const want = {names:?}; const rows = [...document.querySelectorAll('#rules [data-rule]')];
           return want.every(n => rows.some(r => r.dataset.rule === n
             && Number(r.querySelector('[data-pps]').dataset.pps) > 0)); }})()"
    );
    b.wait_for(&every_rule_moves, PATIENCE)
        .unwrap_or_else(|e| panic!("not every rule shown with a rate: {e}"));
    assert!(!sender.is_finished(), "the traffic ended before the page showed it");
    let shown = b
        .eval("[...document.querySelectorAll('#rules [data-rule]')].map(r => r.innerText).join('\\n---\\n')")
        .expect("rules");
    let shown = shown.as_str().expect("text");
    for (i, name) in names.iter().enumerate() {
        assert!(shown.contains(name), "{name} in {shown}");
        // Its input and output, as `mcrctl list` writes them.
        assert!(shown.contains(&format!("239.1.1.{}:{}", i + 1, 5001 + i)), "{shown}");
        assert!(shown.contains(&format!("239.10.1.{}:{}", i + 1, 6001 + i)), "{shown}");
    }
    // A sparkline of each, once there are some seconds of history.
    b.wait_for(
        "[...document.querySelectorAll('#rules [data-rule] svg polyline')]
           .filter(p => p.getAttribute('points').trim().split(/\\s+/).length >= 8).length >= 4",
        PATIENCE,
    )
    .expect("sparklines");
    let workers = b.eval("document.getElementById('workers').innerText").expect("workers");
    assert!(workers.as_str().is_some_and(|w| w.contains("running")), "{workers}");
    std::fs::create_dir_all(screenshots()).expect("screenshots dir");
    b.screenshot(&screenshots().join("mcrd-page.png")).expect("screenshot");

    // A removed rule leaves the page without a reload; the event says so.
    b.eval("window.sameDocument = true").expect("mark the document");
    relay.ctl_ok(&["remove", "going"]).expect("remove");
    b.wait_for(
        "document.querySelector('[data-rule=\"going\"]') === null
         && document.getElementById('events').innerText.includes('rule `going` removed')",
        PATIENCE,
    )
    .expect("the removed rule leaves the page");
    assert_eq!(b.eval("window.sameDocument === true").expect("same"), Value::Bool(true));
    b.wait_for(&every_rule_moves.replace(", \"going\"", ""), PATIENCE)
        .expect("the others still move");
    b.set_viewport(390, 844, true).expect("phone");
    b.screenshot(&screenshots().join("mcrd-page-phone.png"))
        .expect("phone screenshot");
    assert!(
        b.page_errors().is_empty(),
        "the page reported errors: {:?}",
        b.page_errors()
    );
    drop(b);

    // Every packet of the rules that stayed; the removed one: a clean
    // prefix.
    assert_eq!(sender.join().expect("sender").expect("send").packets, 4 * N);
    let got = rx.finish(MINUTES).expect("recv done");
    for s in &got.report.streams[..3] {
        assert!(s.problems(Some(N)).is_empty(), "{:?}", s.problems(Some(N)));
        assert_eq!(s.received, N);
    }
    let gone = &got.report.streams[3];
    assert!(gone.received > 0 && gone.received < N, "{gone:?}");
    assert_eq!((gone.lost, gone.duplicated, gone.reordered), (0, 0, 0), "{gone:?}");
    relay.stop().expect("stopped");
}

/// The CPU time (user and system) each thread of process `pid` has used,
/// in seconds, by the thread's name.
fn cpu_seconds(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks").flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let name = stat[stat.find('(').expect("comm") + 1..stat.rfind(')').expect("comm")].to_string();
        // After the name in parentheses: state is field 3, utime 14.
        let f: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..].split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
        *by_name.entry(name).or_insert(0.0) += ticks as f64 / 100.0;
    }
    by_name
}

/// What the page costs the supervisor: its CPU over `PHASE` without the
/// page, with the page open (polling once a second), and without again,
/// at 100 rules with traffic on each. A measurement, not a check: run it
/// with `cargo nextest run --cargo-profile ci -p mcrd --test http
/// --run-ignored only --no-capture page_cost` (docs/OPERATIONS.md).
#[test]
#[ignore = "a measurement; run by hand"]
fn page_cost_at_100_rules() {
    use mcr_testbed::browser::Browser;
    const PHASE: Duration = Duration::from_secs(30);
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let c = Chain::new("http-cost").expect("chain");
    let dir = TempDir::new("http-cost").expect("temp dir");
    let rules: Vec<_> = (1..=100).map(mcr_testbed::config_file::stream_rule).collect();
    let text = format!(
        "{}{}",
        mcr_testbed::config_file::HEAD,
        mcr_testbed::config_file::rules_toml(&rules)
    );
    let config = dir.file("mcrd.toml", &text).expect("config");
    let relay = Relay::start(
        &c.relay,
        &["--config", config.to_str().expect("utf-8"), "--http-listen", ADDR],
    )
    .expect("mcrd");
    let phases = 3 * PHASE.as_secs() + 30;
    let sender = c.send_from_generator_meanwhile("239.1.1.1+100:5001+", 50 * phases, "5k", MINUTES * 2);
    std::thread::sleep(Duration::from_secs(5));
    let pid = relay.pid();
    let measure = |what: &str| {
        let (c0, t0) = (cpu_seconds(pid), Instant::now());
        std::thread::sleep(PHASE);
        let (c1, dt) = (cpu_seconds(pid), t0.elapsed().as_secs_f64());
        let used = |name: &str| c1.get(name).copied().unwrap_or(0.0) - c0.get(name).copied().unwrap_or(0.0);
        let all: f64 = c1.keys().map(|k| used(k)).sum();
        println!(
            "{what:<22} mcrd (supervisor process) {:.2} % of a core: its loop {:.2} %, the HTTP thread {:.2} %",
            100.0 * all / dt,
            100.0 * used("mcrd") / dt,
            100.0 * used("mcrd-http") / dt
        );
        all / dt
    };
    let before = measure("no page");
    let mut b = Browser::open(&c.relay, &format!("http://{ADDR}/")).expect("page");
    b.wait_for(
        "document.querySelectorAll('#rules [data-rule]').length === 100",
        MINUTES,
    )
    .expect("100 rules on the page");
    let open = measure("page open (1 poll/s)");
    drop(b);
    let after = measure("no page again");
    let overview = http(c.relay.name(), ADDR, "GET", "/api/overview", &[], b"");
    let gzipped = http(
        c.relay.name(),
        ADDR,
        "GET",
        "/api/overview",
        &[("Accept-Encoding", "gzip")],
        b"",
    );
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    println!(
        "/api/overview gzipped (as a browser takes it): {} bytes",
        gzipped.body.len()
    );
    let t0 = Instant::now();
    for _ in 0..20 {
        http(c.relay.name(), ADDR, "GET", "/api/overview", &[], b"");
    }
    println!(
        "/api/overview at 100 rules: {} bytes, {:.1} ms per request end to end (20 in a row)",
        overview.body.len(),
        t0.elapsed().as_secs_f64() * 1000.0 / 20.0
    );
    println!(
        "the page costs {:.2} % of a core ({:.1} ms of supervisor CPU per update)",
        100.0 * (open - (before + after) / 2.0),
        1000.0 * (open - (before + after) / 2.0)
    );
    sender.join().expect("sender").expect("send");
    relay.stop().expect("stopped");
}

#[test]
fn check_config_checks_the_http_settings_as_a_start_would() {
    let dir = TempDir::new("http-check").expect("temp dir");
    let check = |settings: &str| {
        let file = dir
            .file("mcrd.toml", &format!("[daemon]\n{settings}\n"))
            .expect("config");
        let out = std::process::Command::new(mcr_testbed::bin("mcrd").expect("mcrd"))
            .arg("--check-config")
            .arg(&file)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let good = token_file(&dir, 0o600);
    let open = token_file(&dir, 0o604);
    let (code, said) = check(&format!("http_token_file = \"{}\"", good.display()));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("valid, 0 rule(s)"), "{said}");
    for (settings, says) in [
        (
            format!("http_token_file = \"{}\"", open.display()),
            "readable or writable by others",
        ),
        ("http_listen = \"0.0.0.0:9808\"".to_string(), "beyond loopback"),
        (
            "metrics_listen = \"0.0.0.0:9808\"".to_string(),
            "metrics_listen in older config files",
        ),
        (
            format!("http_tls_cert = \"{}\"", good.display()),
            "needs --http-tls-key",
        ),
        ("http_reads_need_token = true".to_string(), "needs --http-token-file"),
    ] {
        let (code, said) = check(&settings);
        assert_eq!(code, Some(1), "{settings}: {said}");
        assert!(said.contains(says) && said.contains("mcrd.toml"), "{settings}: {said}");
    }
    // NMOS control networks that cannot reach the server: valid, and said.
    let nmos = "[daemon.nmos]\ncontrol_networks = [\"10.10.0.0/16\"]";
    for (settings, warned) in [
        (nmos.to_string(), Some("HTTP listens on 127.0.0.1:9808, loopback only")),
        (
            format!("http_listen = \"[::1]:9808\"\n{nmos}"),
            Some("HTTP listens on [::1]:9808, loopback only"),
        ),
        (format!("http_listen = \"none\"\n{nmos}"), Some("HTTP is off")),
        (
            format!("http_listen = \"0.0.0.0:9808\"\nhttp_insecure = true\n{nmos}"),
            None,
        ),
        ("[daemon.nmos]\ncontrol_networks = [\"127.0.0.0/8\"]".to_string(), None),
    ] {
        let (code, said) = check(&settings);
        assert_eq!(code, Some(0), "{settings}: {said}");
        match warned {
            Some(w) => assert!(
                said.contains("warning: [daemon.nmos] control_networks") && said.contains(w),
                "{settings}: {said}"
            ),
            None => assert!(!said.contains("warning"), "{settings}: {said}"),
        }
    }
}
