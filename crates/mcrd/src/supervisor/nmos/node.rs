//! The relay as an AMWA NMOS Node (`[daemon.nmos]`): what it says about
//! itself, made from its settings and the HTTP server's, and the view of
//! its rules the HTTP server's NMOS APIs answer from (built by
//! `mcr_core::nmos` each time it is asked, with the versions kept here).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcr_core::config::{HttpListen, NmosSettings};
use mcr_core::interfaces::Interfaces;
use mcr_core::nmos::stage::{self, Activation, Refused, Side, Staged};
use mcr_core::nmos::{Ids, Known, NmosView, NodeInfo, Registration, Tai, Versions, tai_now};
use mcr_core::rule::Rule;
use serde_json::{Value, json};

use crate::supervisor::http::{DEFAULT_LISTEN, Options as HttpOptions};

/// The node.
#[derive(Debug)]
pub struct Node {
    info: NodeInfo,
    ids: Ids,
    versions: Versions,
    /// What a PATCH staged, by id, where it differs from what is active.
    staged: HashMap<String, Value>,
    /// Each resource's last activation (its `active`'s `activation`).
    activated: HashMap<String, Value>,
    /// The other end each activation named (`sender_id`, `receiver_id`).
    peers: HashMap<String, Value>,
    /// What each activation said of `master_enable` and of each leg's
    /// `rtp_enabled` (the rule keeps only whether the two leave it on).
    enables: HashMap<String, Enables>,
    /// The transport file (SDP) each receiver's last activation gave, by
    /// the receiver's id: it says what the rule carries.
    files: HashMap<String, String>,
    /// Activations scheduled, by id.
    pending: HashMap<String, Pending>,
    /// Numbers each scheduled activation, so that a cancelled one's timer
    /// does nothing.
    generation: u64,
    /// Each rule's bit rate, as measured (kbit/s, by name).
    bit_rates: HashMap<String, u64>,
    /// Counts the changes of the node's own state (what is staged,
    /// activated, measured), for [`Node::glance`]'s stamp.
    changes: u64,
    /// The view last built for the APIs' reads, and the stamp it was
    /// built at: served again until the stamp moves.
    served: Option<(u64, Arc<NmosView>)>,
    /// How many times a view was built (for the tests).
    builds: u64,
    /// How it registers and advertises itself.
    registration: super::registration::Settings,
    /// Where it is registered (the registration task writes it).
    registered: Arc<Mutex<Registration>>,
}

/// `master_enable`, and each leg's `rtp_enabled`.
#[derive(Debug, Clone, PartialEq)]
struct Enables {
    master: bool,
    legs: Vec<bool>,
}

impl Enables {
    fn of(state: &Value) -> Enables {
        let on = |v: Option<&Value>| v.and_then(Value::as_bool).unwrap_or(true);
        Enables {
            master: on(state.get("master_enable")),
            legs: state["transport_params"]
                .as_array()
                .map(|legs| legs.iter().map(|l| on(l.get("rtp_enabled"))).collect())
                .unwrap_or_default(),
        }
    }

    /// Writes them into `state` (an active or staged endpoint), if they
    /// say what the rule does (on or off), as `mcrctl` may have changed it
    /// since.
    fn show(&self, state: &mut Value) {
        let on = self.master && self.legs.iter().all(|&l| l);
        if state.get("master_enable").and_then(Value::as_bool) != Some(on) {
            return;
        }
        state["master_enable"] = Value::Bool(self.master);
        if let Some(legs) = state["transport_params"].as_array_mut() {
            for (leg, &l) in legs.iter_mut().zip(&self.legs) {
                leg["rtp_enabled"] = Value::Bool(l);
            }
        }
    }
}

/// A scheduled activation.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its number.
    pub generation: u64,
    /// What it activates.
    pub staged: Value,
    /// When.
    pub due: Tai,
}

