//! The supervisor's decisions as one state machine, the way quinn-proto
//! holds QUIC without a socket: [`Plane::handle`] takes what happened (a
//! request with the interfaces as just read, a worker's start, message or
//! exit, an interface change, a tick) and the time, and returns what the
//! daemon must do, in order ([`Effect`]: join, leave, hold or free a port,
//! zero statistics slots, publish the table, answer, start a worker or
//! start it after a delay, log). mcrd carries the effects out and feeds
//! back what happened; nothing here opens a socket, starts a process or
//! reads a clock, so every path is tested below without a network.
//!
//! Every change of the rules (an add, a remove, a reload, the start, an
//! interface change) runs the same steps, in [`Plane::change`]: take the
//! claims the changed rules need, and those of every rule whose claim
//! differs on the interfaces as they are now; publish the new table; give
//! up the claims the changed rules held before and those of the removed
//! rules. So the host's memberships are always those the rules need, and
//! a membership is left only once the workers no longer read it.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{Config, Settings};
use crate::control::{ControlError, ErrorKind, Origin, Reply};
use crate::interfaces::{InterfaceInfo, Interfaces};
use crate::rule::Rule;
use crate::snapshot::SlottedRule;

use super::backoff::Backoff;
use super::claims::{Action, Claim, Ledger, claim_of};
use super::replies::{self, Waiting};
use super::rule_table::{ChangeError, Replaced, Reused, RuleTable};
use super::store::{Store, StoreUpdate};

/// How long an `add`, `remove` or `reload` waits for the workers to run
/// the new table before it is answered anyway.
pub const APPLY_WAIT: Duration = Duration::from_secs(5);

/// What happened, for [`Plane::handle`]. `R` is whatever the daemon needs
/// to answer a request (its reply channel); the plane hands it back once.
#[derive(Debug)]
pub enum Event<R> {
    /// `mcrctl add`, with the interfaces as just read.
    Add {
        /// The rule (new, or replacing the one of its name).
        rule: Rule,
        /// The host's interfaces now.
        interfaces: Interfaces,
        /// Where the answer goes.
        reply: R,
    },
    /// `mcrctl remove`.
    Remove {
        /// The rule's name.
        name: String,
        /// The host's interfaces now.
        interfaces: Interfaces,
        /// Where the answer goes.
        reply: R,
    },
    /// `mcrctl switch`: hold a failover rule to one input, or let it
    /// choose again.
    Switch {
        /// The rule's name.
        rule: String,
        /// The input (its number from 1 or its text), or `auto`/none.
        input: Option<String>,
        /// Where the answer goes.
        reply: R,
    },
    /// `mcrctl reload` or SIGHUP: the config file as read and checked
    /// (see [`Plane::config_file`]), or why it could not be.
    Reload {
        /// The file's content (boxed: a config is large beside the other
        /// events).
        config: Box<Result<Config, ControlError>>,
        /// The host's interfaces now.
        interfaces: Interfaces,
        /// Where the answer goes.
        reply: R,
    },
    /// The etcd store said something (see [`super::store`]).
    Store {
        /// What it said.
        update: StoreUpdate,
        /// The host's interfaces now.
        interfaces: Interfaces,
    },
    /// Netlink announced a change: the interfaces as read again.
    Interfaces(Interfaces),
    /// Worker `i`'s process started.
    WorkerStarted(usize),
    /// Worker `i`'s process could not be started.
    WorkerFailedToStart {
        /// Which worker.
        index: usize,
        /// Why.
        why: String,
    },
    /// A worker runs table `version`.
    WorkerApplied {
        /// Which worker.
        index: usize,
        /// The version it applied.
        version: u64,
    },
    /// A worker's process ended.
    WorkerExited {
        /// Which worker.
        index: usize,
        /// How it ended, for the log and `mcrctl workers`.
        how: String,
    },
    /// A worker's restart delay is over.
    RestartDue(usize),
    /// The timer: changes that waited too long are answered.
    Tick,
    /// The daemon stops: the workers' ends are expected.
    Stop,
}

/// What the daemon must do, in the order given.
#[derive(Debug)]
pub enum Effect<R> {
    /// Make the host hold or give up a membership or port. `rule` names
    /// the rule taking it (for the message if a join fails).
    Host {
        /// What to do.
        action: Action,
        /// The rule that takes it; none when it is given up.
        rule: Option<String>,
    },
    /// The interfaces changed: try again to hold the unicast ports that
    /// could not be held (their address may be there now).
    RetryPorts,
    /// Zero these statistics slots before a worker counts into them.
    Zero(Reused),
    /// Send every worker the current table ([`Plane::rules`] on
    /// [`Plane::interfaces`]), which is this version.
    Publish(u64),
    /// Answer a change: `reply` says what was done and whether every
    /// live worker runs it (`applied`; else the wait was over first). The
    /// daemon adds what only it knows: how the rule's joins stand and
    /// what keeps it from forwarding (`joins`, `problems`).
    Answer {
        /// Where the answer goes.
        to: R,
        /// The answer.
        reply: Reply,
        /// The table version with the change.
        version: u64,
    },
    /// Refuse a request; nothing changed.
    Refuse {
        /// Where the answer goes.
        to: R,
        /// Why.
        error: ControlError,
    },
    /// Start worker `i`'s process (then feed back
    /// [`Event::WorkerStarted`] or [`Event::WorkerFailedToStart`]).
    Start(usize),
    /// Feed back [`Event::RestartDue`] for this worker after `delay`.
    RestartAfter {
        /// Which worker.
        index: usize,
        /// How long it waits.
        delay: Duration,
    },
    /// Say this in the log.
    Log(Level, String),
}

/// How loud a [`Effect::Log`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Worth knowing.
    Info,
    /// Something does not work as the rules ask.
    Warn,
    /// A request was refused or a worker cannot start.
    Error,
}

/// Where a worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Started, not yet running the current table.
    Starting,
    /// Running.
    Running,
    /// Dead (or not started yet), waiting out its delay.
    Restarting,
    /// Told to stop.
    Stopping,
}

impl State {
    /// Its name in `mcrctl workers`.
    pub fn name(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Restarting => "restarting",
            State::Stopping => "stopping",
        }
    }

    /// A live worker holds up the answer to a change until it runs it.
    pub fn live(self) -> bool {
        matches!(self, State::Starting | State::Running)
    }
}

/// What the plane knows of one worker.
#[derive(Debug, Clone)]
pub struct Worker {
    /// Where it is in its life.
    pub state: State,
    /// The table version it has applied.
    pub applied: u64,
    /// How often it was restarted.
    pub restarts: u64,
    /// Why it last ended.
    pub last_exit: Option<String>,
    started: Option<Instant>,
    backoff: Backoff,
}

/// The control plane: the rules, what they hold on the host, the workers
/// and the changes waiting for them.
#[derive(Debug)]
pub struct Plane<R> {
    rules: RuleTable,
    ledger: Ledger,
    waiting: Waiting<(Reply, R)>,
    workers: Vec<Worker>,
    /// The interfaces the current table was published with (and, since,
    /// their links' states).
    ifs: Interfaces,
    /// How often each interface's link went down or came up.
    link_changes: BTreeMap<String, u64>,
    config_path: Option<PathBuf>,
    /// The `[daemon]` settings of the file as last loaded (what `save`
    /// writes).
    settings: Settings,
    /// Those it started with (what a reload compares against).
    started_settings: Settings,
    /// The rules added by a request (a reload removes them); the rest
    /// come from the file or the store.
    requested: HashSet<String>,
    /// The etcd store, when the settings name one.
    store: Option<Store>,
}

