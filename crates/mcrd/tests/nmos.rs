//! mcrd as an AMWA NMOS Node (`[daemon.nmos]`): every endpoint of its
//! IS-04 v1.3 Node API and IS-05 v1.1 Connection API answers, by path
//! with and without its trailing slash, with CORS headers, and what it
//! answers is valid by AMWA's own JSON schemas; ids stay the same across
//! a restart, and a resource's version moves only when what it says does.
//!
//! The schemas: AMWA's `APIs/schemas` of IS-04 v1.3 and IS-05 v1.1, as the
//! `nmos` crate (a dev-dependency, from crates.io) ships them unchanged;
//! found through `cargo metadata`, read from the crate's source, and
//! checked with the `jsonschema` crate (draft 4, as they are written).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcr_testbed::Ns;
use mcr_testbed::TempDir;
use mcr_testbed::config_file::HEAD;
use mcr_testbed::http::{Answer, request};
use mcr_testbed::presets::Chain;
use mcr_testbed::presets::TwoPaths;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use serde_json::{Value, json};

const API: &str = "127.0.0.1:9808";
const MINUTES: Duration = Duration::from_secs(180);

/// AMWA's schemas, where the `nmos` crate keeps them.
struct Schemas {
    root: PathBuf,
}

/// Resolves the schemas' relative references (`resource_core.json`) in
/// the schemas' own directory.
struct Files {
    root: PathBuf,
}

impl jsonschema::Retrieve for Files {
    fn retrieve(&self, uri: &jsonschema::Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let rel = uri
            .as_str()
            .strip_prefix("file:///amwa/")
            .ok_or_else(|| format!("{uri} is not one of AMWA's schemas"))?;
        let text = std::fs::read_to_string(self.root.join(rel))?;
        Ok(serde_json::from_str(&text)?)
    }
}

impl Schemas {
    /// Finds the `nmos` crate's schemas through `cargo metadata`.
    fn find() -> Schemas {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = std::process::Command::new(cargo)
            // (This platform's dependencies only: offline, the others'
            // sources are not there to read.)
            .args(["metadata", "--format-version", "1", "--offline", "--filter-platform"])
            .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo metadata");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
        let manifest = meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .find(|p| p["name"] == "nmos")
            .and_then(|p| p["manifest_path"].as_str())
            .expect("the nmos crate among the packages");
        let root = Path::new(manifest).parent().expect("its directory").join("schemas");
        assert!(root.join("is-04/v1.3/node.json").exists(), "{}", root.display());
        Schemas { root }
    }

    /// Checks `v` against schema `file` (`is-04/v1.3/node.json`).
    fn check(&self, file: &str, v: &Value, what: &str) {
        let errors = self.errors(file, v);
        assert!(errors.is_empty(), "{what} is not valid by {file}: {errors:#?}\n{v:#}");
    }

    /// What schema `file` finds wrong with `v`.
    fn errors(&self, file: &str, v: &Value) -> Vec<String> {
        let text = std::fs::read_to_string(self.root.join(file)).expect("the schema");
        let schema: Value = serde_json::from_str(&text).expect("schema JSON");
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .with_base_uri(format!("file:///amwa/{file}"))
            .with_retriever(Files {
                root: self.root.clone(),
            })
            .should_validate_formats(true)
            .build(&schema)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        validator
            .iter_errors(v)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect()
    }
}

/// GET `path`, checked as every NMOS answer must be: CORS, the type, and
/// the same answer by the path without (or with) its trailing slash.
fn get(ns: &str, path: &str) -> Answer {
    let a = request(ns, API, "GET", path, &[("Origin", "null")], b"");
    assert_eq!(a.header("access-control-allow-origin"), Some("*"), "{path}");
    let other = match path.strip_suffix('/') {
        Some(p) => p.to_string(),
        None => format!("{path}/"),
    };
    let b = request(ns, API, "GET", &other, &[], b"");
    assert_eq!(
        (a.status, &a.body),
        (b.status, &b.body),
        "{path} and {other} answer alike"
    );
    a
}

/// GET `path`: 200 and JSON, valid by `schema`.
fn get_valid(ns: &str, schemas: &Schemas, path: &str, schema: &str) -> Value {
    let a = get(ns, path);
    assert_eq!(a.status, 200, "{path}: {}", a.text());
    assert_eq!(a.header("content-type"), Some("application/json"), "{path}");
    let v = a.json();
    schemas.check(schema, &v, path);
    v
}