/// What the supervisor does about a PATCH of `staged`.
#[derive(Debug)]
pub enum Outcome {
    /// Answer now.
    Answer(u16, Value),
    /// Change rule to this now, then answer with `body` (200).
    Apply {
        /// The rule as it is to be.
        rule: Rule,
        /// The answer once it is in effect.
        body: Value,
    },
    /// Answer 202 with `body`, and call back at `due` with `generation`.
    Schedule {
        /// The answer.
        body: Value,
        /// When.
        due: Tai,
        /// Which.
        generation: u64,
    },
}

/// An NMOS error document.
pub fn error(code: u16, what: impl Into<String>) -> Value {
    json!({"code": code, "error": what.into(), "debug": null})
}

fn no_activation() -> Value {
    json!({"mode": null, "requested_time": null, "activation_time": null})
}

/// `kbps` rounded up to the next step of a 1-1.2-1.5-2-2.5-3-4-5-6-8
/// series, 10 kbit/s at the least.
fn step_up(kbps: f64) -> u64 {
    const TENTHS: [u64; 10] = [10, 12, 15, 20, 25, 30, 40, 50, 60, 80];
    let want = kbps.ceil() as u64;
    let mut decade = 1u64;
    loop {
        for t in TENTHS {
            let step = t.saturating_mul(decade);
            if step >= want {
                return step;
            }
        }
        decade = decade.saturating_mul(10);
    }
}