impl<R> Plane<R> {
    /// A plane with room for `rule_slots` rules and `output_slots`
    /// outputs, `workers` workers (none started), and the config file the
    /// daemon was started with, if any, with its settings.
    pub fn new(
        rule_slots: usize,
        output_slots: usize,
        workers: usize,
        config_path: Option<PathBuf>,
        settings: Settings,
    ) -> Self {
        Plane {
            rules: RuleTable::new(rule_slots, output_slots),
            ledger: Ledger::default(),
            waiting: Waiting::new(APPLY_WAIT),
            workers: (0..workers)
                .map(|_| Worker {
                    state: State::Restarting,
                    applied: 0,
                    restarts: 0,
                    last_exit: None,
                    started: None,
                    backoff: Backoff::default(),
                })
                .collect(),
            ifs: Interfaces::default(),
            link_changes: BTreeMap::new(),
            config_path,
            started_settings: settings.clone(),
            store: settings
                .etcd
                .as_ref()
                .map(|e| Store::new(e.endpoints.clone(), e.prefix.clone(), Instant::now())),
            settings,
            requested: HashSet::new(),
        }
    }

    /// Where rule `name` came from.
    pub fn origin(&self, name: &str) -> Origin {
        if let Some((key, revision)) = self.store.as_ref().and_then(|s| s.key_of(name)) {
            return Origin::Etcd { key, revision };
        }
        if self.requested.contains(name) {
            Origin::Request
        } else {
            Origin::File
        }
    }

    /// What the etcd cache should hold, when it changed since last taken
    /// (see [`Store::take_cache`]).
    pub fn take_store_cache(&mut self) -> Option<(i64, super::store::Entries)> {
        self.store.as_mut()?.take_cache()
    }

    /// How the etcd store stands, when there is one.
    pub fn store_status(&self, now: Instant) -> Option<crate::control::StoreStatus> {
        self.store.as_ref().map(|s| s.status(now))
    }

    /// The rules of the file and of requests: what `save` writes (the
    /// store's are the store's to keep).
    pub fn own_rules(&self) -> Vec<Rule> {
        self.rules()
            .iter()
            .filter(|r| !self.store_gives(&r.rule.name))
            .map(|r| r.rule.clone())
            .collect()
    }

    fn store_gives(&self, name: &str) -> bool {
        self.store.as_ref().is_some_and(|s| s.gives(name))
    }

    /// The refusal of a change by request to a rule the store gives.
    fn store_owns(&self, name: &str) -> Option<ControlError> {
        let (key, _) = self.store.as_ref()?.key_of(name)?;
        Some(ControlError::new(
            ErrorKind::InvalidRequest,
            format!(
                "rule `{name}` comes from etcd key {key}: change it there (mcrd would undo a change made here at the \
                 store's next update)"
            ),
        ))
    }

    /// The rules, in the order added.
    pub fn rules(&self) -> &[SlottedRule] {
        self.rules.rules()
    }

    /// The current table version.
    pub fn version(&self) -> u64 {
        self.rules.version()
    }

    /// The interfaces the current table was published with.
    pub fn interfaces(&self) -> &Interfaces {
        &self.ifs
    }

    /// Every interface the rules use, with its link and how often it went
    /// down or came up.
    pub fn interface_status(&self) -> Vec<crate::control::InterfaceStatus> {
        super::links::status(self.rules(), &self.ifs, &self.link_changes)
    }