fn config(dir: &TempDir, rules: &str) -> PathBuf {
    let path = dir.path().join("mcrd.toml");
    let text = format!("{HEAD}[daemon.nmos]\nlabel = \"relay under test\"\nid_seed = \"nmos-test\"\n\n{rules}");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// A plain rule with a multicast and a unicast output, and a merge of two
/// legs.
const RULES: &str = r#"[[rule]]
name = "plain"
input = "veth1:239.1.1.1:5001"
outputs = ["veth2:239.10.1.1:6001,ttl=8", "veth2:10.0.1.2:7001"]

[[rule]]
name = "two-legs"
inputs = ["veth1:239.1.1.2:5002,source=10.0.0.1", "veth1:239.2.1.2:5002,source=10.0.0.1"]
mode = "merge"
outputs = ["veth2:239.10.1.2:6002"]
"#;

#[test]
fn every_endpoint_answers_valid_by_amwas_schemas_by_both_path_forms_with_cors() {
    let schemas = Schemas::find();
    let c = Chain::new("nmos-api").expect("chain");
    let dir = TempDir::new("nmos-api").expect("dir");
    let path = config(&dir, RULES);
    let relay = Relay::start(&c.relay, &["--config", path.to_str().expect("utf-8")]).expect("mcrd");
    let ns = c.relay.name();
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("a listing")
            .iter()
            .map(|x| x.as_str().expect("a name").to_string())
            .collect()
    };
    assert_eq!(names(&get(ns, "/x-nmos/").json()), ["node/", "connection/"]);
    assert_eq!(names(&get(ns, "/x-nmos/node/").json()), ["v1.3/"]);
    assert_eq!(names(&get(ns, "/x-nmos/connection/").json()), ["v1.1/"]);

    // IS-04: every resource, listed and by id.
    let node = "/x-nmos/node/v1.3";
    get_valid(ns, &schemas, &format!("{node}/"), "is-04/v1.3/nodeapi-base.json");
    let me = get_valid(ns, &schemas, &format!("{node}/self"), "is-04/v1.3/node.json");
    assert_eq!(me["label"], "relay under test");
    // (The schemas do refuse: a node without its href, or with a version
    // that is no TAI time.)
    let mut broken = me.clone();
    broken.as_object_mut().expect("an object").remove("href");
    assert!(!schemas.errors("is-04/v1.3/node.json", &broken).is_empty());
    broken = me.clone();
    broken["version"] = Value::String("yesterday".into());
    assert!(!schemas.errors("is-04/v1.3/node.json", &broken).is_empty());
    assert_eq!(me["api"]["endpoints"][0]["port"], 9808);
    let mut by_kind = std::collections::BTreeMap::new();
    for (kind, one) in [
        ("devices", "device"),
        ("sources", "source"),
        ("flows", "flow"),
        ("senders", "sender"),
        ("receivers", "receiver"),
    ] {
        let list = get_valid(
            ns,
            &schemas,
            &format!("{node}/{kind}/"),
            &format!("is-04/v1.3/{kind}.json"),
        );
        for r in list.as_array().expect("a list") {
            let id = r["id"].as_str().expect("an id");
            let single = get_valid(
                ns,
                &schemas,
                &format!("{node}/{kind}/{id}"),
                &format!("is-04/v1.3/{one}.json"),
            );
            assert_eq!(&single, r);
        }
        by_kind.insert(kind, list.as_array().cloned().unwrap_or_default());
    }
    // Two rules: two sources and flows (MPEG-TS, BCP-006-04), three
    // senders, two receivers (the merge one with two legs), one device
    // that lists them all.
    let count = |k: &str| by_kind[k].len();
    assert_eq!(
        [
            count("devices"),
            count("sources"),
            count("flows"),
            count("senders"),
            count("receivers")
        ],
        [1, 2, 2, 3, 2]
    );
    for f in &by_kind["flows"] {
        assert_eq!(
            (f["format"].as_str(), f["media_type"].as_str()),
            (Some("urn:x-nmos:format:mux"), Some("video/MP2T"))
        );
    }
    let device = &by_kind["devices"][0];
    assert_eq!(device["senders"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        device["controls"][0]["href"],
        "http://127.0.0.1:9808/x-nmos/connection/v1.1/"
    );
    let merge = by_kind["receivers"]
        .iter()
        .find(|r| r["label"] == "two-legs input")
        .expect("the merge's receiver");
    assert_eq!(merge["interface_bindings"].as_array().map(Vec::len), Some(2));

    // IS-05: every sender and receiver, each endpoint.
    let conn = "/x-nmos/connection/v1.1";
    get_valid(ns, &schemas, &format!("{conn}/"), "is-05/v1.1/connectionapi-base.json");
    get_valid(
        ns,
        &schemas,
        &format!("{conn}/single/"),
        "is-05/v1.1/connectionapi-single.json",
    );
    get_valid(
        ns,
        &schemas,
        &format!("{conn}/bulk/"),
        "is-05/v1.1/connectionapi-bulk.json",
    );
    for (kind, one) in [("senders", "sender"), ("receivers", "receiver")] {
        let ids = get_valid(
            ns,
            &schemas,
            &format!("{conn}/single/{kind}/"),
            "is-05/v1.1/sender-receiver-base.json",
        );
        let ids = names(&ids);
        let mut want: Vec<String> = by_kind[kind]
            .iter()
            .map(|r| format!("{}/", r["id"].as_str().expect("id")))
            .collect();
        let mut got = ids.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "IS-05's {kind} are IS-04's");
        for id in ids {
            let at = format!("{conn}/single/{kind}/{id}");
            get_valid(ns, &schemas, &at, &format!("is-05/v1.1/connectionapi-{one}.json"));
            let constraints = get_valid(
                ns,
                &schemas,
                &format!("{at}constraints"),
                "is-05/v1.1/constraints-schema.json",
            );
            let active = get_valid(
                ns,
                &schemas,
                &format!("{at}active"),
                &format!("is-05/v1.1/{one}-response-schema.json"),
            );
            get_valid(
                ns,
                &schemas,
                &format!("{at}staged"),
                &format!("is-05/v1.1/{one}-response-schema.json"),
            );
            get_valid(
                ns,
                &schemas,
                &format!("{at}transporttype"),
                "is-05/v1.1/transporttype-response-schema.json",
            );
            // As many legs everywhere, each constrained in every parameter.
            let legs = active["transport_params"].as_array().expect("legs");
            assert_eq!(constraints.as_array().map(Vec::len), Some(legs.len()), "{at}");
            for (leg, c) in legs.iter().zip(constraints.as_array().expect("legs")) {
                let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
                assert_eq!(keys(leg), keys(c), "{at}");
            }
            if kind == "senders" {
                // The transport file is the manifest: an SDP of MPEG-TS
                // over RTP to the sender's destination.
                let sdp = get(ns, &format!("{at}transportfile"));
                assert_eq!(sdp.status, 200, "{}", sdp.text());
                assert_eq!(sdp.header("content-type"), Some("application/sdp"));
                let text = sdp.text();
                let p = &legs[0];
                assert!(
                    text.contains(&format!("m=video {} RTP/AVP 33\r\n", p["destination_port"])),
                    "{text}"
                );
                assert!(
                    text.contains(p["destination_ip"].as_str().expect("an address")),
                    "{text}"
                );
                let manifest = by_kind["senders"]
                    .iter()
                    .find(|s| format!("{}/", s["id"].as_str().expect("id")) == id)
                    .and_then(|s| s["manifest_href"].as_str())
                    .expect("a manifest");
                let local = manifest.strip_prefix("http://127.0.0.1:9808").expect("on this server");
                assert_eq!(get(ns, local).body, sdp.body);
            }
        }
    }

    // Errors: an unknown id is 404 as an NMOS error document; a preflight
    // is answered with the methods and headers.
    let missing = get(ns, &format!("{node}/senders/00000000-0000-5000-8000-000000000000"));
    assert_eq!(missing.status, 404);
    schemas.check("is-04/v1.3/error.json", &missing.json(), "a 404");
    assert_eq!(missing.json()["code"], 404);
    let pre = request(
        ns,
        API,
        "OPTIONS",
        &format!("{conn}/single/senders/"),
        &[
            ("Origin", "null"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "Content-Type"),
        ],
        b"",
    );
    assert_eq!(pre.status, 200);
    assert!(
        pre.header("access-control-allow-methods")
            .is_some_and(|m| m.contains("GET") && m.contains("PATCH"))
    );
    assert!(
        pre.header("access-control-allow-headers")
            .is_some_and(|h| h.contains("Content-Type"))
    );
    // mcrctl shows the same ids.
    let shown = relay.ctl_ok(&["nmos"]).expect("mcrctl nmos");
    for r in by_kind["senders"].iter().chain(&by_kind["receivers"]) {
        assert!(shown.contains(r["id"].as_str().expect("id")), "{shown}");
    }
    assert!(shown.contains(me["id"].as_str().expect("node id")), "{shown}");
}