/// The host's name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl Node {
    /// The node `settings` describe, served by the HTTP server of `http`:
    /// none when NMOS is off.
    pub fn new(settings: Option<&NmosSettings>, http: &HttpOptions) -> anyhow::Result<Option<Node>> {
        let Some(s) = settings.filter(|s| s.is_on()) else {
            return Ok(None);
        };
        s.check().map_err(|e| anyhow::anyhow!("[daemon.nmos]: {e}"))?;
        let listen = match http.listen {
            Some(HttpListen::Off) => anyhow::bail!(
                "[daemon.nmos] needs the HTTP server, which serves its APIs: http_listen is none (give an address, or \
                 enabled = false in [daemon.nmos])"
            ),
            Some(HttpListen::At(a)) => a,
            None => DEFAULT_LISTEN.parse()?,
        };
        let hostname = hostname();
        let api_host = match &s.api_host {
            Some(h) => h.clone(),
            None if listen.ip().is_unspecified() => hostname.clone(),
            None => listen.ip().to_string(),
        };
        let seed = match &s.id_seed {
            Some(seed) => seed.clone(),
            None => std::fs::read_to_string("/etc/machine-id")
                .map(|m| m.trim().to_string())
                .ok()
                .filter(|m| !m.is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "[daemon.nmos]: /etc/machine-id cannot be read, and the node's ids are made from it: give id_seed"
                    )
                })?,
        };
        let label = s.label.clone().unwrap_or_else(|| hostname.clone());
        let protocol = if http.tls_cert.is_some() { "https" } else { "http" };
        let registration = super::registration::Settings {
            registries: s.registries.clone(),
            mdns: s.mdns_on(),
            hostname: hostname.clone(),
            api_host: api_host.clone(),
            api_port: listen.port(),
            protocol,
            authorization: http.reads_need_token,
            label: label.clone(),
        };
        Ok(Some(Node {
            info: NodeInfo {
                description: s
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("MCR multicast relay {label}")),
                label,
                hostname,
                api_host,
                api_port: listen.port(),
                protocol,
                authorization: http.reads_need_token,
            },
            ids: Ids::new(&seed),
            versions: Versions::default(),
            staged: HashMap::new(),
            activated: HashMap::new(),
            peers: HashMap::new(),
            enables: HashMap::new(),
            files: HashMap::new(),
            pending: HashMap::new(),
            generation: 0,
            bit_rates: HashMap::new(),
            changes: 0,
            served: None,
            builds: 0,
            registration,
            registered: Arc::new(Mutex::new(Registration::default())),
        }))
    }

    /// What the APIs answer for `rules` now: the rules' resources, with
    /// what is staged and how each was last activated.
    pub fn view<'a>(&mut self, rules: impl Iterator<Item = &'a Rule>, interfaces: &Interfaces) -> NmosView {
        let rules: Vec<Rule> = rules.cloned().collect();
        let files: HashMap<String, String> = rules
            .iter()
            .filter_map(|r| {
                Some((
                    r.name.clone(),
                    self.files.get(&self.ids.receiver(&r.name).to_string())?.clone(),
                ))
            })
            .collect();
        let known = Known {
            peers: self.peers.clone(),
            files,
            bit_rates: self.bit_rates.clone(),
        };
        self.builds += 1;
        let mut view = mcr_core::nmos::build(&self.info, &self.ids, &rules, interfaces, &mut self.versions, &known);
        let overlay = |id: &str, staged: &mut Value, active: &mut Value| {
            if let Some(e) = self.enables.get(id) {
                e.show(staged);
                e.show(active);
            }
            if let Some(s) = self.staged.get(id) {
                *staged = s.clone();
            }
            if let Some(a) = self.activated.get(id) {
                active["activation"] = a.clone();
            }
        };
        for s in &mut view.connection_senders {
            overlay(&s.id, &mut s.staged, &mut s.active);
        }
        for r in &mut view.connection_receivers {
            overlay(&r.id, &mut r.staged, &mut r.active);
        }
        view.registration = self.registered.lock().ok().map(|r| r.clone());
        view
    }

    /// Takes each rule's bit rate from `peaks` (its highest of the last
    /// minute with the headers, bit/s, by name), rounded up to a step of a
    /// 1-1.2-1.5-2-2.5-3-4-5-6-8 series (so that a rule's senders change
    /// version only when its rate moves a step). A rule that carried
    /// nothing yet has none.
    pub fn measured<'a>(&mut self, peaks: impl Iterator<Item = (&'a str, f64)>) {
        let now: HashMap<String, u64> = peaks
            .filter(|&(_, peak)| peak > 0.0)
            .map(|(name, peak)| (name.to_string(), step_up(peak / 1000.0)))
            .collect();
        if now != self.bit_rates {
            self.bit_rates = now;
            self.changes += 1;
        }
    }

    /// What the APIs read (every GET of the Node and Connection APIs, the
    /// registration's resources), for `rules` at table version `version`:
    /// the view built last, shared, as long as nothing it shows moved (its
    /// stamp, [`Node::glance`]'s), with where the node is registered now.
    /// Building 10,000 rules' resources takes a quarter of a second, and so
    /// would a copy of them: a read takes a reference.
    pub fn view_to_read<'a>(
        &mut self,
        rules: impl Iterator<Item = &'a Rule> + Clone,
        version: u64,
        interfaces: &Interfaces,
    ) -> Arc<NmosView> {
        let stamp = self.stamp(version, interfaces);
        let mut view = match self.served.take() {
            Some((s, v)) if s == stamp => v,
            _ => Arc::new(self.view(rules, interfaces)),
        };
        let registration = self.registered.lock().ok().map(|r| r.clone());
        if view.registration != registration {
            // Copied only if a reader still holds the view as it was.
            Arc::make_mut(&mut view).registration = registration;
        }
        self.served = Some((stamp, Arc::clone(&view)));
        view
    }

    /// What moves whenever anything a view shows does: the rule table's
    /// version, the node's own changes and the interfaces.
    fn stamp(&self, version: u64, interfaces: &Interfaces) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&(version, self.changes, format!("{interfaces:?}")), &mut h);
        std::hash::Hasher::finish(&h)
    }

    /// The node at a glance, with `rules` at table version `version` on
    /// `interfaces`: counted, not built (the page asks every second, the
    /// registration twice a second; building 10,000 rules' resources
    /// takes a quarter of a second).
    pub fn glance<'a>(
        &self,
        rules: impl Iterator<Item = &'a Rule>,
        version: u64,
        interfaces: &Interfaces,
    ) -> mcr_core::nmos::NmosGlance {
        let rules: Vec<&Rule> = rules.collect();
        let (senders, receivers) = mcr_core::nmos::count(&rules);
        mcr_core::nmos::NmosGlance {
            node_id: self.ids.node().to_string(),
            senders,
            receivers,
            registration: self.registered.lock().map(|r| r.clone()).unwrap_or_default(),
            stamp: self.stamp(version, interfaces),
        }
    }

    /// Starts registering with registries and advertising the node; its
    /// requests for the view go to `calls`.
    pub fn register(&self, calls: tokio::sync::mpsc::Sender<crate::supervisor::control::Call>) {
        super::registration::spawn(self.registration.clone(), calls, Arc::clone(&self.registered));
    }

    /// A PATCH of the `staged` of sender or receiver `id` (`receiver`),
    /// given `rules`: checked and staged, and what to do about it.
    pub fn stage<'a>(
        &mut self,
        receiver: bool,
        id: &str,
        body: &Value,
        rules: impl Iterator<Item = &'a Rule> + Clone,
        interfaces: &Interfaces,
    ) -> Outcome {
        let view = self.view(rules.clone(), interfaces);
        let found = if receiver {
            view.connection_receivers
                .iter()
                .find(|r| r.id == id)
                .map(|r| (r.rule.clone(), None, r.constraints.clone(), r.staged.clone()))
        } else {
            view.connection_senders
                .iter()
                .find(|s| s.id == id)
                .map(|s| (s.rule.clone(), Some(s.output), s.constraints.clone(), s.staged.clone()))
        };
        let Some((rule_name, output, constraints, staged_now)) = found else {
            let what = if receiver { "receiver" } else { "sender" };
            return Outcome::Answer(404, error(404, format!("no {what} {id}")));
        };
        let side = if receiver { Side::Receiver } else { Side::Sender };
        self.changes += 1;
        let cancels = body.get("activation").and_then(|a| a.get("mode")) == Some(&Value::Null);
        if self.pending.contains_key(id) && !cancels {
            return Outcome::Answer(
                423,
                error(
                    423,
                    "an activation is scheduled: cancel it first (activation mode null)",
                ),
            );
        }
        let Staged { mut staged, activation } = match stage::patch(side, &staged_now, &constraints, body) {
            Ok(s) => s,
            Err(e) => return Outcome::Answer(400, error(400, e)),
        };
        let now = tai_now();
        match activation {
            None => {
                self.staged.insert(id.to_string(), staged.clone());
                Outcome::Answer(200, staged)
            }
            Some(Activation::Cancel) => {
                self.pending.remove(id);
                staged["activation"] = no_activation();
                self.staged.insert(id.to_string(), staged.clone());
                Outcome::Answer(200, staged)
            }
            Some(a) => {
                let Some(rule) = rules.clone().find(|r| r.name == rule_name) else {
                    return Outcome::Answer(404, error(404, format!("rule {rule_name} is gone")));
                };
                // Checked now, scheduled or not: a scheduled activation
                // that could not be carried out is refused at once.
                if let Err((status, e)) = self.rule_for(rule, output, &staged, interfaces) {
                    return Outcome::Answer(status, e);
                }
                let mode = staged["activation"]["mode"].clone();
                let requested = staged["activation"]["requested_time"].clone();
                match a {
                    Activation::Immediate => {
                        let Ok(new_rule) = self.rule_for(rule, output, &staged, interfaces) else {
                            return Outcome::Answer(500, error(500, "the activation could not be made"));
                        };
                        let record = json!({"mode": mode, "requested_time": null, "activation_time": now.to_string()});
                        self.activated(id, &staged, record.clone());
                        staged["activation"] = record;
                        Outcome::Apply {
                            rule: new_rule,
                            body: staged,
                        }
                    }
                    _ => {
                        let due = stage::due(a, now).unwrap_or(now);
                        self.generation += 1;
                        let generation = self.generation;
                        staged["activation"] =
                            json!({"mode": mode, "requested_time": requested, "activation_time": due.to_string()});
                        self.pending.insert(
                            id.to_string(),
                            Pending {
                                generation,
                                staged: staged.clone(),
                                due,
                            },
                        );
                        self.staged.insert(id.to_string(), staged.clone());
                        Outcome::Schedule {
                            body: staged,
                            due,
                            generation,
                        }
                    }
                }
            }
        }
    }

    /// The rule `rule` becomes when what `staged` says of its receiver
    /// (`output` none) or of its output's sender is activated.
    fn rule_for(
        &self,
        rule: &Rule,
        output: Option<usize>,
        staged: &Value,
        interfaces: &Interfaces,
    ) -> Result<Rule, (u16, Value)> {
        let made = match output {
            None => stage::receiver_rule(rule, staged, interfaces),
            Some(k) => stage::sender_rule(rule, k, staged, interfaces),
        };
        made.map_err(|r| match r {
            Refused::Invalid(e) => (400, error(400, e)),
            Refused::NotServed(e) => (501, error(501, e)),
        })
    }

    /// Notes an activation of `id`: what it named as its other end, how it
    /// was made, and that its resource changed; nothing is staged apart
    /// from it any more.
    fn activated(&mut self, id: &str, staged: &Value, record: Value) {
        let peer = staged
            .get("sender_id")
            .or_else(|| staged.get("receiver_id"))
            .cloned()
            .unwrap_or(Value::Null);
        self.changes += 1;
        self.peers.insert(id.to_string(), peer);
        self.enables.insert(id.to_string(), Enables::of(staged));
        match staged["transport_file"]["data"].as_str() {
            Some(sdp) => {
                self.files.insert(id.to_string(), sdp.to_string());
            }
            None if staged["transport_file"].is_object() => {
                self.files.remove(id);
            }
            None => {}
        }
        self.activated.insert(id.to_string(), record);
        self.staged.remove(id);
        if let Ok(u) = id.parse::<uuid::Uuid>() {
            self.versions.touch(u);
        }
    }

    /// The scheduled activations whose time has come by `now` (id and
    /// generation), earliest first: a request that arrives after an
    /// activation's time sees it made, even if its timer has not yet
    /// called back.
    pub fn overdue(&self, now: Tai) -> Vec<(String, u64)> {
        let mut due: Vec<(Tai, String, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.due <= now)
            .map(|(id, p)| (p.due, id.clone(), p.generation))
            .collect();
        due.sort();
        due.into_iter().map(|(_, id, generation)| (id, generation)).collect()
    }

    /// The scheduled activation `generation` of `id` is due, and was taken
    /// up `at`: the rule it makes, if it still stands (none if it was
    /// cancelled or replaced).
    pub fn due<'a>(
        &mut self,
        id: &str,
        generation: u64,
        at: Tai,
        rules: impl Iterator<Item = &'a Rule> + Clone,
        interfaces: &Interfaces,
    ) -> Option<Result<Rule, String>> {
        if self.pending.get(id).map(|p| p.generation) != Some(generation) {
            return None;
        }
        let p = self.pending.remove(id)?;
        let view = self.view(rules.clone(), interfaces);
        let (rule_name, output) = match view.connection_receivers.iter().find(|r| r.id == id) {
            Some(r) => (r.rule.clone(), None),
            None => {
                let s = view.connection_senders.iter().find(|s| s.id == id)?;
                (s.rule.clone(), Some(s.output))
            }
        };
        let rule = rules.clone().find(|r| r.name == rule_name)?;
        let made = self.rule_for(rule, output, &p.staged, interfaces);
        let mut record = p.staged["activation"].clone();
        record["activation_time"] = Value::String(at.to_string());
        self.activated(id, &p.staged, record);
        Some(made.map_err(|(_, e)| e["error"].as_str().unwrap_or("refused").to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node with a fixed id seed and default settings otherwise.
    fn seeded() -> Node {
        let settings = NmosSettings {
            id_seed: Some("seed".into()),
            ..NmosSettings::default()
        };
        Node::new(Some(&settings), &HttpOptions::default())
            .expect("settings")
            .expect("a node")
    }

    #[test]
    fn reads_are_served_from_the_view_built_last_until_something_moves() {
        let mut node = seeded();
        let rules: Vec<Rule> = (0..3)
            .map(|k| {
                Rule::new(
                    format!("r{k}"),
                    format!("lo:239.1.1.{k}:5001").parse().expect("input"),
                    vec![format!("lo:239.10.1.{k}:6001").parse().expect("output")],
                )
            })
            .collect();
        let ifs = Interfaces::default();
        let first = node.view_to_read(rules.iter(), 7, &ifs);
        let again = node.view_to_read(rules.iter(), 7, &ifs);
        assert_eq!(node.builds, 1, "the second read is served from the first");
        assert!(Arc::ptr_eq(&first, &again), "and shares it, not a copy");
        assert_eq!(
            serde_json::to_value(&first).expect("json"),
            serde_json::to_value(&again).expect("json")
        );
        // A new table, the node's own change (a bit rate measured): built
        // again, once each.
        node.view_to_read(rules[..2].iter(), 8, &ifs);
        node.measured([("r0", 5_000_000.0)].into_iter());
        let measured = node.view_to_read(rules[..2].iter(), 8, &ifs);
        node.view_to_read(rules[..2].iter(), 8, &ifs);
        assert_eq!(node.builds, 3);
        assert_eq!(measured.senders.len(), 2);
    }

    #[test]
    fn a_scheduled_activation_is_overdue_from_its_time_and_made_once() {
        let mut node = seeded();
        let rules = [Rule::new(
            "r0",
            "lo:239.1.1.1:5001".parse().expect("input"),
            vec!["lo:239.10.1.1:6001".parse().expect("output")],
        )];
        let ifs = Interfaces::default();
        let sender = node.view_to_read(rules.iter(), 1, &ifs).connection_senders[0]
            .id
            .clone();
        let body = json!({
            "transport_params": [{"destination_port": 6002}],
            "activation": {"mode": "activate_scheduled_relative", "requested_time": "0:200000000"},
        });
        let Outcome::Schedule { due, generation, .. } = node.stage(false, &sender, &body, rules.iter(), &ifs) else {
            panic!("a relative activation is scheduled");
        };
        let just_before = Tai::from_ns(due.as_ns() - 1);
        assert!(node.overdue(just_before).is_empty(), "not before its time");
        assert_eq!(node.overdue(due), vec![(sender.clone(), generation)]);
        // Made by whichever comes first (a request after its time, or the
        // timer): the rule it makes, once.
        let made = node.due(&sender, generation, due, rules.iter(), &ifs);
        let rule = made.expect("still stands").expect("a rule");
        assert_eq!(rule.outputs[0].as_udp().expect("udp").destination.port(), 6002);
        assert!(node.overdue(due.next()).is_empty());
        assert!(
            node.due(&sender, generation, due.next(), rules.iter(), &ifs).is_none(),
            "the late timer does nothing"
        );
        let active = &node.view_to_read(rules.iter(), 2, &ifs).connection_senders[0].active;
        assert_eq!(active["activation"]["activation_time"], json!(due.to_string()));
    }

    #[test]
    fn a_bit_rate_is_rounded_up_to_a_step() {
        for (kbps, step) in [
            (0.2, 10),
            (11.0, 12),
            (10_500.0, 12_000),
            (8_100.0, 10_000),
            (999.0, 1_000),
            (1_000.4, 1_200),
        ] {
            assert_eq!(super::step_up(kbps), step, "{kbps}");
        }
    }
}
