//! The node's registration with an AMWA IS-04 registry (Registration API
//! v1.3), and its peer-to-peer advertisement.
//!
//! - Registries come from `[daemon.nmos] registries` (in that order of
//!   preference) and from DNS-SD over mDNS (`_nmos-register._tcp`, by the
//!   `pri` of their TXT records, the lowest first; adverts whose `api_ver`
//!   lacks v1.3, or whose `api_proto` or `api_auth` differ from the node's,
//!   are not used).
//! - With a registry chosen, the first request is a heartbeat: a registry
//!   that knows the node already (one of a cluster) is simply used; one
//!   that answers 404 gets every resource, the node first and then its
//!   device, sources, flows, senders and receivers. A node POST answered
//!   200 (the registry held a node of that id from before) is deleted and
//!   registered anew.
//! - Every [`HEARTBEAT`] a heartbeat; a 404 registers everything again.
//!   Resources whose version moved are POSTed again, those gone are
//!   DELETEd (children first).
//! - A registry that fails (no answer, a 5xx) is left for the next one by
//!   preference, with a heartbeat first; it is tried again once the others
//!   failed too.
//! - The node is advertised as `_nmos-node._tcp` (with its `ver_*` TXT
//!   records while it is registered nowhere: peer-to-peer mode).
//!
//! The resources are the supervisor's NMOS view (`Request::Nmos`), asked
//! for every second.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::http::{Method, Request as HttpRequest, header};
use hyper_util::rt::TokioIo;
use mcr_core::control::{Reply, Request};
use mcr_core::nmos::{NmosView, Registration};
use mdns_sd::{ServiceDaemon, ServiceEvent, ServiceInfo};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::supervisor::control::Call;

/// Time between heartbeats (IS-04's default).
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long one request to a registry may take.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How often the resources are compared with what is registered.
const POLL: Duration = Duration::from_millis(500);
/// A registry that failed is passed over for this long, while others work.
const PASSED_OVER: Duration = Duration::from_secs(30);
/// How long after the first registry found by mDNS the node waits for
/// others to answer the browse before it chooses: adverts come in over a
/// moment, and the one that answers first need not be the preferred one.
const DISCOVERY: Duration = Duration::from_secs(1);
/// The registration API's path.
const API: &str = "/x-nmos/registration/v1.3";

/// What the node needs to register and advertise itself.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Configured registries (`http://HOST:PORT`), preferred first.
    pub registries: Vec<String>,
    /// Whether to browse and advertise over mDNS.
    pub mdns: bool,
    /// The host name.
    pub hostname: String,
    /// Where the APIs are reached.
    pub api_host: String,
    /// Their port.
    pub api_port: u16,
    /// `http` or `https`.
    pub protocol: &'static str,
    /// Whether the APIs want a token.
    pub authorization: bool,
    /// The node's label (the advert's instance name).
    pub label: String,
}

/// A registry: where it is, and how preferred.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registry {
    base: String,
    host: String,
    port: u16,
    /// Lower is preferred.
    pri: u32,
    how: &'static str,
}

/// Starts registering; what happens is in `status`.
pub fn spawn(settings: Settings, calls: mpsc::Sender<Call>, status: Arc<Mutex<Registration>>) {
    tokio::spawn(run(settings, calls, status));
}

/// The resources, in the order they are registered, as (type, id,
/// version, body).
fn resources(view: &NmosView) -> Vec<(&'static str, String, String, Value)> {
    let mut out = Vec::new();
    let mut add = |kind: &'static str, v: &Value| {
        if let (Some(id), Some(version)) = (v["id"].as_str(), v["version"].as_str()) {
            out.push((kind, id.to_string(), version.to_string(), v.clone()));
        }
    };
    add("node", &view.node);
    for (kind, list) in [
        ("device", &view.devices),
        ("source", &view.sources),
        ("flow", &view.flows),
        ("sender", &view.senders),
        ("receiver", &view.receivers),
    ] {
        for v in list {
            add(kind, v);
        }
    }
    out
}