    /// What rule `name` holds on the host.
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.ledger.claim(name)
    }

    /// Worker `i`.
    pub fn worker(&self, i: usize) -> &Worker {
        &self.workers[i]
    }

    /// The `[daemon]` settings of the config file as last loaded.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The config file the daemon was started with.
    pub fn config_path(&self) -> Option<&Path> {
        self.config_path.as_deref()
    }

    /// The table the workers are sent: the rules on the interfaces.
    pub fn snapshot(&self) -> crate::snapshot::TableSnapshot {
        self.rules.snapshot(&self.ifs)
    }

    /// The config file to reload, or why there is none.
    pub fn config_file(&self) -> Result<&Path, ControlError> {
        self.config_path().ok_or_else(|| {
            ControlError::new(
                ErrorKind::InvalidConfig,
                "mcrd was started without a config file, so there is none to reload; start it with --config PATH",
            )
        })
    }

    /// The workers that do not yet run the current table.
    pub fn not_ready(&self) -> Vec<usize> {
        let version = self.version();
        (0..self.workers.len())
            .filter(|&i| !(self.workers[i].state == State::Running && self.workers[i].applied >= version))
            .collect()
    }

    /// Takes the config file's rules before any worker starts (so each
    /// starts with them); [`Plane::start_workers`] follows.
    pub fn start(&mut self, rules: Vec<Rule>, interfaces: Interfaces) -> Result<Vec<Effect<R>>, String> {
        self.rules
            .replace_all(rules, &interfaces, 0)
            .map_err(|e| format!("the config file's rules: {e}"))?;
        // Nothing was published before: nothing moved.
        self.ifs = interfaces.clone();
        let mut out = Vec::new();
        let all: Vec<Rule> = self.rules().iter().map(|r| r.rule.clone()).collect();
        self.change(all, Vec::new(), interfaces, true, &mut out);
        Ok(out)
    }

    /// Starts every worker, once the daemon is ready for them.
    pub fn start_workers(&self) -> Vec<Effect<R>> {
        (0..self.workers.len()).map(Effect::Start).collect()
    }

    /// Takes what happened at `now`; returns what to do, in order.
    pub fn handle(&mut self, event: Event<R>, now: Instant) -> Vec<Effect<R>> {
        let mut out = Vec::new();
        match event {
            Event::Add {
                rule,
                interfaces,
                reply,
            } => self.add(rule, interfaces, reply, now, &mut out),
            Event::Remove {
                name,
                interfaces,
                reply,
            } => self.remove(name, interfaces, reply, now, &mut out),
            Event::Reload {
                config,
                interfaces,
                reply,
            } => self.reload(*config, interfaces, reply, now, &mut out),
            Event::Switch { rule, input, reply } => self.switch(rule, input, reply, now, &mut out),
            Event::Store { update, interfaces } => self.store_update(update, interfaces, now, &mut out),
            Event::Interfaces(interfaces) => {
                out.push(Effect::RetryPorts);
                self.change(Vec::new(), Vec::new(), interfaces, false, &mut out);
            }
            Event::WorkerStarted(i) => {
                let w = &mut self.workers[i];
                w.state = State::Starting;
                w.applied = 0;
                w.started = Some(now);
            }
            Event::WorkerFailedToStart { index, why } => {
                let delay = self.died(index, format!("could not start: {why}"), now);
                out.push(Effect::Log(
                    Level::Error,
                    format!("worker {index} could not start: {why}; trying again in {delay:?}"),
                ));
                out.push(Effect::RestartAfter { index, delay });
            }
            Event::WorkerApplied { index, version } => {
                let w = &mut self.workers[index];
                w.applied = version;
                if w.state == State::Starting {
                    w.state = State::Running;
                }
                self.answer(now, false, &mut out);
            }
            Event::WorkerExited { index, how } => {
                if self.workers[index].state == State::Stopping {
                    return out;
                }
                let delay = self.died(index, how.clone(), now);
                out.push(Effect::Log(
                    Level::Warn,
                    format!("worker {index} {how}; restarting in {delay:?}"),
                ));
                out.push(Effect::RestartAfter { index, delay });
                // It no longer holds up answers.
                self.answer(now, false, &mut out);
            }
            Event::RestartDue(i) => {
                let w = &mut self.workers[i];
                if w.state == State::Restarting {
                    w.restarts += 1;
                    out.push(Effect::Start(i));
                }
            }
            Event::Tick => self.answer(now, true, &mut out),
            Event::Stop => self.workers.iter_mut().for_each(|w| w.state = State::Stopping),
        }
        out
    }

    /// Notes that worker `i` ended; returns how long it waits to start
    /// again.
    fn died(&mut self, i: usize, how: String, now: Instant) -> Duration {
        let w = &mut self.workers[i];
        w.state = State::Restarting;
        w.last_exit = Some(how);
        let ran = w
            .started
            .take()
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        w.backoff.after_death(ran)
    }

    /// The lowest table version every live worker runs.
    fn acked(&self) -> u64 {
        replies::acked(
            self.workers.iter().filter(|w| w.state.live()).map(|w| w.applied),
            self.version(),
        )
    }

    /// Answers the changes every live worker now runs (or, with `timed`,
    /// those that waited too long, saying so).
    fn answer(&mut self, now: Instant, timed: bool, out: &mut Vec<Effect<R>>) {
        let acked = self.acked();
        if let Some(s) = &mut self.store {
            s.acked(acked);
        }
        for due in self.waiting.due(self.acked(), now, timed) {
            let (mut reply, to) = due.reply;
            if let Reply::Added { applied, .. }
            | Reply::Removed { applied, .. }
            | Reply::Reloaded { applied, .. }
            | Reply::Switched { applied, .. } = &mut reply
            {
                *applied = due.applied;
            }
            if !due.applied {
                out.push(Effect::Log(
                    Level::Warn,
                    format!(
                        "table {} not yet applied by every worker after {APPLY_WAIT:?}",
                        due.version
                    ),
                ));
            }
            out.push(Effect::Answer {
                to,
                reply,
                version: due.version,
            });
        }
    }

    /// `reply` is given once every live worker runs `version`.
    fn answer_when_applied(&mut self, version: u64, reply: Reply, to: R, now: Instant, out: &mut Vec<Effect<R>>) {
        self.waiting.push(version, now, (reply, to));
        self.answer(now, false, out);
    }

    fn add(&mut self, rule: Rule, interfaces: Interfaces, to: R, now: Instant, out: &mut Vec<Effect<R>>) {
        let name = rule.name.clone();
        if let Some(error) = self.store_owns(&name) {
            return out.push(Effect::Refuse { to, error });
        }
        match self.rules.add(rule.clone(), &interfaces, self.acked()) {
            Err(e) => {
                let error = e.to_control(ErrorKind::InvalidRule, None, |what| {
                    format!("rule `{name}`: the table is full ({what}); remove rules first")
                });
                out.push(Effect::Refuse { to, error });
            }
            Ok(added) => {
                self.requested.insert(name.clone());
                out.push(Effect::Zero(added.reused));
                self.change(vec![rule], Vec::new(), interfaces, true, out);
                let reply = Reply::Added {
                    rule: name,
                    replaced: added.replaced.is_some(),
                    applied: false,
                    joins: Vec::new(),
                    problems: Vec::new(),
                };
                self.answer_when_applied(added.version, reply, to, now, out);
            }
        }
    }

    fn remove(&mut self, name: String, interfaces: Interfaces, to: R, now: Instant, out: &mut Vec<Effect<R>>) {
        if let Some(error) = self.store_owns(&name) {
            return out.push(Effect::Refuse { to, error });
        }
        self.requested.remove(&name);
        let Some((_, version)) = self.rules.remove(&name) else {
            let error = self.no_such_rule(&name);
            out.push(Effect::Refuse { to, error });
            return;
        };
        // Stop forwarding first, then leave the group.
        self.change(Vec::new(), vec![name.clone()], interfaces, true, out);
        let reply = Reply::Removed {
            rule: name,
            applied: false,
        };
        self.answer_when_applied(version, reply, to, now, out);
    }

    fn switch(&mut self, name: String, input: Option<String>, to: R, now: Instant, out: &mut Vec<Effect<R>>) {
        let chosen = self.rules().iter().find(|r| r.rule.name == name).map_or_else(
            || Err(self.no_such_rule(&name)),
            |r| forced_input(&r.rule, input.as_deref()),
        );
        let forced = match chosen {
            Ok(f) => f,
            Err(error) => return out.push(Effect::Refuse { to, error }),
        };
        let Some(version) = self.rules.force(&name, forced.as_ref().map(|(i, _)| i - 1)) else {
            return out.push(Effect::Refuse {
                to,
                error: self.no_such_rule(&name),
            });
        };
        out.push(Effect::Log(
            Level::Info,
            match &forced {
                Some((i, text)) => format!("rule `{name}`: held to input {i} ({text}) by mcrctl switch"),
                None => format!("rule `{name}`: chooses its input again (mcrctl switch auto)"),
            },
        ));
        out.push(Effect::Publish(version));
        let reply = Reply::Switched {
            rule: name,
            input: forced,
            applied: false,
        };
        self.answer_when_applied(version, reply, to, now, out);
    }

    /// The refusal of a request that names no rule of the table.
    fn no_such_rule(&self, name: &str) -> ControlError {
        crate::control::no_such_rule(name, self.rules().iter().map(|r| r.rule.name.as_str()))
    }

    fn reload(
        &mut self,
        config: Result<Config, ControlError>,
        interfaces: Interfaces,
        to: R,
        now: Instant,
        out: &mut Vec<Effect<R>>,
    ) {
        let path = self.config_file().map(Path::to_path_buf);
        let read = path.and_then(|path| config.map(|c| (path, c)));
        let (path, config) = match read {
            Ok(r) => r,
            Err(error) => return self.refuse_reload(error, to, out),
        };
        let before = self.version();
        let shown = path.display().to_string();
        if let Some(clash) = config.rules.iter().find(|r| self.store_gives(&r.name)) {
            let error = self.store_owns(&clash.name).map_or_else(
                || ControlError::new(ErrorKind::InvalidConfig, "a rule of the file is also the store's"),
                |e| {
                    ControlError::new(
                        ErrorKind::InvalidConfig,
                        format!("{shown}: {}; rename the file's rule", e.message),
                    )
                },
            );
            return self.refuse_reload(error, to, out);
        }
        // The store's rules stay: a reload replaces the file's.
        let store_rules: Vec<Rule> = self
            .rules()
            .iter()
            .filter(|r| self.store_gives(&r.rule.name))
            .map(|r| r.rule.clone())
            .collect();
        let file_rules = config.rules.iter().chain(&store_rules).cloned().collect();
        let mut done = match self.rules.replace_all(file_rules, &interfaces, self.acked()) {
            Ok(d) => d,
            Err(e) => {
                let error = e.to_control(ErrorKind::InvalidConfig, Some(&shown), |what| {
                    format!(
                        "{shown}: the new rules do not fit the table ({what}); the room of rules and outputs a \
                         reload replaces is free again only after it, so apply a large change in two reloads"
                    )
                });
                return self.refuse_reload(error, to, out);
            }
        };
        self.requested.clear();
        self.apply_replaced(&mut done, before, interfaces, out);
        let restart_needed = self.started_settings.changed_keys(&config.settings);
        for k in &restart_needed {
            out.push(Effect::Log(
                Level::Warn,
                format!("{shown}: `{k}` changed; it takes effect when mcrd is restarted"),
            ));
        }
        self.settings = config.settings;
        let names = |v: &[Rule]| v.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let changed: Vec<String> = done.changed.iter().map(|(_, r)| r.name.clone()).collect();
        out.push(Effect::Log(
            Level::Info,
            format!(
                "reloaded {shown}: {} added, {} changed, {} removed, {} unchanged",
                done.added.len(),
                changed.len(),
                done.removed.len(),
                done.unchanged
            ),
        ));
        let reloaded = Reply::Reloaded {
            path,
            added: names(&done.added),
            changed,
            removed: names(&done.removed),
            unchanged: done.unchanged,
            applied: false,
            restart_needed,
            problems: Vec::new(),
        };
        self.answer_when_applied(done.version, reloaded, to, now, out);
    }

    /// Applies what the store said: the rules it wants, checked as a
    /// reload checks a file, only the difference applied; a key the table
    /// refuses is refused alone (its previous rule stays), and the rest
    /// applies.
    fn store_update(&mut self, update: StoreUpdate, interfaces: Interfaces, now: Instant, out: &mut Vec<Effect<R>>) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let revision = match &update {
            StoreUpdate::Unreachable { why, kind } => {
                if store.unreachable(why.clone(), *kind, now) {
                    out.push(Effect::Log(
                        Level::Warn,
                        format!(
                            "etcd: {why}; the {} rule(s) it gave keep forwarding, and mcrd keeps trying",
                            store.len()
                        ),
                    ));
                }
                return;
            }
            StoreUpdate::Whole { revision, .. }
            | StoreUpdate::Cached { revision, .. }
            | StoreUpdate::Changes { revision, .. } => *revision,
        };
        let cached = matches!(update, StoreUpdate::Cached { .. });
        if !cached && store.reached(now) {
            out.push(Effect::Log(
                Level::Info,
                format!("etcd: following {} at revision {revision}", store.prefix()),
            ));
        }
        let current: BTreeMap<String, Rule> = store
            .keys()
            .filter_map(|k| {
                let r = self.rules.rules().iter().find(|r| r.rule.name == k)?;
                Some((k.to_string(), r.rule.clone()))
            })
            .collect();
        let mut refused: Vec<(String, String)> = Vec::new();
        let store = self.store.as_mut().expect("checked above");
        let mut wanted = store.wanted(&update, &current);
        refused.append(&mut wanted.refused);
        // A rule of the file's or a request's keeps its name.
        let others: Vec<Rule> = self
            .rules()
            .iter()
            .filter(|r| !current.contains_key(&r.rule.name))
            .map(|r| r.rule.clone())
            .collect();
        for o in &others {
            if wanted.rules.remove(&o.name).is_some() {
                let from = if self.requested.contains(&o.name) {
                    "a request (mcrctl add)"
                } else {
                    "the config file"
                };
                refused.push((
                    o.name.clone(),
                    format!("a rule named `{}` comes from {from}: remove it there first", o.name),
                ));
                wanted.touched.retain(|k| *k != o.name);
            }
        }
        let before = self.version();
        let done = loop {
            let all: Vec<Rule> = others.iter().chain(wanted.rules.values()).cloned().collect();
            let err = match self.rules.replace_all(all, &interfaces, self.acked()) {
                Ok(done) => break Some(done),
                Err(e) => e,
            };
            // The key at fault, if the refusal names one that changed;
            // else each changed key is checked on its own.
            let blamed = match &err {
                ChangeError::Invalid(r) if wanted.touched.contains(&r.rule) => vec![(r.rule.clone(), r.to_string())],
                _ => self.blame_one_by_one(&others, &current, &wanted, &interfaces, &err),
            };
            if blamed.is_empty() {
                out.push(Effect::Log(
                    Level::Error,
                    format!("etcd revision {revision}: nothing applied: {err}"),
                ));
                break None;
            }
            for (key, why) in blamed {
                match current.get(&key) {
                    Some(old) => wanted.rules.insert(key.clone(), old.clone()),
                    None => wanted.rules.remove(&key),
                };
                wanted.touched.retain(|k| *k != key);
                refused.push((key, why));
            }
        };
        let store = self.store.as_mut().expect("checked above");
        for (key, why) in &refused {
            store.refuse(key, revision, why.clone());
            let stays = if current.contains_key(key) {
                "its previous rule stays"
            } else {
                "it gives no rule"
            };
            out.push(Effect::Log(
                Level::Warn,
                format!("etcd key {}: refused: {why}; {stays}", store.full_key(key)),
            ));
        }
        let Some(mut done) = done else {
            store.applied(
                revision,
                self.rules.version(),
                current_keys(&current, store),
                BTreeMap::new(),
            );
            return;
        };
        let applied = wanted
            .rules
            .keys()
            .map(|k| {
                let at = if wanted.touched.contains(k) {
                    revision
                } else {
                    store.revision_of(k).unwrap_or(revision)
                };
                (k.clone(), at)
            })
            .collect();
        store.applied(
            revision,
            self.rules.version(),
            applied,
            std::mem::take(&mut wanted.values),
        );
        if cached {
            store.from_cache(revision);
        }
        if done.version != before || !refused.is_empty() {
            out.push(Effect::Log(
                Level::Info,
                format!(
                    "etcd revision {revision}: {} added, {} changed, {} removed, {} refused, {} unchanged",
                    done.added.len(),
                    done.changed.len(),
                    done.removed.len(),
                    refused.len(),
                    done.unchanged
                ),
            ));
        }
        self.apply_replaced(&mut done, before, interfaces, out);
        let acked = self.acked();
        if let Some(s) = &mut self.store {
            s.acked(acked);
        }
    }

    /// Carries out what a [`RuleTable::replace_all`] did (from table
    /// version `before`): zero the reused slots, then the change's steps
    /// for the rules added or changed and those removed.
    fn apply_replaced(&mut self, done: &mut Replaced, before: u64, interfaces: Interfaces, out: &mut Vec<Effect<R>>) {
        out.push(Effect::Zero(std::mem::take(&mut done.reused)));
        let claim = done
            .added
            .iter()
            .cloned()
            .chain(done.changed.iter().map(|(_, new)| new.clone()));
        let gone = done.removed.iter().map(|r| r.name.clone()).collect();
        self.change(claim.collect(), gone, interfaces, done.version != before, out);
    }

    /// The changed keys of `wanted` the table refuses, each checked on its
    /// own against the rules of elsewhere and the keys accepted so far
    /// (when the table's refusal of them all names no one key); a table
    /// that is full refuses every one.
    fn blame_one_by_one(
        &self,
        others: &[Rule],
        current: &BTreeMap<String, Rule>,
        wanted: &super::store::Wanted,
        interfaces: &Interfaces,
        err: &ChangeError,
    ) -> Vec<(String, String)> {
        if let ChangeError::Full(_) = err {
            return wanted.touched.iter().map(|k| (k.clone(), err.to_string())).collect();
        }
        let mut accepted: Vec<Rule> = others.to_vec();
        accepted.extend(
            wanted
                .rules
                .iter()
                .filter(|(k, _)| !wanted.touched.contains(k))
                .map(|(_, r)| r.clone()),
        );
        let mut blamed = Vec::new();
        for key in &wanted.touched {
            let Some(rule) = wanted.rules.get(key) else {
                continue;
            };
            match crate::validate::check_rule(rule, &accepted, interfaces) {
                Ok(()) => accepted.push(rule.clone()),
                Err(e) => {
                    blamed.push((key.clone(), e.to_string()));
                    if let Some(old) = current.get(key) {
                        accepted.push(old.clone());
                    }
                }
            }
        }
        blamed
    }

    fn refuse_reload(&self, error: ControlError, to: R, out: &mut Vec<Effect<R>>) {
        out.push(Effect::Log(
            Level::Error,
            format!("reload refused, nothing changed: {}", error.message),
        ));
        out.push(Effect::Refuse { to, error });
    }

    /// Every change of the rules goes through here, in the ledger's three
    /// steps ([`super::claims`]): the claims of the rules in `claim` are
    /// taken on `interfaces` (a membership joined again that a rule holds
    /// already is a retry of what failed), with those of every other rule
    /// whose claim differs on them; then the table is published, if the
    /// change made a new version (`bumped`) or the interfaces the rules
    /// use or claim differ from those it was published with (then with a
    /// version of its own); then the claims those rules held before and
    /// those of the rules named in `drop` are given up.
    fn change(
        &mut self,
        mut claim: Vec<Rule>,
        drop: Vec<String>,
        interfaces: Interfaces,
        bumped: bool,
        out: &mut Vec<Effect<R>>,
    ) {
        let moved = self.moved(&interfaces);
        if !moved.is_empty() {
            out.push(Effect::Log(Level::Info, format!("interfaces: {}", moved.join(", "))));
        }
        let links = super::links::changed(self.rules(), &self.ifs, &interfaces);
        for (name, message) in &links {
            *self.link_changes.entry(name.clone()).or_default() += 1;
            out.push(Effect::Log(Level::Warn, message.clone()));
        }
        let stale: Vec<Rule> = self
            .rules()
            .iter()
            .map(|r| &r.rule)
            .filter(|r| !claim.iter().any(|c| c.name == r.name))
            .filter(|r| claim_of(r, &interfaces).as_ref() != self.ledger.claim(&r.name))
            .cloned()
            .collect();
        let publish = bumped || !moved.is_empty() || !stale.is_empty();
        claim.extend(stale);
        let (change, todo) = self.ledger.take(&claim, &interfaces);
        for (rule, actions) in claim.iter().zip(todo) {
            out.extend(actions.into_iter().map(|action| Effect::Host {
                action,
                rule: Some(rule.name.clone()),
            }));
        }
        if publish {
            let version = if bumped { self.version() } else { self.rules.touch() };
            self.ifs = interfaces;
            out.push(Effect::Publish(version));
        } else if !links.is_empty() {
            // Only whether frames pass changed: nothing the workers build
            // their table from, so nothing to publish; the rules' problems
            // and the next comparison read it here.
            self.ifs = interfaces;
        }
        for action in self.ledger.finish(change, drop.iter().map(String::as_str)) {
            out.push(Effect::Host { action, rule: None });
        }
    }

    /// How the interfaces the rules use differ on `now` from those the
    /// table was published with: one phrase each.
    fn moved(&self, now: &Interfaces) -> Vec<String> {
        let used: std::collections::BTreeSet<&str> = self
            .rules()
            .iter()
            .flat_map(|r| {
                (r.rule.inputs().filter_map(crate::rule::Input::interface))
                    .chain(r.rule.outputs.iter().filter_map(crate::rule::Output::interface))
            })
            .collect();
        used.into_iter()
            .filter_map(|name| match (self.ifs.get(name), now.get(name)) {
                (None, Some(i)) => Some(format!("`{name}` appeared (index {})", i.index)),
                (Some(_), None) => Some(format!("`{name}` is gone")),
                (Some(a), Some(b)) if a.index != b.index => {
                    Some(format!("`{name}` was re-created (index {} -> {})", a.index, b.index))
                }
                (Some(a), Some(b)) if a.differs_beyond_link(b) => {
                    Some(format!("`{name}` changed: {}", what_changed(a, b)))
                }
                _ => None,
            })
            .collect()
    }
}