#[test]
fn ids_stay_across_a_restart_and_versions_move_only_with_what_changed() {
    let c = Chain::new("nmos-ids").expect("chain");
    let dir = TempDir::new("nmos-ids").expect("dir");
    let path = config(&dir, RULES);
    let args = ["--config", path.to_str().expect("utf-8")];
    let relay = Relay::start(&c.relay, &args).expect("mcrd");
    let ns = c.relay.name();
    let senders = |ns: &str| -> Vec<Value> {
        let a = get(ns, "/x-nmos/node/v1.3/senders");
        a.json().as_array().cloned().expect("senders")
    };
    let before = senders(ns);
    assert_eq!(senders(ns), before, "asked again, the same");
    // The plain rule's second output moves to another host.
    relay
        .add_rule(
            "plain",
            "veth1:239.1.1.1:5001",
            &["veth2:239.10.1.1:6001,ttl=8", "veth2:10.0.1.9:7001"],
        )
        .expect("replace the rule");
    let after = senders(ns);
    let ids = |l: &[Value]| {
        let mut v: Vec<String> = l.iter().map(|s| s["id"].as_str().expect("id").to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&after), ids(&before), "the ids stay");
    let version = |s: &Value| -> (u64, u32) {
        let (secs, nanos) = s["version"].as_str().expect("a version").split_once(':').expect("s:ns");
        (secs.parse().expect("secs"), nanos.parse().expect("ns"))
    };
    for b in &before {
        let a = after.iter().find(|a| a["id"] == b["id"]).expect("still there");
        if b["label"].as_str().is_some_and(|l| l.contains("10.0.1.2:7001")) {
            assert_eq!(a["label"], "plain to 10.0.1.9:7001");
            assert!(
                version(a) > version(b),
                "the moved sender's version grows: {b} then {a}"
            );
        } else {
            assert_eq!(a, b, "the others say the same, with the same version");
        }
    }
    // A restart: the same ids (the node's, too).
    let node_id = get(ns, "/x-nmos/node/v1.3/self").json()["id"].clone();
    relay.stop().expect("stop");
    let relay = Relay::start(&c.relay, &args).expect("mcrd again");
    assert_eq!(ids(&senders(ns)), ids(&before), "ids after a restart");
    assert_eq!(get(ns, "/x-nmos/node/v1.3/self").json()["id"], node_id);
    drop(relay);
}

#[test]
fn without_the_nmos_table_there_is_no_node() {
    let c = Chain::new("nmos-off").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    let a = request(c.relay.name(), API, "GET", "/x-nmos/node/v1.3/self", &[], b"");
    assert_eq!(a.status, 422, "{}", a.text());
    assert!(
        a.json()["error"].as_str().is_some_and(|e| e.contains("[daemon.nmos]")),
        "{}",
        a.text()
    );
    let out = relay.ctl(&["nmos"]).expect("mcrctl");
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("[daemon.nmos]"), "{}", out.stderr);
}

/// PATCH `body` to `path` (no token: from this host, where mcrd takes
/// changes only with one, so the relay is started with a token file).
fn patch(ns: &str, path: &str, body: &Value) -> Answer {
    let text = body.to_string();
    request(
        ns,
        API,
        "PATCH",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {TOKEN}")),
        ],
        text.as_bytes(),
    )
}

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// One rule fanning a stream out to two outputs (so two senders).
const FAN: &str = r#"[[rule]]
name = "fan"
input = "veth1:239.1.1.1:5001"
outputs = ["veth2:239.10.1.1:6001", "veth2:239.10.1.2:6002"]
"#;

/// mcrd on the chain's relay with `rules` in its config file, its HTTP
/// changes opened by [`TOKEN`].
fn start_with_token(ns: &Ns, dir: &TempDir, rules: &str) -> Relay {
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).expect("token");
    let mut perms = std::fs::metadata(&token).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&token, perms).expect("chmod");
    let path = config(dir, rules);
    Relay::start(
        ns,
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--http-token-file",
            token.to_str().expect("utf-8"),
        ],
    )
    .expect("mcrd")
}

/// The IS-04 sender or receiver (`kind`: `senders`, `receivers`) labelled
/// `label`: its resource, its id, and the paths of its IS-05 `staged` and
/// `active`.
fn labelled(ns: &str, kind: &str, label: &str) -> (Value, String, String, String) {
    let all = get(ns, &format!("/x-nmos/node/v1.3/{kind}")).json();
    let found = all
        .as_array()
        .expect("a list")
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("no {kind} labelled {label}: {all}"))
        .clone();
    let id = found["id"].as_str().expect("id").to_string();
    let at = format!("/x-nmos/connection/v1.1/single/{kind}/{id}");
    (found, id, format!("{at}/staged"), format!("{at}/active"))
}

/// Rule `name`'s first input, as text.
fn input_of(relay: &Relay, name: &str) -> String {
    relay
        .rule_list()
        .expect("rules")
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.input.to_string())
        .unwrap_or_default()
}