async fn ask(calls: &mpsc::Sender<Call>, req: Request) -> Option<Reply> {
    let (tx, rx) = oneshot::channel();
    calls.send((req, tx)).await.ok()?;
    Some(rx.await.ok()?.reply)
}

/// The node's resources, asked for only when the stamp moved since
/// `stamp` (building them is the costly part): none if mcrd is stopping.
async fn resources_if_changed(
    calls: &mpsc::Sender<Call>,
    stamp: &mut Option<u64>,
) -> Option<Option<Vec<(&'static str, String, String, Value)>>> {
    let Reply::NmosGlance(g) = ask(calls, Request::NmosGlance {}).await? else {
        return None;
    };
    if *stamp == Some(g.stamp) {
        return Some(None);
    }
    let Reply::Nmos(v) = ask(calls, Request::Nmos {}).await? else {
        return None;
    };
    *stamp = Some(g.stamp);
    Some(Some(resources(&v)))
}

/// One HTTP/1.1 request to `r`: its status and body.
async fn call(r: &Registry, method: Method, path: &str, body: Option<&Value>) -> Result<(u16, Bytes), String> {
    let what = format!("{method} {}{path}", r.base);
    let go = async {
        let stream = tokio::net::TcpStream::connect((r.host.as_str(), r.port))
            .await
            .map_err(|e| format!("{what}: cannot connect: {e}"))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        tokio::spawn(conn);
        let host = if r.host.contains(':') {
            format!("[{}]:{}", r.host, r.port)
        } else {
            format!("{}:{}", r.host, r.port)
        };
        let mut req = HttpRequest::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, host)
            .header(header::ACCEPT, "application/json");
        let bytes = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(b.to_string())
            }
            None => {
                // (A heartbeat: no body, and says so.)
                req = req.header(header::CONTENT_LENGTH, "0");
                Bytes::new()
            }
        };
        let req = req.body(Full::new(bytes)).map_err(|e| format!("{what}: {e}"))?;
        let resp = send.send_request(req).await.map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{what}: {e}"))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(TIMEOUT, go)
        .await
        .map_err(|_| format!("{what}: no answer within {} s", TIMEOUT.as_secs()))?
}

/// Why a registry could not be used.
enum Failed {
    /// It does not know the node: register everything.
    Unknown,
    /// It failed: go to the next one.
    Broken(String),
}

fn answer(what: &str, status: u16, body: &Bytes) -> String {
    let text = String::from_utf8_lossy(body);
    let error = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| text.chars().take(200).collect());
    format!("{what}: HTTP {status}: {error}")
}

async fn heartbeat(r: &Registry, node: &str) -> Result<(), Failed> {
    let path = format!("{API}/health/nodes/{node}");
    match call(r, Method::POST, &path, None).await {
        Ok((200, _)) => Ok(()),
        Ok((404, _)) => Err(Failed::Unknown),
        Ok((s, b)) => Err(Failed::Broken(answer(&format!("heartbeat to {}", r.base), s, &b))),
        Err(e) => Err(Failed::Broken(e)),
    }
}

async fn post(r: &Registry, kind: &str, data: &Value) -> Result<u16, String> {
    let body = json!({"type": kind, "data": data});
    match call(r, Method::POST, &format!("{API}/resource"), Some(&body)).await? {
        (s @ (200 | 201), _) => Ok(s),
        (s, b) => Err(answer(
            &format!("registering {kind} {} with {}", data["id"], r.base),
            s,
            &b,
        )),
    }
}

async fn delete(r: &Registry, kind: &str, id: &str) -> Result<(), String> {
    match call(r, Method::DELETE, &format!("{API}/resource/{kind}s/{id}"), None).await? {
        (200 | 204 | 404, _) => Ok(()),
        (s, b) => Err(answer(&format!("deleting {kind} {id} from {}", r.base), s, &b)),
    }
}