/// The store's keys as they are (nothing applied), with the revisions
/// they had.
fn current_keys(current: &BTreeMap<String, Rule>, store: &Store) -> BTreeMap<String, i64> {
    current
        .keys()
        .map(|k| (k.clone(), store.revision_of(k).unwrap_or(0)))
        .collect()
}

/// What differs between two readings of one interface.
fn what_changed(a: &InterfaceInfo, b: &InterfaceInfo) -> String {
    let list = |v: &[std::net::IpAddr]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
    let mut parts = Vec::new();
    if a.addresses != b.addresses {
        parts.push(format!(
            "addresses [{}] -> [{}]",
            list(&a.addresses),
            list(&b.addresses)
        ));
    }
    if a.mac != b.mac {
        parts.push("MAC".to_string());
    }
    if a.mtu != b.mtu {
        parts.push(format!("MTU {} -> {}", a.mtu, b.mtu));
    }
    if a.master != b.master {
        parts.push(format!("bridge {:?} -> {:?}", a.master, b.master));
    }
    if a.ethernet != b.ethernet {
        parts.push("link type".to_string());
    }
    parts.join(", ")
}

/// The input `input` of failover rule `rule` names (its number from 1
/// and its text), none for `auto` or nothing; or why it names none.
fn forced_input(rule: &Rule, input: Option<&str>) -> Result<Option<(usize, String)>, ControlError> {
    let refuse = |m: String| Err(ControlError::new(ErrorKind::InvalidRequest, m));
    let name = &rule.name;
    match rule.redundancy.as_ref().map(|r| r.mode) {
        Some(crate::rule::Mode::Failover { .. }) => {}
        Some(m) => {
            let what = match m {
                crate::rule::Mode::Arbitrate { .. } => "arbitrates its lines".to_string(),
                _ => format!("is a {}", m.name()),
            };
            return refuse(format!(
                "rule `{name}` {what}: it takes every input at once, so there is none to switch to"
            ));
        }
        None => return refuse(format!("rule `{name}` has one input: there is none to switch to")),
    }
    let texts: Vec<String> = rule.inputs().map(ToString::to_string).collect();
    let input = match input.map(str::trim) {
        None | Some("auto") => return Ok(None),
        Some(i) => i,
    };
    let at = match input.parse::<usize>() {
        Ok(n) => Some(n).filter(|n| (1..=texts.len()).contains(n)),
        Err(_) => texts.iter().position(|t| t == input).map(|k| k + 1),
    };
    match at {
        Some(n) => Ok(Some((n, texts[n - 1].clone()))),
        None => {
            let listed: Vec<String> = texts
                .iter()
                .enumerate()
                .map(|(k, t)| format!("{} = {t}", k + 1))
                .collect();
            refuse(format!(
                "rule `{name}` has no input `{input}`: name one by its number or text ({}), or `auto`",
                listed.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::Link;
    use crate::plane::fixture::{Host, RULE_KINDS, ifs, needed, rule};
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    const WORKERS: usize = 3;

    #[derive(Debug, Clone)]
    enum Op {
        /// `mcrctl add` of rule `r{n}` with input `w`, the interfaces
        /// having changed to these first (before netlink said so).
        Add(u8, u8, Option<[bool; 2]>),
        Remove(u8),
        /// A reload of a file with these rules, or of one that does not
        /// read.
        Reload(Option<Vec<(u8, u8)>>),
        Interfaces([bool; 2]),
        /// Worker `i` applies the newest table it was sent.
        Apply(usize),
        /// Worker `i`'s process dies.
        Kill(usize),
        /// Worker `i` cannot be started (or can again).
        Break(usize),
        /// This many ms pass: restart delays that are over fire, and the
        /// timer ticks.
        Wait(u64),
        /// The store's changes: key `k{n}` or `r{n}` (a name the file or a
        /// request may use too) set to rule kind `w`, to a value that does
        /// not parse (`None`), or deleted; or the whole store as such; or
        /// the store unreachable.
        Store(StoreOp),
    }

    #[derive(Debug, Clone)]
    enum StoreOp {
        Changes(Vec<(bool, u8, Option<Option<u8>>)>),
        Whole(Vec<(bool, u8, Option<u8>)>),
        Unreachable,
    }

    fn store_op() -> impl Strategy<Value = StoreOp> {
        let key = (proptest::bool::weighted(0.2), 0u8..4);
        let value = proptest::option::weighted(0.85, 0u8..RULE_KINDS);
        prop_oneof![
            4 => proptest::collection::vec((key.clone(), proptest::option::weighted(0.8, value.clone())), 1..5)
                .prop_map(|v| StoreOp::Changes(v.into_iter().map(|((r, n), v)| (r, n, v)).collect())),
            1 => proptest::collection::vec((key, value), 0..5)
                .prop_map(|v| StoreOp::Whole(v.into_iter().map(|((r, n), v)| (r, n, v)).collect())),
            1 => Just(StoreOp::Unreachable),
        ]
    }

    /// A store key's value: rule kind `w`'s fields, or nonsense.
    fn store_value(name: &str, w: Option<u8>) -> Vec<u8> {
        let Some(w) = w else {
            return b"outputs = 7".to_vec();
        };
        let text = Config::render(&Settings::default(), &[rule(name, w)]).expect("render");
        let body = text.split_once("[[rule]]\n").expect("a rule table").1;
        body.as_bytes().to_vec()
    }

    fn key_name(r: bool, n: u8) -> String {
        if r { format!("r{n}") } else { format!("k{n}") }
    }

    fn op() -> impl Strategy<Value = Op> {
        let w = 0..WORKERS;
        prop_oneof![
            4 => (0u8..6, 0u8..RULE_KINDS, proptest::option::weighted(0.2, any::<[bool; 2]>()))
                .prop_map(|(n, w, i)| Op::Add(n, w, i)),
            2 => (0u8..6).prop_map(Op::Remove),
            1 => proptest::option::weighted(0.8, proptest::collection::vec((0u8..6, 0u8..RULE_KINDS), 0..6)).prop_map(Op::Reload),
            1 => any::<[bool; 2]>().prop_map(Op::Interfaces),
            6 => w.clone().prop_map(Op::Apply),
            1 => w.clone().prop_map(Op::Kill),
            1 => w.prop_map(Op::Break),
            2 => (0u64..3000).prop_map(Op::Wait),
            3 => store_op().prop_map(Op::Store),
        ]
    }

    /// The daemon around the plane, as the effects leave it, with the
    /// checks that every effect keeps the promises of the module.
    struct Daemon {
        plane: Plane<u32>,
        host: Host,
        present: [bool; 2],
        now: Instant,
        /// The newest table published.
        published: u64,
        /// Per worker: its process runs, the table it applied, it cannot
        /// be started.
        alive: [bool; WORKERS],
        applied: [u64; WORKERS],
        broken: [bool; WORKERS],
        /// Restart delays under way: when, and for whom.
        restarts: Vec<(Instant, usize)>,
        /// Requests asked (with when) and answered.
        asked: BTreeMap<u32, Instant>,
        answered: BTreeSet<u32>,
        /// The store's revision.
        revision: i64,
    }

    impl Daemon {
        fn new() -> Self {
            let settings = Settings {
                etcd: Some(crate::config::EtcdSettings {
                    endpoints: vec!["http://127.0.0.1:2379".into()],
                    prefix: "/mcr/".into(),
                    ..Default::default()
                }),
                ..Settings::default()
            };
            Daemon {
                plane: Plane::new(6, 6, WORKERS, Some("/etc/mcr/mcrd.toml".into()), settings),
                revision: 0,
                host: Host::default(),
                present: [true, true],
                now: Instant::now(),
                published: 0,
                alive: [false; WORKERS],
                applied: [0; WORKERS],
                broken: [false; WORKERS],
                restarts: Vec::new(),
                asked: BTreeMap::new(),
                answered: BTreeSet::new(),
            }
        }

        fn ask(&mut self) -> u32 {
            let token = u32::try_from(self.asked.len()).expect("few requests");
            self.asked.insert(token, self.now);
            token
        }

        fn feed(&mut self, event: Event<u32>) -> Result<(), TestCaseError> {
            let effects = self.plane.handle(event, self.now);
            self.carry_out(effects)
        }

        fn carry_out(&mut self, effects: Vec<Effect<u32>>) -> Result<(), TestCaseError> {
            for e in effects {
                match e {
                    Effect::Host { action, rule } => {
                        let taking = matches!(action, Action::Join { .. } | Action::HoldPort(_));
                        prop_assert_eq!(taking, rule.is_some(), "{:?} for {:?}", action, rule);
                        self.host.apply(&action);
                    }
                    Effect::RetryPorts | Effect::Zero(_) | Effect::Log(..) => {}
                    Effect::Publish(v) => {
                        prop_assert!(v > self.published, "table {} published after {}", v, self.published);
                        self.published = v;
                    }
                    Effect::Answer { to, reply, version } => {
                        let applied = match reply {
                            Reply::Added { applied, .. }
                            | Reply::Removed { applied, .. }
                            | Reply::Reloaded { applied, .. } => applied,
                            other => return Err(TestCaseError::fail(format!("answered {other:?}"))),
                        };
                        prop_assert!(self.answered.insert(to), "request {} answered twice", to);
                        let runs = (0..WORKERS)
                            .filter(|&i| self.alive[i])
                            .all(|i| self.applied[i] >= version);
                        prop_assert!(
                            !applied || runs,
                            "said applied, but a live worker does not run {}",
                            version
                        );
                        let waited = self.now - self.asked[&to];
                        prop_assert!(applied || waited >= APPLY_WAIT, "answered early ({:?})", waited);
                    }
                    Effect::Refuse { to, .. } => {
                        prop_assert!(self.answered.insert(to), "request {} answered twice", to);
                    }
                    Effect::Start(i) => {
                        prop_assert!(!self.alive[i], "worker {} started twice", i);
                        let e = if self.broken[i] {
                            Event::WorkerFailedToStart {
                                index: i,
                                why: "no such file".into(),
                            }
                        } else {
                            self.alive[i] = true;
                            self.applied[i] = 0;
                            Event::WorkerStarted(i)
                        };
                        self.feed(e)?;
                    }
                    Effect::RestartAfter { index, delay } => {
                        prop_assert!(!self.alive[index], "worker {} restarted while it runs", index);
                        prop_assert!(
                            self.restarts.iter().all(|(_, i)| *i != index),
                            "worker {} restarted twice",
                            index
                        );
                        self.restarts.push((self.now + delay, index));
                    }
                }
            }
            Ok(())
        }

        fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
            match op {
                Op::Add(n, w, moved) => {
                    self.present = moved.unwrap_or(self.present);
                    let reply = self.ask();
                    self.feed(Event::Add {
                        rule: rule(&format!("r{n}"), w),
                        interfaces: ifs(&self.present),
                        reply,
                    })
                }
                Op::Remove(n) => {
                    let reply = self.ask();
                    self.feed(Event::Remove {
                        name: format!("r{n}"),
                        interfaces: ifs(&self.present),
                        reply,
                    })
                }
                Op::Reload(file) => {
                    let config = file
                        .map(|rules| {
                            let by_name: BTreeMap<String, Rule> = rules
                                .iter()
                                .map(|&(n, w)| (format!("r{n}"), rule(&format!("r{n}"), w)))
                                .collect();
                            let rules: Vec<Rule> = by_name.into_values().collect();
                            let text = Config::render(&Settings::default(), &rules).expect("render");
                            Config::parse(&text).expect("parse")
                        })
                        .ok_or_else(|| ControlError::new(ErrorKind::InvalidConfig, "cannot read it"));
                    let reply = self.ask();
                    self.feed(Event::Reload {
                        config: Box::new(config),
                        interfaces: ifs(&self.present),
                        reply,
                    })
                }
                Op::Interfaces(p) => {
                    self.present = p;
                    self.feed(Event::Interfaces(ifs(&p)))
                }
                Op::Apply(i) if self.alive[i] => {
                    self.applied[i] = self.published;
                    self.feed(Event::WorkerApplied {
                        index: i,
                        version: self.published,
                    })
                }
                Op::Kill(i) if self.alive[i] => {
                    self.alive[i] = false;
                    self.feed(Event::WorkerExited {
                        index: i,
                        how: "killed by signal 9".into(),
                    })
                }
                Op::Apply(_) | Op::Kill(_) => Ok(()),
                Op::Break(i) => {
                    self.broken[i] = !self.broken[i];
                    Ok(())
                }
                Op::Wait(ms) => self.wait(Duration::from_millis(ms)),
                Op::Store(op) => {
                    self.revision += 1;
                    let update = match op {
                        StoreOp::Changes(changes) => StoreUpdate::Changes {
                            revision: self.revision,
                            changes: changes
                                .into_iter()
                                .map(|(r, n, v)| {
                                    let k = key_name(r, n);
                                    let v = v.map(|w| store_value(&k, w));
                                    (k, v)
                                })
                                .collect(),
                        },
                        StoreOp::Whole(entries) => StoreUpdate::Whole {
                            revision: self.revision,
                            entries: entries
                                .into_iter()
                                .map(|(r, n, w)| {
                                    let k = key_name(r, n);
                                    let v = store_value(&k, w);
                                    (k, v)
                                })
                                .collect::<BTreeMap<_, _>>()
                                .into_iter()
                                .collect(),
                        },
                        StoreOp::Unreachable => StoreUpdate::Unreachable {
                            why: "connection refused".into(),
                            kind: crate::control::StoreProblem::Unreachable,
                        },
                    };
                    self.feed(Event::Store {
                        update,
                        interfaces: ifs(&self.present),
                    })
                }
            }
        }

        fn wait(&mut self, d: Duration) -> Result<(), TestCaseError> {
            self.now += d;
            let (due, later): (Vec<_>, Vec<_>) = self.restarts.drain(..).partition(|(at, _)| *at <= self.now);
            self.restarts = later;
            for (_, i) in due {
                self.feed(Event::RestartDue(i))?;
            }
            self.feed(Event::Tick)
        }

        /// What holds after every step.
        fn check(&self) -> Result<(), TestCaseError> {
            let on = self.plane.interfaces();
            let rules: Vec<&Rule> = self.plane.rules().iter().map(|r| &r.rule).collect();
            let want = needed(rules.iter().copied(), on);
            prop_assert_eq!(
                &self.host.joined,
                &want.joined,
                "memberships held are not those the rules need"
            );
            prop_assert_eq!(&self.host.held, &want.held, "ports held are not those the rules need");
            for r in &rules {
                let claim = claim_of(r, on);
                prop_assert_eq!(self.plane.claim(&r.name), claim.as_ref());
            }
            prop_assert_eq!(
                self.published,
                self.plane.version(),
                "the workers were not sent the newest table"
            );
            // Every rule the store gives is in the table under its key's
            // name, and the rest are the file's or a request's.
            let status = self.plane.store_status(self.now).expect("a store");
            let from_store = rules
                .iter()
                .filter(|r| matches!(self.plane.origin(&r.name), Origin::Etcd { .. }))
                .count();
            prop_assert_eq!(status.rules, from_store, "the store's rules are not the table's");
            prop_assert_eq!(
                self.plane.own_rules().len() + from_store,
                rules.len(),
                "save would lose or repeat rules"
            );
            for i in 0..WORKERS {
                let pending = self.restarts.iter().filter(|(_, w)| *w == i).count();
                prop_assert_eq!(
                    pending,
                    usize::from(!self.alive[i]),
                    "worker {} is dead and not restarting",
                    i
                );
                prop_assert_eq!(self.plane.worker(i).state.live(), self.alive[i]);
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Random requests, interface changes, worker deaths and the
        /// passing of time, as mcrd feeds them. After every step: the
        /// host holds exactly the memberships and ports the rules need on
        /// the interfaces the workers were sent, and gives up nothing it
        /// does not hold; the workers were sent the newest table, and
        /// table versions only grow; a dead worker has exactly one restart
        /// under way and is never started twice; every answer comes once,
        /// "applied" only when every live worker runs the change, and
        /// otherwise only after the wait. At the end every request has
        /// been answered.
        #[test]
        fn the_plane_keeps_its_promises(ops in proptest::collection::vec(op(), 1..60)) {
            let mut d = Daemon::new();
            let rules = vec![rule("r0", 0), rule("r1", 9), rule("r2", 16)];
            let start = d.plane.start(rules, ifs(&d.present)).map_err(TestCaseError::fail)?;
            d.carry_out(start)?;
            let workers = d.plane.start_workers();
            d.carry_out(workers)?;
            d.check()?;
            for op in ops {
                d.step(op)?;
                d.check()?;
            }
            d.wait(APPLY_WAIT)?;
            d.check()?;
            let asked: BTreeSet<u32> = d.asked.keys().copied().collect();
            prop_assert_eq!(asked, d.answered.clone(), "requests not answered");
        }
    }

    fn plane() -> Plane<u32> {
        Plane::new(8, 8, 1, None, Settings::default())
    }

    /// The refusals among `effects`, as (to, message).
    fn refusals(effects: &[Effect<u32>]) -> Vec<(u32, String)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Refuse { to, error } => Some((*to, error.message.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_store_owns_its_rules_and_a_broken_key_changes_nothing_else() {
        let now = Instant::now();
        let settings = Settings {
            etcd: Some(crate::config::EtcdSettings {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                prefix: "/mcr/".into(),
                ..Default::default()
            }),
            ..Settings::default()
        };
        let mut p: Plane<u32> = Plane::new(8, 8, 1, Some("/etc/mcr/mcrd.toml".into()), settings);
        let on = ifs(&[true, true]);
        p.start(vec![rule("f", 0)], on.clone()).expect("start");
        let store = |p: &mut Plane<u32>, revision, changes: Vec<(&str, Option<Vec<u8>>)>| {
            let changes = changes.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            p.handle(
                Event::Store {
                    update: StoreUpdate::Changes { revision, changes },
                    interfaces: ifs(&[true, true]),
                },
                now,
            )
        };
        // `f` is the file's; `a` is new; `b` does not parse.
        store(
            &mut p,
            3,
            vec![
                ("a", Some(store_value("a", Some(1)))),
                ("f", Some(store_value("f", Some(2)))),
                ("b", Some(store_value("b", None))),
            ],
        );
        let names: Vec<&str> = p.rules().iter().map(|r| r.rule.name.as_str()).collect();
        assert_eq!(names, ["f", "a"]);
        assert_eq!(p.origin("f"), Origin::File);
        assert_eq!(
            p.origin("a"),
            Origin::Etcd {
                key: "/mcr/a".into(),
                revision: 3
            }
        );
        let st = p.store_status(now).expect("store");
        let refused: Vec<&str> = st.refused.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(refused, ["/mcr/b", "/mcr/f"]);
        assert!(st.refused[1].error.contains("comes from the config file"), "{st:?}");
        // A broken change of `a` leaves `a` as it was.
        let before = p.rules()[1].clone();
        store(&mut p, 4, vec![("a", Some(store_value("a", None)))]);
        assert_eq!(p.rules()[1], before);
        assert_eq!(
            p.origin("a"),
            Origin::Etcd {
                key: "/mcr/a".into(),
                revision: 3
            }
        );
        // Requests may not change the store's rules; save leaves them out.
        let add = p.handle(
            Event::Add {
                rule: rule("a", 3),
                interfaces: on.clone(),
                reply: 1,
            },
            now,
        );
        let remove = p.handle(
            Event::Remove {
                name: "a".into(),
                interfaces: on.clone(),
                reply: 2,
            },
            now,
        );
        let refused: Vec<(u32, String)> = refusals(&add).into_iter().chain(refusals(&remove)).collect();
        assert_eq!(refused.len(), 2, "{add:?} {remove:?}");
        for (to, m) in refused {
            assert!(m.contains("comes from etcd key /mcr/a"), "{to}: {m}");
        }
        assert_eq!(p.own_rules().iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["f"]);
        // A reload keeps them, and refuses a file that names one of them.
        let reload = |p: &mut Plane<u32>, rules: Vec<Rule>, reply| {
            let text = Config::render(&Settings::default(), &rules).expect("render");
            p.handle(
                Event::Reload {
                    config: Box::new(Ok(Config::parse(&text).expect("parse"))),
                    interfaces: ifs(&[true, true]),
                    reply,
                },
                now,
            )
        };
        reload(&mut p, vec![rule("g", 4)], 3);
        let names: Vec<&str> = p.rules().iter().map(|r| r.rule.name.as_str()).collect();
        assert_eq!(names, ["a", "g"]);
        let refused = reload(&mut p, vec![rule("a", 4)], 4);
        assert!(
            refusals(&refused)[0].1.contains("comes from etcd key /mcr/a"),
            "{refused:?}"
        );
        // Deleted, then unreachable: the status says why.
        store(&mut p, 5, vec![("a", None)]);
        assert!(p.rules().iter().all(|r| r.rule.name != "a"), "deleted");
        p.handle(
            Event::Store {
                update: StoreUpdate::Unreachable {
                    why: "connection refused".into(),
                    kind: crate::control::StoreProblem::Unreachable,
                },
                interfaces: on,
            },
            now,
        );
        let st = p.store_status(now).expect("store");
        assert_eq!(
            (st.connected, st.problem.as_deref(), st.revision),
            (false, Some("connection refused"), 5)
        );
    }

    #[test]
    fn a_change_is_answered_when_the_worker_runs_it() {
        let now = Instant::now();
        let mut p = plane();
        p.start(Vec::new(), ifs(&[true, true])).expect("start");
        assert!(matches!(&p.start_workers()[..], [Effect::Start(0)]));
        p.handle(Event::WorkerStarted(0), now);
        let add = p.handle(
            Event::Add {
                rule: rule("a", 0),
                interfaces: ifs(&[true, true]),
                reply: 7,
            },
            now,
        );
        let kinds: Vec<&str> = add
            .iter()
            .map(|e| match e {
                Effect::Zero(_) => "zero",
                Effect::Host { .. } => "host",
                Effect::Publish(_) => "publish",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["zero", "host", "publish"], "{add:?}");
        let answered = p.handle(Event::WorkerApplied { index: 0, version: 1 }, now);
        assert!(matches!(
            &answered[..],
            [Effect::Answer {
                to: 7,
                version: 1,
                reply: Reply::Added {
                    applied: true,
                    replaced: false,
                    ..
                }
            }]
        ));
    }

    #[test]
    fn a_failover_is_switched_by_number_or_text_and_chooses_again_when_replaced() {
        let now = Instant::now();
        let mut p = plane();
        let mut failover = rule("f", 24);
        if let Some(r) = failover.redundancy.as_mut() {
            r.mode = crate::rule::Mode::FAILOVER;
        }
        p.start(
            vec![failover.clone(), rule("m", 25), rule("one", 1)],
            ifs(&[true, true]),
        )
        .expect("start");
        p.handle(Event::WorkerStarted(0), now);
        p.handle(Event::WorkerApplied { index: 0, version: 1 }, now);
        let second = failover.inputs().nth(1).expect("two inputs").to_string();
        let switch = |p: &mut Plane<u32>, rule: &str, input: Option<&str>| {
            p.handle(
                Event::Switch {
                    rule: rule.into(),
                    input: input.map(String::from),
                    reply: 9,
                },
                now,
            )
        };
        let refused = |e: &[Effect<u32>]| match e {
            [Effect::Refuse { error, .. }] => error.message.clone(),
            other => panic!("not refused: {other:?}"),
        };
        let m = refused(&switch(&mut p, "nope", Some("1")));
        assert!(m.contains("no rule named `nope` (rules: f, m, one)"), "{m}");
        let m = refused(&switch(&mut p, "m", Some("1")));
        assert!(m.contains("is a merge: it takes every input at once"), "{m}");
        let m = refused(&switch(&mut p, "one", Some("1")));
        assert!(m.contains("has one input"), "{m}");
        for bad in ["3", "0", "in9:239.1.1.1:5001"] {
            let m = refused(&switch(&mut p, "f", Some(bad)));
            assert!(
                m.contains(&format!("has no input `{bad}`")) && m.contains(&format!("2 = {second}")),
                "{m}"
            );
        }
        assert_eq!(p.version(), 1, "a refusal changes nothing");
        // By its text: held to input 2, published, answered once applied.
        let e = switch(&mut p, "f", Some(&second));
        assert!(e.iter().any(|e| matches!(e, Effect::Publish(2))), "{e:?}");
        assert_eq!(p.rules()[0].forced_input, Some(1));
        let e = p.handle(Event::WorkerApplied { index: 0, version: 2 }, now);
        assert!(
            matches!(&e[..], [Effect::Answer { reply: Reply::Switched { input: Some((2, t)), applied: true, .. }, .. }] if *t == second),
            "{e:?}"
        );
        // By number, then auto.
        switch(&mut p, "f", Some("1"));
        assert_eq!(p.rules()[0].forced_input, Some(0));
        switch(&mut p, "f", Some("auto"));
        assert_eq!(p.rules()[0].forced_input, None);
        // Replaced by an add: the new rule chooses.
        switch(&mut p, "f", Some("2"));
        p.handle(
            Event::Add {
                rule: failover,
                interfaces: ifs(&[true, true]),
                reply: 10,
            },
            now,
        );
        let f = p.rules().iter().find(|r| r.rule.name == "f").expect("f");
        assert_eq!(f.forced_input, None);
    }

    #[test]
    fn an_interface_change_reclaims_and_publishes_only_what_moved() {
        let now = Instant::now();
        let mut p = plane();
        p.start(vec![rule("a", 1)], ifs(&[true, true])).expect("start");
        // A change of nothing the rules use: no new table.
        let same = p.handle(Event::Interfaces(ifs(&[true, true])), now);
        assert!(matches!(&same[..], [Effect::RetryPorts]), "{same:?}");
        // Its input interface goes: the membership is left, a new table
        // is sent, and the log says why.
        let gone = p.handle(Event::Interfaces(ifs(&[true, false])), now);
        assert!(gone.iter().any(|e| matches!(e, Effect::Publish(2))), "{gone:?}");
        assert!(gone.iter().any(|e| matches!(
            e,
            Effect::Host {
                action: Action::Leave(_),
                rule: None
            }
        )));
        assert!(
            gone.iter()
                .any(|e| matches!(e, Effect::Log(Level::Info, m) if m == "interfaces: `in1` is gone"))
        );
        assert_eq!(p.claim("a"), None);
    }

    #[test]
    fn a_link_going_down_and_up_is_told_and_counted_without_a_new_table() {
        let now = Instant::now();
        let mut p = plane();
        // a reads from in1 and sends on in1.
        p.start(vec![rule("a", 1)], ifs(&[true, true])).expect("start");
        let with_link = |link| {
            Interfaces::new(ifs(&[true, true]).iter().map(|i| InterfaceInfo {
                link: if i.name == "in1" { link } else { Link::Up },
                ..i.clone()
            }))
        };
        let down = p.handle(Event::Interfaces(with_link(Link::NoCarrier)), now);
        let warned = |effects: &[Effect<u32>], want: &str| {
            effects
                .iter()
                .any(|e| matches!(e, Effect::Log(Level::Warn, m) if m == want))
        };
        assert!(
            warned(
                &down,
                "link `in1` down (no carrier): it carries inputs of `a`; outputs of `a`"
            ),
            "{down:?}"
        );
        // Nothing the workers build on changed: no table, no join, no leave.
        assert!(
            !down
                .iter()
                .any(|e| matches!(e, Effect::Publish(_) | Effect::Host { .. })),
            "{down:?}"
        );
        assert_eq!(p.interfaces().get("in1").map(|i| i.link), Some(Link::NoCarrier));
        let status = p.interface_status();
        assert_eq!(status.len(), 1, "{status:?}");
        assert_eq!((status[0].link, status[0].link_changes), (Some(Link::NoCarrier), 1));
        // The same again is no news.
        let again = p.handle(Event::Interfaces(with_link(Link::NoCarrier)), now);
        assert!(matches!(&again[..], [Effect::RetryPorts]), "{again:?}");
        let up = p.handle(Event::Interfaces(with_link(Link::Up)), now);
        assert!(
            warned(
                &up,
                "link `in1` up (it was down: no carrier): it carries inputs of `a`; outputs of `a`"
            ),
            "{up:?}"
        );
        assert_eq!(p.interface_status()[0].link_changes, 2);
    }

    #[test]
    fn a_worker_that_keeps_dying_waits_longer_each_time() {
        let mut now = Instant::now();
        let mut p = plane();
        p.start(Vec::new(), Interfaces::default()).expect("start");
        let mut delays = Vec::new();
        for _ in 0..3 {
            p.handle(Event::WorkerStarted(0), now);
            let died = p.handle(
                Event::WorkerExited {
                    index: 0,
                    how: "exited with status 1".into(),
                },
                now,
            );
            let Some(Effect::RestartAfter { delay, .. }) =
                died.iter().find(|e| matches!(e, Effect::RestartAfter { .. }))
            else {
                panic!("no restart: {died:?}");
            };
            delays.push(*delay);
            now += *delay;
            assert!(matches!(&p.handle(Event::RestartDue(0), now)[..], [Effect::Start(0)]));
        }
        assert_eq!(
            delays,
            [
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(400)
            ]
        );
        assert_eq!(p.worker(0).restarts, 3);
        assert_eq!(p.worker(0).last_exit.as_deref(), Some("exited with status 1"));
        // Once stopping, an exit starts nothing.
        p.handle(Event::Stop, now);
        assert!(
            p.handle(
                Event::WorkerExited {
                    index: 0,
                    how: "exited".into()
                },
                now
            )
            .is_empty()
        );
    }
}