/// Two rules; a controller moves one's receiver to another group (IS-05,
/// immediate) while both streams flow: the untouched rule loses nothing,
/// the moved one carries the new group's stream from the activation on,
/// every packet checked; then a relative activation moves it back at its
/// time (how close is printed), and what cannot be staged is refused.
#[test]
fn an_is05_patch_moves_a_receiver_and_the_other_rules_stream_loses_nothing() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let schemas = Schemas::find();
    let c = Chain::new("nmos-move").expect("chain");
    let dir = TempDir::new("nmos-move").expect("dir");
    let relay = start_with_token(
        &c.relay,
        &dir,
        r#"[[rule]]
name = "moved"
input = "veth1:239.1.1.1:5001"
outputs = ["veth2:239.10.1.1:6001"]

[[rule]]
name = "steady"
input = "veth1:239.1.1.2:5002"
outputs = ["veth2:239.10.1.2:6002"]
"#,
    );
    let ns = c.relay.name();
    let (moved, id, staged, active) = labelled(ns, "receivers", "moved input");

    // The generator sends the moved rule's new group and the steady
    // rule's stream, 3,000 packets each at 500 pps (6 s).
    const N: u64 = 3000;
    let rx = c
        .expect_at_sink("239.10.1.1:6001,239.10.1.2:6002", N, &["--idle-timeout", "3s"])
        .expect("recv");
    let sender = c.send_from_generator_meanwhile("239.1.1.9:5001,239.1.1.2:5002", N, "1000", MINUTES);
    std::thread::sleep(Duration::from_secs(2));
    let a = patch(
        ns,
        &staged,
        &json!({"transport_params": [{"multicast_ip": "239.1.1.9"}], "activation": {"mode": "activate_immediate"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let answer = a.json();
    schemas.check(
        "is-05/v1.1/receiver-response-schema.json",
        &answer,
        "the PATCH's answer",
    );
    assert_eq!(answer["activation"]["mode"], "activate_immediate");
    assert!(answer["activation"]["activation_time"].is_string(), "{answer}");
    let now_active = get_valid(ns, &schemas, &active, "is-05/v1.1/receiver-response-schema.json");
    assert_eq!(now_active["transport_params"][0]["multicast_ip"], "239.1.1.9");
    assert_eq!(now_active["activation"], answer["activation"]);
    assert_eq!(input_of(&relay, "moved"), "veth1:239.1.1.9:5001");
    let after = get(ns, &format!("/x-nmos/node/v1.3/receivers/{id}")).json();
    assert_ne!(
        after["version"], moved["version"],
        "an activation moves the receiver's version"
    );
    assert_eq!(sender.join().expect("sender").expect("send").packets, 2 * N);
    let got = rx.finish(MINUTES).expect("recv done");
    for s in &got.report.streams {
        assert_eq!(
            (s.duplicated, s.reordered, s.corrupted),
            (0, 0, 0),
            "{}: {:?}",
            s.destination,
            s.problems(Some(N))
        );
        if s.destination.starts_with("239.10.1.2") {
            assert_eq!(
                s.received,
                N,
                "the steady rule loses nothing: {:?}",
                s.problems(Some(N))
            );
        } else {
            // From the activation on, every packet: one hole, at the start.
            assert!(s.received > N / 4, "{s:?}");
            assert!(s.holes.len() <= 1 && s.holes.iter().all(|h| h.0 == 0), "{:?}", s.holes);
            assert_eq!(s.received + s.lost, N, "{:?}", s.problems(Some(N)));
        }
    }

    // Back, 300 ms after the PATCH: 202, due at its time.
    let a = patch(
        ns,
        &staged,
        &json!({"transport_params": [{"multicast_ip": "239.1.1.1"}],
                "activation": {"mode": "activate_scheduled_relative", "requested_time": "0:300000000"}}),
    );
    assert_eq!(a.status, 202, "{}", a.text());
    let due = a.json()["activation"]["activation_time"]
        .as_str()
        .expect("when")
        .to_string();
    // Staging anything else meanwhile is refused (423) until it is done.
    let locked = patch(ns, &staged, &json!({"master_enable": true}));
    assert_eq!(locked.status, 423, "{}", locked.text());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let done = loop {
        // One path form while it may change between two requests; both,
        // once it has.
        let a = request(ns, API, "GET", &active, &[], b"").json();
        if a["transport_params"][0]["multicast_ip"] == "239.1.1.1" {
            assert_eq!(get(ns, &active).json(), a);
            break a;
        }
        assert!(std::time::Instant::now() < deadline, "not activated: {a}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(done["activation"]["mode"], "activate_scheduled_relative");
    let ns_of = |t: &str| {
        let (s, n) = t.split_once(':').expect("s:ns");
        s.parse::<u128>().expect("s") * 1_000_000_000 + n.parse::<u128>().expect("ns")
    };
    let late = ns_of(done["activation"]["activation_time"].as_str().expect("time")).saturating_sub(ns_of(&due));
    eprintln!(
        "the scheduled activation came {:.3} ms after its time",
        late as f64 / 1e6
    );

    // What cannot be staged is refused, with the reason, and changes
    // nothing.
    for (body, status) in [
        (json!({"bad": "data"}), 400),
        (json!({"transport_params": [{"interface_ip": "10.9.9.9"}]}), 400),
    ] {
        let a = patch(ns, &staged, &body);
        assert_eq!(a.status, status, "{body}: {}", a.text());
        schemas.check("is-05/v1.1/error.json", &a.json(), "a refusal");
    }
    let a = patch(
        ns,
        &staged,
        &json!({"master_enable": true, "activation": {"mode": null}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(input_of(&relay, "moved"), "veth1:239.1.1.1:5001");
}

/// A controller turns one sender of a rule off (IS-05 `master_enable`
/// false, immediate) while the rule's stream flows, then on again: the
/// rule's other output loses nothing, the one turned off misses one run
/// and carries on, every packet checked; meanwhile IS-05 and IS-04 say it
/// is off, and so does `mcrctl stats`.
#[test]
fn an_is05_sender_turned_off_stops_only_that_output() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let schemas = Schemas::find();
    let c = Chain::new("nmos-off").expect("chain");
    let dir = TempDir::new("nmos-off").expect("dir");
    let relay = start_with_token(&c.relay, &dir, FAN);
    let ns = c.relay.name();
    let (sender, id, staged, active) = labelled(ns, "senders", "fan to 239.10.1.1:6001");

    // 3,000 packets at 500 pps (6 s), to both outputs: the same stream.
    const N: u64 = 3000;
    let rx = c
        .expect_at_sink(
            "239.10.1.1:6001,239.10.1.2:6002",
            N,
            &["--idle-timeout", "3s", "--ids", "0"],
        )
        .expect("recv");
    let sent = c.send_from_generator_meanwhile("239.1.1.1:5001", N, "500", MINUTES);
    std::thread::sleep(Duration::from_millis(1500));
    let off = patch(
        ns,
        &staged,
        &json!({"master_enable": false, "activation": {"mode": "activate_immediate"}}),
    );
    assert_eq!(off.status, 200, "{}", off.text());
    schemas.check(
        "is-05/v1.1/sender-response-schema.json",
        &off.json(),
        "the PATCH's answer",
    );
    let now_active = get_valid(ns, &schemas, &active, "is-05/v1.1/sender-response-schema.json");
    assert_eq!(now_active["master_enable"], false, "{now_active}");
    let is04 = get(ns, &format!("/x-nmos/node/v1.3/senders/{id}")).json();
    assert_eq!(is04["subscription"]["active"], false, "{is04}");
    assert_ne!(is04["version"], sender["version"], "turning it off moves its version");
    let stats = relay.ctl_ok(&["stats"]).expect("stats");
    assert!(stats.contains("turned off (enabled=false)"), "{stats}");
    std::thread::sleep(Duration::from_millis(1500));
    let on = patch(
        ns,
        &staged,
        &json!({"master_enable": true, "activation": {"mode": "activate_immediate"}}),
    );
    assert_eq!(on.status, 200, "{}", on.text());
    let now_active = get_valid(ns, &schemas, &active, "is-05/v1.1/sender-response-schema.json");
    assert_eq!(now_active["master_enable"], true, "{now_active}");

    assert_eq!(sent.join().expect("sender").expect("send").packets, N);
    // The senders now say the bit rate measured (BCP-006-04): 500 packets
    // of 1,024 bytes and 28 of headers a second is 4.2 Mb/s, whose step
    // is 5,000 kbit/s; a busier second only raises the peak.
    let is04 = get(ns, &format!("/x-nmos/node/v1.3/senders/{id}")).json();
    let kbps = is04["bit_rate"].as_u64().unwrap_or(0);
    assert!(kbps >= 5_000, "bit_rate {kbps}: {is04}");
    schemas.check("is-04/v1.3/sender.json", &is04, "a sender with its bit rate");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.report.streams.len(), 2, "{:?}", got.report.streams);
    for s in &got.report.streams {
        assert_eq!(
            (s.duplicated, s.reordered, s.corrupted, s.wrong_stream),
            (0, 0, 0, 0),
            "{}: {:?}",
            s.destination,
            s.problems(Some(N))
        );
        if s.destination.starts_with("239.10.1.2") {
            assert_eq!(
                s.received,
                N,
                "the other output loses nothing: {:?}",
                s.problems(Some(N))
            );
        } else {
            // One run missing, while it was off; all else, in order.
            assert_eq!(s.holes.len(), 1, "{:?}", s.holes);
            assert!(s.lost > 0 && s.received + s.lost == N, "{s:?}");
            assert!(s.holes[0].0 > 0, "it sent before it was turned off: {:?}", s.holes);
        }
    }
}

/// 100 scheduled activations (relative, 50 ms, a sender turned off and on
/// in turn), each read back once, as AMWA's IS-05-01 test_27 does: the
/// first GET of `/active` after the requested time (by this side's clock,
/// counted from the 202) shows it made. How late each was made after its
/// time is printed as a distribution, never asserted.
#[test]
fn a_hundred_scheduled_activations_are_each_carried_out_and_their_lateness_printed() {
    let c = Chain::new("nmos-late").expect("chain");
    let dir = TempDir::new("nmos-late").expect("dir");
    let _relay = start_with_token(&c.relay, &dir, FAN);
    let ns = c.relay.name();
    let (_, _, staged, active) = labelled(ns, "senders", "fan to 239.10.1.1:6001");
    let ns_of = |t: &str| {
        let (s, n) = t.split_once(':').expect("s:ns");
        s.parse::<i128>().expect("s") * 1_000_000_000 + n.parse::<i128>().expect("ns")
    };
    let mut late_us = Vec::new();
    for k in 0..100 {
        let on = k % 2 == 1;
        let a = patch(
            ns,
            &staged,
            &json!({"master_enable": on,
                    "activation": {"mode": "activate_scheduled_relative", "requested_time": "0:50000000"}}),
        );
        assert_eq!(a.status, 202, "{}", a.text());
        // The daemon counted the 50 ms from before it answered.
        std::thread::sleep(Duration::from_millis(50));
        let due = ns_of(a.json()["activation"]["activation_time"].as_str().expect("when"));
        let now = request(ns, API, "GET", &active, &[], b"").json();
        assert_eq!(now["master_enable"], on, "activation {k} is made by its time: {now}");
        assert_eq!(now["activation"]["mode"], "activate_scheduled_relative", "{now}");
        let done = ns_of(now["activation"]["activation_time"].as_str().expect("time"));
        assert!(done >= due, "activation {k} is not stamped before its time: {now}");
        late_us.push((done - due) as f64 / 1e3);
    }
    late_us.sort_by(f64::total_cmp);
    let at = |q: f64| late_us[((late_us.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "100 scheduled activations, µs after their time: min {:.0}, median {:.0}, p90 {:.0}, p99 {:.0}, max {:.0}",
        at(0.0),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}

/// An IPv6 rule's sender moved to an IPv4 group by IS-05 (as AMWA's
/// IS-05-02 test_09 to test_11 do): the PATCH and its activation are
/// taken, the output sends from the interface's IPv4 address, and every
/// packet of the IPv6 input reaches the IPv4 group; its receiver given an
/// IPv4 group with an IPv6 interface address is refused with nothing
/// staged.
#[test]
fn an_ipv6_sender_moved_to_an_ipv4_group_sends_every_packet_there() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let schemas = Schemas::find();
    let c = Chain::new("nmos-v6").expect("chain");
    c.add_ipv6().expect("IPv6 addresses");
    let dir = TempDir::new("nmos-v6").expect("dir");
    let _relay = start_with_token(
        &c.relay,
        &dir,
        r#"[[rule]]
name = "v6"
input = "veth1:[ff3e::1]:5001"
outputs = ["veth2:[ff3e::10]:6001"]
"#,
    );
    let ns = c.relay.name();
    let (_, _, staged, active) = labelled(ns, "senders", "v6 to [ff3e::10]:6001");
    let constraints = get(ns, &staged.replace("/staged", "/constraints")).json();
    assert_eq!(
        constraints[0]["source_ip"]["enum"]
            .as_array()
            .map(|a| a.iter().any(|x| *x == Chain::RELAY_OUT_ADDR.to_string())),
        Some(true),
        "the interface's IPv4 address is a source it can take: {constraints}"
    );
    let moved = patch(
        ns,
        &staged,
        &json!({"transport_params": [{"destination_ip": "239.99.0.1"}], "activation": {"mode": "activate_immediate"}}),
    );
    assert_eq!(moved.status, 200, "{}", moved.text());
    let now = get_valid(ns, &schemas, &active, "is-05/v1.1/sender-response-schema.json");
    let leg = &now["transport_params"][0];
    assert_eq!(
        (leg["destination_ip"].as_str(), leg["source_ip"].as_str()),
        (Some("239.99.0.1"), Some(Chain::RELAY_OUT_ADDR.to_string().as_str())),
        "{now}"
    );

    let (_, _, r_staged, _) = labelled(ns, "receivers", "v6 input");
    let before = get(ns, &r_staged).json();
    let mixed = patch(
        ns,
        &r_staged,
        &json!({"transport_params": [{"multicast_ip": "239.1.1.9", "interface_ip": Chain::RELAY_IN_ADDR6.to_string()}]}),
    );
    assert_eq!(mixed.status, 400, "{}", mixed.text());
    assert!(
        mixed.text().contains("is IPv6 but multicast_ip 239.1.1.9 is IPv4"),
        "{}",
        mixed.text()
    );
    assert_eq!(get(ns, &r_staged).json(), before, "nothing staged");

    const N: u64 = 2000;
    let rx = c
        .expect_at_sink("239.99.0.1:6001", N, &["--idle-timeout", "3s", "--ids", "0"])
        .expect("recv");
    let sent = c.send_from_generator_meanwhile("[ff3e::1]:5001", N, "1000", MINUTES);
    assert_eq!(sent.join().expect("sender").expect("send").packets, N);
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.total.received, N);
}

/// A two-leg receiver (a merge) given an SDP of two legs (RFC 7104's DUP,
/// RFC 4570 source filters) by a controller: its rule takes the file's
/// groups from their sources and merges them (ST 2022-7), each path losing
/// different packets and the output losing none, every packet checked; its
/// flow says what the SDP says the stream is, and its sender's SDP carries
/// that format.
#[test]
fn an_is05_sdp_of_two_legs_makes_the_receivers_merge() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let schemas = Schemas::find();
    let p = TwoPaths::new("nmos-legs").expect("topology");
    let dir = TempDir::new("nmos-legs").expect("dir");
    let relay = start_with_token(
        &p.relay,
        &dir,
        r#"[[rule]]
name = "legs"
inputs = ["in0:239.1.1.1:5001", "in1:239.2.1.1:5001"]
mode = "merge"
outputs = ["out0:239.10.1.1:6001"]
"#,
    );
    let ns = p.relay.name();
    let receivers = get(ns, "/x-nmos/node/v1.3/receivers").json();
    let id = receivers[0]["id"].as_str().expect("id").to_string();
    let sdp = "v=0\r\n\
o=- 7 0 IN IP4 10.0.0.1\r\n\
s=camera 1\r\n\
t=0 0\r\n\
a=group:DUP a b\r\n\
m=video 5004 RTP/AVP 96\r\n\
c=IN IP4 239.5.1.1/32\r\n\
a=source-filter: incl IN IP4 239.5.1.1 10.0.0.1\r\n\
a=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=1280; height=720; exactframerate=50; depth=10; TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017\r\n\
a=mid:a\r\n\
m=video 5004 RTP/AVP 96\r\n\
c=IN IP4 239.6.1.1/32\r\n\
a=source-filter: incl IN IP4 239.6.1.1 10.0.2.1\r\n\
a=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=1280; height=720; exactframerate=50; depth=10; TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017\r\n\
a=mid:b\r\n";
    let a = patch(
        ns,
        &format!("/x-nmos/connection/v1.1/single/receivers/{id}/staged"),
        &json!({"transport_file": {"data": sdp, "type": "application/sdp"}, "activation": {"mode": "activate_immediate"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let answer = a.json();
    schemas.check(
        "is-05/v1.1/receiver-response-schema.json",
        &answer,
        "the PATCH's answer",
    );
    assert_eq!(answer["transport_params"][1]["multicast_ip"], "239.6.1.1", "{answer}");
    let rule = relay
        .rule_list()
        .expect("rules")
        .into_iter()
        .find(|r| r.name == "legs")
        .expect("the rule");
    let inputs: Vec<String> = rule.inputs().map(ToString::to_string).collect();
    assert_eq!(
        inputs,
        [
            "in0:239.5.1.1:5004,source=10.0.0.1",
            "in1:239.6.1.1:5004,source=10.0.2.1"
        ]
    );
    assert_eq!(
        rule.redundancy.as_ref().map(|r| r.mode.to_string()).as_deref(),
        Some("merge")
    );
    let flows = get(ns, "/x-nmos/node/v1.3/flows").json();
    schemas.check("is-04/v1.3/flows.json", &flows, "the flows");
    assert_eq!(
        (&flows[0]["media_type"], &flows[0]["frame_width"]),
        (&json!("video/raw"), &json!(1280))
    );
    let senders = get(ns, "/x-nmos/node/v1.3/senders").json();
    let file = get(
        ns,
        &format!(
            "/x-nmos/connection/v1.1/single/senders/{}/transportfile",
            senders[0]["id"].as_str().expect("id")
        ),
    );
    assert!(file.text().contains("a=rtpmap:96 raw/90000"), "{}", file.text());

    // Path a loses 1 % of the packets, path b another 1 %; b lags 20 ms.
    const N: u64 = 3000;
    let band = |b: bool, band: &str| p.impair(b, &["--loss-band", band, "--seed", "7"]).expect("impairer");
    let (path_a, path_b) = (band(false, "0-1%"), band(true, "1-2%"));
    let rx = Mcrgen::streams("239.10.1.1:6001", TwoPaths::SINK_IF)
        .expect(N)
        .wrap("rtp")
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&p.sink)
        .expect("receiver ready");
    let sent = Mcrgen::streams("239.5.1.1:5004", TwoPaths::GEN_A_IF)
        .count(N)
        .rate("1000")
        .wrap("rtp")
        .arg("--copy")
        .arg("239.6.1.1:5004")
        .arg("--copy-delay")
        .arg("20ms")
        .arg("--copy-interface")
        .arg(TwoPaths::GEN_B_IF)
        .send(&p.generator, MINUTES)
        .expect("sent");
    assert_eq!((sent.packets, sent.copies), (N, N));
    let got = rx.finish(MINUTES).expect("receiver finished");
    let (a, b) = (path_a.stop().expect("path a"), path_b.stop().expect("path b"));
    assert!(
        a.band_dropped > 10 && b.band_dropped > 10,
        "each path lost some: {a:?} {b:?}"
    );
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(
        (s.received, s.unique, s.lost, s.duplicated, s.reordered, s.corrupted),
        (N, N, 0, 0, 0, 0),
        "{:?}",
        s.problems(Some(N))
    );
}

/// One request a test registry got.
#[derive(Debug, Clone)]
struct Got {
    method: String,
    path: String,
    body: Value,
    content_type: Option<String>,
}

/// A stand-in for an IS-04 registry (no registry is packaged): the
/// Registration API's resource and health endpoints, over a plain HTTP/1.1
/// server in a namespace, keeping every request; `broken` makes it answer
/// 503 to everything.
struct TestRegistry {
    got: std::sync::Arc<std::sync::Mutex<Vec<Got>>>,
    broken: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl TestRegistry {
    fn start(ns: &Ns, port: u16) -> TestRegistry {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Got>::new()));
        let broken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (g, b, name) = (got.clone(), broken.clone(), ns.name().to_string());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            mcr_sys::netns::enter(&name).expect("enter the namespace");
            let listener = std::net::TcpListener::bind(("0.0.0.0", port)).expect("bind");
            ready_tx.send(()).expect("ready");
            let mut held: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().expect("clone"));
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap_or("").to_string(),
                    parts.next().unwrap_or("").to_string(),
                );
                let (mut len, mut content_type) = (0usize, None);
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        match k.trim().to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            "content-type" => content_type = Some(v.trim().to_string()),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                g.lock().expect("lock").push(Got {
                    method: method.clone(),
                    path: path.clone(),
                    body: body.clone(),
                    content_type,
                });
                let (status, answer) = if b.load(Ordering::SeqCst) {
                    (503, json!({"code": 503, "error": "down for the test", "debug": null}))
                } else if method == "POST" && path.ends_with("/resource") {
                    let id = body["data"]["id"].as_str().unwrap_or("").to_string();
                    let status = if held.insert(id, body["data"].clone()).is_some() {
                        200
                    } else {
                        201
                    };
                    (status, body["data"].clone())
                } else if method == "POST" && path.contains("/health/nodes/") {
                    let id = path.rsplit('/').next().unwrap_or("");
                    if held.contains_key(id) {
                        (200, json!({"health": "1:0"}))
                    } else {
                        (404, json!({"code": 404, "error": "no such node", "debug": null}))
                    }
                } else if method == "DELETE" {
                    held.remove(path.rsplit('/').next().unwrap_or(""));
                    (204, Value::Null)
                } else {
                    (404, json!({"code": 404, "error": "no such path", "debug": null}))
                };
                let text = if status == 204 {
                    String::new()
                } else {
                    answer.to_string()
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        ready_rx.recv().expect("the registry listens");
        TestRegistry { got, broken }
    }

    fn requests(&self) -> Vec<Got> {
        self.got.lock().expect("lock").clone()
    }

    /// What it holds now (registered and not deleted), by type.
    fn holds(&self) -> std::collections::BTreeMap<String, Value> {
        let mut held = std::collections::BTreeMap::new();
        for g in self.requests() {
            if g.method == "POST" && g.path.ends_with("/resource") {
                held.insert(g.body["data"]["id"].as_str().unwrap_or("").to_string(), g.body.clone());
            } else if g.method == "DELETE" {
                held.remove(g.path.rsplit('/').next().unwrap_or(""));
            }
        }
        held
    }

    fn heartbeats(&self) -> usize {
        self.requests()
            .iter()
            .filter(|g| g.path.contains("/health/nodes/"))
            .count()
    }
}

/// Advertises a registry over mDNS from `ns` (`_nmos-register._tcp`, with
/// `txt`), until the daemon it returns is dropped.
fn advertise_registry(ns: &Ns, name: &str, port: u16, txt: &[(&str, &str)]) -> mdns_sd::ServiceDaemon {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ns, name) = (ns.name().to_string(), name.to_string());
    let txt: std::collections::HashMap<String, String> =
        txt.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    std::thread::spawn(move || {
        // (The daemon's thread is made here, so it lives in the namespace.)
        mcr_sys::netns::enter(&ns).expect("enter the namespace");
        let d = mdns_sd::ServiceDaemon::new().expect("mDNS");
        let info = mdns_sd::ServiceInfo::new(
            "_nmos-register._tcp.local.",
            &name,
            "registry.local.",
            Chain::SINK_ADDR.to_string().as_str(),
            port,
            txt,
        )
        .expect("advert");
        d.register(info).expect("advertised");
        tx.send(d).expect("daemon");
    });
    rx.recv().expect("the advert")
}

fn wait_for(what: &str, secs: u64, ok: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Registries found by mDNS: the node registers with the preferred one
/// that suits it (an advert of another API version is passed over), the
/// node first and each resource after what it hangs on, equal to what its
/// own API says and valid by the Registration API's schema; it heartbeats;
/// a rule added and removed is registered and deleted; when the registry
/// fails, the node moves to the next, with a heartbeat first.
#[test]
fn the_node_registers_with_the_registry_mdns_finds_and_fails_over() {
    let schemas = Schemas::find();
    let c = Chain::new("nmos-reg").expect("chain");
    let dir = TempDir::new("nmos-reg").expect("dir");
    let (first, second, unsuitable) = (
        TestRegistry::start(&c.sink, 8010),
        TestRegistry::start(&c.sink, 8011),
        TestRegistry::start(&c.sink, 8009),
    );
    let common = [("api_proto", "http"), ("api_ver", "v1.2,v1.3"), ("api_auth", "false")];
    let with = |pri: &'static str, ver: &'static str| {
        let mut t: Vec<(&str, &str)> = common.iter().filter(|(k, _)| *k != "api_ver").copied().collect();
        t.extend([("pri", pri), ("api_ver", ver)]);
        t
    };
    let _adverts = [
        advertise_registry(&c.sink, "unsuitable", 8009, &with("0", "v9.0")),
        advertise_registry(&c.sink, "first", 8010, &with("10", "v1.2,v1.3")),
        advertise_registry(&c.sink, "second", 8011, &with("20", "v1.3")),
    ];
    let relay = start_with_token(&c.relay, &dir, RULES);
    let ns = c.relay.name();
    let own = |path: &str| get(ns, path).json();
    let count = 1
        + own("/x-nmos/node/v1.3/devices").as_array().map_or(0, Vec::len)
        + ["sources", "flows", "senders", "receivers"]
            .iter()
            .map(|k| own(&format!("/x-nmos/node/v1.3/{k}")).as_array().map_or(0, Vec::len))
            .sum::<usize>();
    wait_for("registered with the first registry", 30, || {
        first.holds().len() == count
    });
    wait_for("two heartbeats", 15, || first.heartbeats() >= 2);
    assert!(unsuitable.requests().is_empty(), "{:?}", unsuitable.requests());
    assert!(second.requests().is_empty(), "{:?}", second.requests());
    let reqs = first.requests();
    let node_id = own("/x-nmos/node/v1.3/self")["id"].as_str().unwrap_or("?").to_string();
    assert!(
        reqs[0].path.ends_with(&format!("/health/nodes/{node_id}")),
        "a heartbeat first: {:?}",
        reqs[0]
    );
    let posts: Vec<&Got> = reqs.iter().filter(|g| g.path.ends_with("/resource")).collect();
    let order = ["node", "device", "source", "flow", "sender", "receiver"];
    let ranks: Vec<usize> = posts
        .iter()
        .map(|g| order.iter().position(|t| g.body["type"] == *t).expect("a known type"))
        .collect();
    assert!(ranks.is_sorted(), "each after what it hangs on: {ranks:?}");
    for g in &posts {
        assert!(g.path.starts_with("/x-nmos/registration/v1.3/"), "{}", g.path);
        assert_eq!(g.content_type.as_deref(), Some("application/json"));
        schemas.check(
            "is-04/v1.3/registrationapi-resource-post-request.json",
            &g.body,
            "a registration",
        );
    }
    assert_eq!(
        posts[0].body["data"],
        own("/x-nmos/node/v1.3/self"),
        "the node as /self says it"
    );
    let nmos = relay.ctl_ok(&["nmos"]).expect("mcrctl nmos");
    assert!(nmos.contains("registered with http://10.0.1.2:8010"), "{nmos}");
    // The page's overview says it too.
    let overview = request(ns, API, "GET", "/api/overview", &[], b"").json();
    assert_eq!(
        (
            &overview["nmos"]["registration"]["registry"],
            &overview["nmos"]["senders"],
            &overview["nmos"]["node_id"]
        ),
        (&json!("http://10.0.1.2:8010"), &json!(3), &json!(node_id)),
        "{overview}"
    );

    // A rule added is registered; removed, deleted.
    relay
        .ctl_ok(&[
            "add",
            "extra",
            "--input",
            "veth1:239.1.1.77:5077",
            "--output",
            "veth2:239.10.1.77:6077",
        ])
        .expect("added");
    wait_for("the new rule's resources", 15, || first.holds().len() == count + 4);
    relay.ctl_ok(&["remove", "extra"]).expect("removed");
    wait_for("the rule's resources deleted", 15, || first.holds().len() == count);
    let deletes: Vec<String> = first
        .requests()
        .iter()
        .filter(|g| g.method == "DELETE")
        .map(|g| g.path.split('/').nth(5).unwrap_or("").to_string())
        .collect();
    assert_eq!(deletes, ["receivers", "senders", "flows", "sources"], "children first");

    // The first registry fails: the node moves to the second, whose first
    // request is a heartbeat.
    first.broken.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_for("registered with the second registry", 20, || {
        second.holds().len() == count
    });
    let reqs = second.requests();
    assert!(
        reqs[0].path.contains("/health/nodes/"),
        "a heartbeat first: {:?}",
        reqs[0]
    );
    assert!(unsuitable.requests().is_empty());
    let nmos = relay.ctl_ok(&["nmos"]).expect("mcrctl nmos");
    assert!(
        nmos.contains("registered with http://10.0.1.2:8011") && nmos.contains("last error"),
        "{nmos}"
    );
}

/// With no registry, the node advertises itself peer to peer: an
/// `_nmos-node._tcp` advert, seen by mDNS from another host, with its API's
/// port and address and the `ver_*` records, which move when a rule is
/// added.
#[test]
fn with_no_registry_the_node_advertises_itself_peer_to_peer() {
    let c = Chain::new("nmos-p2p").expect("chain");
    let dir = TempDir::new("nmos-p2p").expect("dir");
    let path = dir.path().join("mcrd.toml");
    std::fs::write(
        &path,
        format!("{HEAD}[daemon.nmos]\nlabel = \"p2p\"\nid_seed = \"p2p\"\napi_host = \"10.0.1.1\"\n\n{RULES}"),
    )
    .expect("config");
    let relay = Relay::start(&c.relay, &["--config", path.to_str().expect("utf-8")]).expect("mcrd");
    let (tx, rx) = std::sync::mpsc::channel();
    let name = c.sink.name().to_string();
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        let d = mdns_sd::ServiceDaemon::new().expect("mDNS");
        let events = d.browse("_nmos-node._tcp.local.").expect("browse");
        while let Ok(e) = events.recv() {
            if let mdns_sd::ServiceEvent::ServiceResolved(s) = e
                && tx.send(*s).is_err()
            {
                break;
            }
        }
        let _ = d.shutdown();
    });
    let seen = rx.recv_timeout(Duration::from_secs(30)).expect("the node's advert");
    assert_eq!(seen.port, 9808);
    assert!(
        seen.get_addresses_v4().contains(&"10.0.1.1".parse().expect("ip")),
        "{:?}",
        seen.get_addresses_v4()
    );
    let txt = |k: &str| seen.get_property_val_str(k).map(str::to_string);
    assert_eq!(
        (txt("api_ver"), txt("api_proto"), txt("api_auth")),
        (Some("v1.3".into()), Some("http".into()), Some("false".into()))
    );
    let rcv = txt("ver_rcv").expect("ver_rcv");
    for k in ["ver_slf", "ver_dvc", "ver_src", "ver_flw", "ver_snd"] {
        assert!(txt(k).and_then(|v| v.parse::<u8>().ok()).is_some(), "{k}: {:?}", txt(k));
    }
    relay
        .ctl_ok(&[
            "add",
            "extra",
            "--input",
            "veth1:239.1.1.77:5077",
            "--output",
            "veth2:239.10.1.77:6077",
        ])
        .expect("added");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = rx.recv_timeout(Duration::from_secs(30)).expect("the advert again");
        if s.get_property_val_str("ver_rcv") != Some(rcv.as_str()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "ver_rcv stays {rcv}");
    }
    let nmos = relay.ctl_ok(&["nmos"]).expect("mcrctl nmos");
    assert!(
        nmos.contains("peer-to-peer mode") && nmos.contains("advertised by mDNS"),
        "{nmos}"
    );
}