/// Registers the node anew with `r`: the node (deleted first if the
/// registry held it already), then everything else.
async fn register_all(
    r: &Registry,
    all: &[(&'static str, String, String, Value)],
    registered: &mut HashMap<String, (&'static str, String)>,
) -> Result<(), String> {
    registered.clear();
    let Some((_, node_id, _, node)) = all.first().filter(|n| n.0 == "node") else {
        return Err("the node has no id yet".into());
    };
    if post(r, "node", node).await? == 200 {
        // The registry held a node of this id (a restart within its
        // expiry): delete it, with what hangs on it, and start afresh.
        delete(r, "node", node_id).await?;
        post(r, "node", node).await?;
    }
    registered.insert(node_id.clone(), ("node", all[0].2.clone()));
    sync(r, all, registered).await
}

/// POSTs what changed since `registered` and DELETEs what is gone.
async fn sync(
    r: &Registry,
    all: &[(&'static str, String, String, Value)],
    registered: &mut HashMap<String, (&'static str, String)>,
) -> Result<(), String> {
    for (kind, id, version, body) in all {
        if registered.get(id).map(|(_, v)| v) != Some(version) {
            post(r, kind, body).await?;
            registered.insert(id.clone(), (kind, version.clone()));
        }
    }
    let order = ["receiver", "sender", "flow", "source", "device", "node"];
    let mut gone: Vec<(String, &'static str)> = registered
        .iter()
        .filter(|(id, _)| !all.iter().any(|(_, i, _, _)| i == *id))
        .map(|(id, (kind, _))| (id.clone(), *kind))
        .collect();
    gone.sort_by_key(|(_, kind)| order.iter().position(|k| k == kind));
    for (id, kind) in gone {
        delete(r, kind, &id).await?;
        registered.remove(&id);
    }
    Ok(())
}

/// A registry from an mDNS advert, if the node can use it.
fn from_advert(s: &mdns_sd::ResolvedService, settings: &Settings) -> Option<Registry> {
    let txt = |k: &str| s.get_property_val_str(k).map(str::to_string);
    let versions = txt("api_ver").unwrap_or_default();
    if !versions.split(',').any(|v| v.trim() == "v1.3") {
        return None;
    }
    if txt("api_proto").as_deref().unwrap_or("http") != "http" {
        return None;
    }
    if txt("api_auth").as_deref().unwrap_or("false") != if settings.authorization { "true" } else { "false" } {
        return None;
    }
    let pri = txt("pri").and_then(|p| p.parse().ok()).unwrap_or(100);
    let address = s.get_addresses_v4().into_iter().min()?;
    Some(Registry {
        base: format!("http://{address}:{}", s.port),
        host: address.to_string(),
        port: s.port,
        pri,
        how: "mDNS",
    })
}

/// What the advert's `ver_*` records count: each changes when what the
/// node says of that kind changes.
#[derive(Debug, Default)]
struct Counters {
    seen: HashMap<&'static str, (u64, u8)>,
}

impl Counters {
    fn update(&mut self, all: &[(&'static str, String, String, Value)]) -> bool {
        let mut changed = false;
        for kind in ["node", "device", "source", "flow", "sender", "receiver"] {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for (_, id, version, _) in all.iter().filter(|r| r.0 == kind) {
                std::hash::Hash::hash(&(id, version), &mut h);
            }
            let digest = std::hash::Hasher::finish(&h);
            let e = self.seen.entry(kind).or_insert((digest, 0));
            if e.0 != digest {
                *e = (digest, e.1.wrapping_add(1));
                changed = true;
            }
        }
        changed
    }

    fn txt(&self, kind: &'static str) -> String {
        self.seen.get(kind).map_or(0, |e| e.1).to_string()
    }
}

/// The node's advert: `_nmos-node._tcp`, with the `ver_*` records in
/// peer-to-peer mode.
/// Advertises the node; the advert's full name.
fn advertise(d: &ServiceDaemon, settings: &Settings, counters: &Counters) -> Result<String, String> {
    let mut txt: HashMap<String, String> = HashMap::from([
        ("api_proto".to_string(), settings.protocol.to_string()),
        ("api_ver".to_string(), "v1.3".to_string()),
        ("api_auth".to_string(), settings.authorization.to_string()),
    ]);
    {
        let c = counters;
        for (key, kind) in [
            ("ver_slf", "node"),
            ("ver_dvc", "device"),
            ("ver_src", "source"),
            ("ver_flw", "flow"),
            ("ver_snd", "sender"),
            ("ver_rcv", "receiver"),
        ] {
            txt.insert(key.into(), c.txt(kind));
        }
    }
    let instance = format!("{}_{}", settings.label, settings.api_port);
    let host = format!("{}.local.", settings.hostname);
    let info = match settings.api_host.parse::<std::net::IpAddr>() {
        Ok(ip) => ServiceInfo::new("_nmos-node._tcp.local.", &instance, &host, ip, settings.api_port, txt),
        Err(_) => ServiceInfo::new("_nmos-node._tcp.local.", &instance, &host, "", settings.api_port, txt)
            .map(ServiceInfo::enable_addr_auto),
    }
    .map_err(|e| format!("the mDNS advert: {e}"))?;
    let name = info.get_fullname().to_string();
    d.register(info).map_err(|e| format!("the mDNS advert: {e}"))?;
    Ok(name)
}

async fn run(settings: Settings, calls: mpsc::Sender<Call>, status: Arc<Mutex<Registration>>) {
    let set = |f: &dyn Fn(&mut Registration)| {
        if let Ok(mut s) = status.lock() {
            f(&mut s);
        }
    };
    let mut configured = Vec::new();
    for (i, url) in settings.registries.iter().enumerate() {
        match mcr_core::config::registry_address(url) {
            Ok((host, port)) => configured.push(Registry {
                base: format!(
                    "http://{}",
                    url.trim_start_matches("http://").split('/').next().unwrap_or("")
                ),
                host,
                port,
                pri: u32::try_from(i).unwrap_or(u32::MAX),
                how: "configured",
            }),
            Err(e) => set(&|s| s.last_error = Some(e.clone())),
        }
    }
    let daemon = if settings.mdns {
        match ServiceDaemon::new() {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!("NMOS: mDNS cannot start ({e}): registries only from [daemon.nmos] registries");
                None
            }
        }
    } else {
        None
    };
    let browse = daemon
        .as_ref()
        .and_then(|d| d.browse("_nmos-register._tcp.local.").ok());
    let mut found: BTreeMap<String, Registry> = BTreeMap::new();
    let mut failed: HashMap<String, Instant> = HashMap::new();
    let mut current: Option<Registry> = None;
    let mut registered: HashMap<String, (&'static str, String)> = HashMap::new();
    let mut counters = Counters::default();
    let mut advertised_p2p: Option<bool> = None;
    let mut advert: Option<String> = None;
    let mut next_heartbeat = Instant::now();
    let mut stamp: Option<u64> = None;
    let mut all: Vec<(&'static str, String, String, Value)> = Vec::new();
    let mut first_found: Option<Instant> = None;
    loop {
        if let Some(rx) = &browse {
            while let Ok(event) = rx.try_recv() {
                match event {
                    ServiceEvent::ServiceResolved(s) => match from_advert(&s, &settings) {
                        Some(r) => {
                            found.insert(s.fullname.clone(), r);
                        }
                        None => {
                            found.remove(&s.fullname);
                        }
                    },
                    ServiceEvent::ServiceRemoved(_, name) => {
                        found.remove(&name);
                    }
                    _ => {}
                }
            }
        }
        let ver_changed = match resources_if_changed(&calls, &mut stamp).await {
            // mcrd is stopping.
            None => return,
            Some(Some(now)) => {
                all = now;
                counters.update(&all)
            }
            Some(None) => false,
        };
        if all.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        let mut known: Vec<Registry> = configured.iter().chain(found.values()).cloned().collect();
        known.sort_by_key(|r| (r.how != "configured", r.pri));
        known.dedup_by(|a, b| a.base == b.base);
        set(&|s| {
            s.known = known
                .iter()
                .map(|r| format!("{} (priority {}, {})", r.base, r.pri, r.how))
                .collect();
        });
        if current.is_none() && configured.is_empty() && !found.is_empty() {
            let since = *first_found.get_or_insert_with(Instant::now);
            if since.elapsed() < DISCOVERY {
                tokio::time::sleep(POLL).await;
                continue;
            }
        }
        if current.is_none() {
            let now = Instant::now();
            let fresh: Vec<&Registry> = known
                .iter()
                .filter(|r| failed.get(&r.base).is_none_or(|t| now.duration_since(*t) > PASSED_OVER))
                .collect();
            // All failed lately: try them all again, in order.
            let candidates: Vec<&Registry> = if fresh.is_empty() {
                known.iter().collect()
            } else {
                fresh
            };
            for r in candidates {
                let node = all.first().map(|n| n.1.clone()).unwrap_or_default();
                let outcome = match heartbeat(r, &node).await {
                    Ok(()) => Ok(()),
                    Err(Failed::Unknown) => register_all(r, &all, &mut registered).await,
                    Err(Failed::Broken(e)) => Err(e),
                };
                match outcome {
                    Ok(()) => {
                        tracing::info!("NMOS: registered with {} ({} resources)", r.base, registered.len());
                        let (base, n) = (r.base.clone(), registered.len());
                        set(&|s| {
                            s.registry = Some(base.clone());
                            s.resources = n;
                            s.heartbeats = 0;
                        });
                        current = Some(r.clone());
                        next_heartbeat = Instant::now() + HEARTBEAT;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!("NMOS: {e}");
                        failed.insert(r.base.clone(), Instant::now());
                        set(&|s| s.last_error = Some(e.clone()));
                    }
                }
            }
        }
        if let Some(r) = current.clone() {
            let mut outcome = sync(&r, &all, &mut registered).await.map_err(Failed::Broken);
            if outcome.is_ok() && Instant::now() >= next_heartbeat {
                next_heartbeat = Instant::now() + HEARTBEAT;
                outcome = heartbeat(&r, &all[0].1).await;
                if outcome.is_ok() {
                    set(&|s| s.heartbeats += 1);
                }
            }
            match outcome {
                Ok(()) => set(&|s| s.resources = registered.len()),
                Err(Failed::Unknown) => {
                    // The registry dropped the node (it expired there, or
                    // the registry restarted): register everything again.
                    tracing::warn!("NMOS: {} no longer knows the node: registering it again", r.base);
                    set(&|s| s.failovers += 1);
                    if let Err(e) = register_all(&r, &all, &mut registered).await {
                        tracing::warn!("NMOS: {e}");
                        failed.insert(r.base.clone(), Instant::now());
                        set(&|s| {
                            s.last_error = Some(e.clone());
                            s.registry = None;
                        });
                        current = None;
                    }
                }
                Err(Failed::Broken(e)) => {
                    tracing::warn!("NMOS: {e}: trying the next registry");
                    failed.insert(r.base.clone(), Instant::now());
                    set(&|s| {
                        s.last_error = Some(e.clone());
                        s.registry = None;
                        s.failovers += 1;
                    });
                    current = None;
                    continue;
                }
            }
        }
        // The advert, peer to peer (with ver_*), only while registered
        // nowhere: a v1.3 node that is registered does not advertise.
        let p2p = current.is_none();
        if let Some(d) = &daemon
            && (advertised_p2p != Some(p2p) || (p2p && ver_changed))
        {
            let done = if p2p {
                advertise(d, &settings, &counters).map(|name| advert = Some(name))
            } else {
                match advert.take() {
                    Some(name) => d
                        .unregister(&name)
                        .map(|_| ())
                        .map_err(|e| format!("the mDNS advert: {e}")),
                    None => Ok(()),
                }
            };
            match done {
                Ok(()) => {
                    advertised_p2p = Some(p2p);
                    set(&|s| s.advertised = p2p);
                }
                Err(e) => set(&|s| s.last_error = Some(e.clone())),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}
