//! The supervisor: never touches a data packet. It owns the rule table,
//! validates every change, pushes the whole new table to every worker,
//! joins the groups the rules need, restarts workers that die, sums the
//! statistics and serves the control socket.

mod config_file;
mod control;
mod datapath;
mod fanout;
mod links;
mod membership;
mod metrics;
mod notify;
mod ports;
mod privilege;
mod stats;
mod workers;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mcr_core::config::{Datapath, Settings};
use mcr_core::control::{ControlError, ErrorKind, JoinState, PROTOCOL, Reply, Request, Response, RuleStatus};
use mcr_core::interfaces::{InterfaceInfo, Interfaces};
use mcr_core::rule::Rule;
use mcr_core::snapshot::SlottedRule;
use mcr_core::stats::StatsLayout;
use mcr_sys::shm::SharedCounters;
use tokio::sync::{mpsc, oneshot, watch};

use crate::channel::{FromWorker, ToWorker};
use mcr_core::plane::claims::{Action, Claim, Ledger};
use mcr_core::plane::replies::{self, Due, Waiting};
use mcr_core::plane::rule_table::RuleTable;
use membership::Memberships;
use ports::Ports;
use stats::Stats;
use workers::{Recipe, State, WorkerEvent, WorkerSlot};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Worker processes.
    pub workers: usize,
    /// The CPU of each worker.
    pub cpus: Vec<usize>,
    /// Where the control socket is.
    pub control_socket: PathBuf,
    /// Arguments for every worker (ring settings).
    pub worker_args: Vec<String>,
    /// The config file, if the daemon was started with one.
    pub config_path: Option<PathBuf>,
    /// Its `[daemon]` settings, written back by `save`.
    pub file_settings: Settings,
    /// The rules to start with (the config file's, already checked).
    pub rules: Vec<Rule>,
    /// Where to serve `/metrics`.
    pub metrics_listen: Option<SocketAddr>,
    /// How long a control client may stay silent or not read.
    pub control_timeout: Duration,
    /// The user to run as once everything privileged is open.
    pub user: Option<String>,
    /// The group whose members may use the control socket.
    pub control_group: Option<String>,
    /// Which data path forwards.
    pub datapath: Datapath,
    /// The workers' receive rings (`max_frame` follows each interface).
    pub ring: mcr_sys::ring::RingConfig,
}

pub use config_file::load as load_config;

/// How long an `add` or `remove` waits for the workers to run the new
/// table before answering anyway.
const APPLY_WAIT: Duration = Duration::from_secs(5);

/// An answer to a change, completed when it is sent: whether the workers
/// run it, and what they could not set up.
enum PendingReply {
    Added {
        rule: String,
        replaced: bool,
        joins: Vec<JoinState>,
    },
    Removed {
        rule: String,
    },
    Reloaded {
        path: PathBuf,
        added: Vec<String>,
        changed: Vec<String>,
        removed: Vec<String>,
        unchanged: usize,
        restart_needed: Vec<String>,
    },
}

struct Supervisor {
    rules: RuleTable,
    members: Memberships,
    ports: Ports,
    /// Each rule's claim, as taken (given up as taken, whatever the
    /// interfaces have become since), and who holds each membership and
    /// port.
    ledger: Ledger,
    workers: Vec<WorkerSlot>,
    recipe: Recipe,
    counters: SharedCounters,
    /// The in-kernel data path, when it is chosen and could be loaded.
    kernel: Option<datapath::Datapath>,
    /// Why it is not there, when it was chosen.
    kernel_missing: Option<String>,
    stats: Stats,
    /// The current table, encoded as the line every worker is sent.
    table_line: watch::Sender<Arc<Vec<u8>>>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    /// Changes waiting for every live worker to run them.
    pending: Waiting<(PendingReply, oneshot::Sender<Response>)>,
    config_path: Option<PathBuf>,
    /// The host's interfaces as last read (on every change netlink
    /// announces, and whenever the table is published).
    ifs: Interfaces,
    /// The `[daemon]` settings of the file as last loaded (what `save`
    /// writes).
    file_settings: Settings,
    /// Those it started with (what a reload compares against).
    started_settings: Settings,
    /// The workers' fanout groups, with several workers.
    fanout: Option<fanout::FanoutGroups>,
    /// The shape of the workers' rings.
    ring: mcr_sys::ring::RingConfig,
}

/// Everything the host's interfaces offer, read afresh.
pub fn interfaces() -> Interfaces {
    let mut addresses = mcr_sys::iface::all_addresses().unwrap_or_else(|e| {
        tracing::warn!("could not read the interfaces' addresses: {e}");
        HashMap::new()
    });
    Interfaces::new(mcr_sys::iface::names().into_iter().filter_map(|name| {
        Some(InterfaceInfo {
            index: mcr_sys::iface::index(&name).ok()?,
            mac: mcr_sys::iface::mac(&name).unwrap_or([0; 6]),
            mtu: mcr_sys::iface::mtu(&name).unwrap_or(1500),
            addresses: addresses.remove(&name).unwrap_or_default(),
            ethernet: mcr_sys::iface::is_ethernet(&name).unwrap_or(false),
            master: mcr_sys::iface::master(&name),
            name,
        })
    }))
}

/// Runs the daemon until SIGTERM or SIGINT.
/// How long a start waits for every worker to run the initial table
/// before serving anyway.
const WORKERS_READY_LIMIT: Duration = Duration::from_secs(10);

pub fn run(opts: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the runtime")?;
    rt.block_on(run_async(opts))
}

async fn run_async(mut opts: Options) -> anyhow::Result<()> {
    let layout = StatsLayout::new(opts.workers);
    let counters = SharedCounters::create("mcrd-stats", layout.len()).context("create the statistics memory")?;
    let (kernel, kernel_missing) = match opts.datapath {
        Datapath::Packet => (None, None),
        Datapath::Ebpf => match datapath::Datapath::load(&layout) {
            Ok(d) => (Some(d), None),
            Err(e) => {
                let why = format!("{e:#}");
                tracing::warn!("the eBPF data path could not be loaded ({why}); the workers forward every rule");
                (None, Some(why))
            }
        },
    };
    let listener = control::listen(&opts.control_socket)?;
    let exe = std::env::current_exe().context("find this executable to start workers")?;
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let (table_tx, _) = watch::channel(Arc::new(Vec::new()));
    let mut sup = Supervisor {
        rules: RuleTable::new(layout.rule_slots, layout.output_slots),
        members: Memberships::default(),
        ports: Ports::default(),
        ledger: Ledger::default(),
        workers: (0..opts.workers)
            .map(|i| WorkerSlot::new(i, opts.cpus[i % opts.cpus.len()]))
            .collect(),
        recipe: Recipe {
            exe,
            common_args: opts.worker_args.clone(),
        },
        counters,
        kernel,
        kernel_missing,
        stats: Stats::new(layout),
        table_line: table_tx,
        events: events_tx,
        pending: Waiting::new(APPLY_WAIT),
        config_path: opts.config_path.clone(),
        ifs: interfaces(),
        file_settings: opts.file_settings.clone(),
        started_settings: opts.file_settings.clone(),
        fanout: (opts.workers > 1).then(|| fanout::FanoutGroups::new(std::process::id() as u16)),
        ring: opts.ring,
    };
    sup.start_with(std::mem::take(&mut opts.rules))?;
    let metrics = match opts.metrics_listen {
        Some(addr) => Some(metrics::listen(addr).await?),
        None => None,
    };
    let access = privilege::settle(&opts)?;
    let (links_tx, mut links_rx) = mpsc::channel::<()>(1);
    links::watch(links_tx);
    for i in 0..sup.workers.len() {
        sup.start_worker(i);
    }
    // Ready (control requests answered, systemd told) only once every
    // worker runs the initial table with its rings open and filters
    // attached: a frame that arrives before that reaches no ring. Clients
    // that connect meanwhile wait in the socket's backlog.
    sup.wait_for_workers(&mut events_rx).await;
    let (calls_tx, mut calls_rx) = mpsc::channel::<control::Call>(64);
    if let Some(l) = metrics {
        tokio::spawn(metrics::serve(l, calls_tx.clone()));
    }
    tokio::spawn(control::serve(listener, calls_tx, opts.control_timeout, access));
    tracing::info!(
        "mcrd {} running: {} worker(s) on CPU {:?}, control socket {}",
        env!("CARGO_PKG_VERSION"),
        opts.workers,
        sup.workers.iter().map(|w| w.cpu).collect::<Vec<_>>(),
        opts.control_socket.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    notify::ready(&format!(
        "{} rule(s), {} worker(s)",
        sup.rules.rules().len(),
        opts.workers
    ));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            Some((req, reply_to)) = calls_rx.recv() => sup.handle(req, reply_to),
            Some(ev) = events_rx.recv() => sup.on_worker(ev),
            Some(()) = links_rx.recv() => sup.on_links_changed(),
            _ = tick.tick() => {
                sup.sample_stats();
                for w in &mut sup.workers {
                    w.sample_cpu();
                }
                sup.answer_pending(true);
            }
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config file");
                notify::reloading();
                let (tx, rx) = oneshot::channel();
                sup.reload(tx);
                tokio::spawn(async move {
                    // The outcome is logged by reload; systemd is told the
                    // daemon is ready again either way (a refused reload
                    // leaves it running as before).
                    let _ = rx.await;
                    notify::ready("reloaded");
                });
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    notify::stopping();
    sup.shutdown(&mut events_rx).await;
    let _ = std::fs::remove_file(&opts.control_socket);
    Ok(())
}

impl Supervisor {
    /// Where every counter is.
    fn counts(&self) -> stats::Counters<'_> {
        stats::Counters {
            shm: &self.counters,
            kernel: self.kernel.as_ref().map(datapath::Datapath::counters),
        }
    }

    /// Samples the counters for rates.
    fn sample_stats(&mut self) {
        let c = stats::Counters {
            shm: &self.counters,
            kernel: self.kernel.as_ref().map(datapath::Datapath::counters),
        };
        self.stats.sample(c, self.rules.rules());
    }

    /// Sends the current table to every worker (each gets the newest),
    /// with the interfaces as just read (`ifs`).
    fn publish_with(&mut self, ifs: Interfaces) {
        self.ifs = ifs;
        let mut snap = self.rules.snapshot(&self.ifs);
        let (table, _) = mcr_core::table::MatchTable::compile(&snap);
        // The kernel's maps first: a worker that gets the table before they
        // are written still has every rule, and a frame is forwarded by
        // whichever side the maps say, never by both.
        if let Some(k) = &mut self.kernel {
            k.reconcile(&table, &self.ifs, &self.stats.layout());
        }
        // A fanout group for each new input interface, founded with worker
        // 0's ring, which reaches it before the table does.
        if let Some(groups) = &mut self.fanout {
            for (ifindex, ring) in groups.reconcile(&table.input_interfaces(), &self.ifs, &self.ring) {
                self.workers[0].give_ring(ifindex, ring);
            }
            snap.fanout = groups.table();
        }
        match serde_json::to_vec(&ToWorker::Table(snap)) {
            Ok(mut line) => {
                line.push(b'\n');
                self.table_line.send_replace(Arc::new(line));
            }
            Err(e) => tracing::error!("could not encode the table: {e}"),
        }
    }

    fn start_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        let filter = self.kernel.as_ref().and_then(datapath::Datapath::ring_filter);
        match w.spawn(&self.recipe, &self.counters, filter, &self.table_line, &self.events) {
            Ok(()) => tracing::info!("worker {i} started (pid {:?}, CPU {})", w.pid, w.cpu),
            Err(e) => {
                let delay = w.died(format!("could not start: {e}"), Default::default());
                tracing::error!("worker {i} could not start: {e}; trying again in {delay:?}");
                self.restart_later(i, delay);
            }
        }
    }

    fn restart_later(&self, i: usize, delay: Duration) {
        let tx = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(WorkerEvent::RestartDue { index: i });
        });
    }

    fn on_worker(&mut self, ev: WorkerEvent) {
        match ev {
            WorkerEvent::Said { index, generation, msg } => {
                let Some(w) = self.workers.get_mut(index).filter(|w| w.is_current(generation)) else {
                    return;
                };
                match msg {
                    FromWorker::Ready { pid } => tracing::debug!("worker {index} (pid {pid}) ready"),
                    FromWorker::Applied { version, problems } => {
                        for p in problems.iter().filter(|p| !w.problems.contains(p)) {
                            tracing::warn!("worker {index}, table {version}: {}", p.error);
                        }
                        w.applied = version;
                        w.problems = problems;
                        if w.state == State::Starting {
                            w.state = State::Running;
                        }
                    }
                }
                self.answer_pending(false);
            }
            WorkerEvent::Exited {
                index,
                generation,
                how,
                rings,
            } => {
                let Some(w) = self.workers.get_mut(index).filter(|w| w.is_current(generation)) else {
                    return;
                };
                if w.state == State::Stopping {
                    return;
                }
                let delay = w.died(how.clone(), rings);
                tracing::warn!("worker {index} {how}; restarting in {delay:?}");
                self.restart_later(index, delay);
                // It no longer holds up answers.
                self.answer_pending(false);
            }
            WorkerEvent::RestartDue { index } => {
                if self.workers[index].state == State::Restarting {
                    self.workers[index].restarts += 1;
                    self.start_worker(index);
                }
            }
        }
    }

    /// Handles the workers' events until every worker runs the current
    /// table, or [`WORKERS_READY_LIMIT`] has passed (then says which do
    /// not, and goes on: `mcrctl workers` shows them).
    async fn wait_for_workers(&mut self, events: &mut mpsc::UnboundedReceiver<WorkerEvent>) {
        let deadline = tokio::time::Instant::now() + WORKERS_READY_LIMIT;
        let version = self.rules.version();
        let waiting = |sup: &Supervisor| -> Vec<usize> {
            sup.workers
                .iter()
                .filter(|w| !(w.state == State::Running && w.applied >= version))
                .map(|w| w.index)
                .collect()
        };
        while !waiting(self).is_empty() {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(ev)) => self.on_worker(ev),
                Ok(None) => return,
                Err(_) => {
                    tracing::warn!(
                        "worker(s) {:?} do not run the rules {:?} after start; serving anyway (see mcrctl workers)",
                        waiting(self),
                        WORKERS_READY_LIMIT
                    );
                    return;
                }
            }
        }
    }

    /// The lowest table version every live worker runs.
    fn acked(&self) -> u64 {
        replies::acked(
            self.workers
                .iter()
                .filter(|w| matches!(w.state, State::Starting | State::Running))
                .map(|w| w.applied),
            self.rules.version(),
        )
    }

    /// Answers the changes every live worker now runs (or, with `timed`,
    /// those that waited too long, saying so).
    fn answer_pending(&mut self, timed: bool) {
        for due in self.pending.due(self.acked(), Instant::now(), timed) {
            let Due {
                reply: (reply, reply_to),
                applied,
                version,
            } = due;
            if !applied {
                tracing::warn!("table {version} not yet applied by every worker after {APPLY_WAIT:?}");
            }
            let reply = match reply {
                PendingReply::Added { rule, replaced, joins } => Reply::Added {
                    problems: self
                        .rules
                        .rules()
                        .iter()
                        .find(|r| r.rule.name == rule)
                        .map(|r| self.problems_of(&r.rule))
                        .unwrap_or_default(),
                    rule,
                    replaced,
                    applied,
                    joins,
                },
                PendingReply::Removed { rule } => Reply::Removed { rule, applied },
                PendingReply::Reloaded {
                    path,
                    added,
                    changed,
                    removed,
                    unchanged,
                    restart_needed,
                } => Reply::Reloaded {
                    problems: self
                        .rules
                        .rules()
                        .iter()
                        .filter(|r| added.contains(&r.rule.name) || changed.contains(&r.rule.name))
                        .flat_map(|r| {
                            self.problems_of(&r.rule)
                                .into_iter()
                                .map(|p| format!("rule `{}`: {p}", r.rule.name))
                        })
                        .collect(),
                    path,
                    added,
                    changed,
                    removed,
                    unchanged,
                    applied,
                    restart_needed,
                },
            };
            let _ = reply_to.send(reply.into());
        }
    }

    fn reply_when_applied(&mut self, version: u64, reply: PendingReply, reply_to: oneshot::Sender<Response>) {
        self.pending.push(version, Instant::now(), (reply, reply_to));
        self.answer_pending(false);
    }

    fn handle(&mut self, req: Request, reply_to: oneshot::Sender<Response>) {
        let reply = match req {
            Request::Version { protocol } => match protocol {
                Some(p) if p != PROTOCOL => Reply::Error {
                    error: ControlError::new(
                        ErrorKind::Protocol,
                        format!(
                            "this daemon speaks protocol {PROTOCOL}, the client {p}: use an mcrctl of the same version"
                        ),
                    ),
                },
                _ => Reply::Version {
                    daemon: env!("CARGO_PKG_VERSION").into(),
                    protocol: PROTOCOL,
                },
            },
            Request::Add { rule } => return self.add(rule, reply_to),
            Request::Remove { name } => return self.remove(&name, reply_to),
            Request::List {} => Reply::Rules {
                rules: self.rules.rules().iter().map(|r| self.status(r)).collect(),
            },
            Request::Stats {} => Reply::Stats(Box::new(self.stats_report())),
            Request::Reload {} => return self.reload(reply_to),
            Request::Save { to } => self.save(to),
            Request::Config {} => self.config_text(),
            // The connection serves `watch` itself with `stats` requests.
            Request::Watch { .. } => Reply::Error {
                error: ControlError::new(ErrorKind::BadRequest, "watch is answered by the connection"),
            },
            Request::Workers {} => Reply::Workers {
                workers: self.workers.iter().map(WorkerSlot::status).collect(),
            },
        };
        let _ = reply_to.send(reply.into());
    }

    /// Carries out what the ledger says the host must do. Returns how a
    /// membership it joins stands.
    fn carry_out(&mut self, action: Action) -> Option<JoinState> {
        match action {
            Action::Join { key, interface } => Some(self.members.ensure(key, &interface)),
            Action::Leave(key) => {
                self.members.leave(key);
                None
            }
            Action::HoldPort(a) => {
                if let Some(p) = self.ports.ensure(a) {
                    tracing::warn!("{p}");
                }
                None
            }
            Action::FreePort(a) => {
                self.ports.free(a);
                None
            }
        }
    }

    /// Every change of the rules goes through here, in the ledger's three
    /// steps ([`mcr_core::plane::claims`]): the claims the rules in `claim` need
    /// on `ifs` are taken (new memberships joined, ports held; a join that
    /// fails is logged here and shown on its rule, and stops nothing),
    /// then `publish` sends the workers the new table, then the claims
    /// those rules held before and those of the rules named in `drop` are
    /// given up. Returns the joins of each rule of `claim`, in order.
    fn change_rules<'a>(
        &mut self,
        claim: impl IntoIterator<Item = &'a Rule>,
        drop: impl IntoIterator<Item = &'a str>,
        ifs: Interfaces,
        publish: impl FnOnce(&mut Self, Interfaces),
    ) -> Vec<Vec<JoinState>> {
        let rules: Vec<&Rule> = claim.into_iter().collect();
        let (change, todo) = self.ledger.take(rules.iter().copied(), &ifs);
        let mut joins_of = Vec::new();
        for (rule, actions) in rules.iter().zip(todo) {
            let joins: Vec<JoinState> = actions.into_iter().filter_map(|a| self.carry_out(a)).collect();
            for j in joins.iter().filter(|j| !j.joined) {
                tracing::warn!(
                    "rule `{}`: joining {} on {}: {}",
                    rule.name,
                    j.group,
                    j.interface,
                    j.error.as_deref().unwrap_or("?")
                );
            }
            joins_of.push(joins);
        }
        publish(self, ifs);
        for a in self.ledger.finish(change, drop) {
            self.carry_out(a);
        }
        joins_of
    }

    /// What keeps `rule` from forwarding: what the live workers could not
    /// set up for it, and a port that could not be held.
    fn problems_of(&self, rule: &Rule) -> Vec<String> {
        let mut out: Vec<String> = mcr_core::validate::missing_interfaces(rule, &self.ifs)
            .into_iter()
            .map(|i| format!("waiting for interface `{i}`: it does not exist (yet); the rule starts when it appears"))
            .collect();
        if !out.is_empty() {
            // What the workers say about such a rule has the same cause.
            return out;
        }
        if let Some(Claim::Port(a)) = self.ledger.claim(&rule.name)
            && let Some(p) = self.ports.problem(*a)
        {
            out.push(p);
        }
        let live = self
            .workers
            .iter()
            .filter(|w| matches!(w.state, State::Starting | State::Running));
        for p in live.flat_map(|w| &w.problems).filter(|p| p.concerns(rule)) {
            if !out.contains(&p.error) {
                out.push(p.error.clone());
            }
        }
        out
    }

    fn status(&self, r: &SlottedRule) -> RuleStatus {
        RuleStatus {
            rule: r.rule.clone(),
            joins: match self.ledger.claim(&r.rule.name) {
                Some(Claim::Join(keys)) => keys.iter().map(|k| self.members.state(*k)).collect(),
                _ => Vec::new(),
            },
            problems: self.problems_of(&r.rule),
        }
    }

    fn add(&mut self, rule: Rule, reply_to: oneshot::Sender<Response>) {
        let ifs = interfaces();
        let name = rule.name.clone();
        match self.rules.add(rule.clone(), &ifs, self.acked()) {
            Err(e) => {
                let error = e.to_control(ErrorKind::InvalidRule, None, |what| {
                    format!("rule `{name}`: the table is full ({what}); remove rules first")
                });
                let _ = reply_to.send(Reply::Error { error }.into());
            }
            Ok(added) => {
                self.stats
                    .zero(self.counts(), &added.reused.rules, &added.reused.outputs);
                let joins = self
                    .change_rules([&rule], [], ifs, Self::publish_with)
                    .pop()
                    .unwrap_or_default();
                let reply = PendingReply::Added {
                    rule: name,
                    replaced: added.replaced.is_some(),
                    joins,
                };
                self.reply_when_applied(added.version, reply, reply_to);
            }
        }
    }

    fn remove(&mut self, name: &str, reply_to: oneshot::Sender<Response>) {
        let Some((_, version)) = self.rules.remove(name) else {
            let known: Vec<&str> = self.rules.rules().iter().map(|r| r.rule.name.as_str()).collect();
            let error = ControlError::new(
                ErrorKind::NotFound,
                format!(
                    "no rule named `{name}` (rules: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            );
            let _ = reply_to.send(Reply::Error { error }.into());
            return;
        };
        // Stop forwarding first, then leave the group.
        self.change_rules([], [name], interfaces(), |s, ifs| s.publish_with(ifs));
        self.reply_when_applied(version, PendingReply::Removed { rule: name.to_string() }, reply_to);
    }

    async fn shutdown(&mut self, events: &mut mpsc::UnboundedReceiver<WorkerEvent>) {
        tracing::info!("stopping");
        for w in &mut self.workers {
            w.ask_to_stop();
        }
        // Give them a moment to flush and exit; kill_on_drop ends the rest.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut running = self.workers.iter().filter(|w| w.pid.is_some()).count();
        while running > 0 {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(WorkerEvent::Exited { .. })) => running -= 1,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        self.sample_stats();
        print!("{}", self.final_totals());
    }

    /// Takes the rules of the config file before any worker starts, so
    /// every worker starts with them.
    fn start_with(&mut self, rules: Vec<Rule>) -> anyhow::Result<()> {
        let ifs = interfaces();
        self.rules
            .replace_all(rules, &ifs, 0)
            .map_err(|e| anyhow::anyhow!("the config file's rules: {e}"))?;
        let rules = self.rules.rules().to_vec();
        self.change_rules(rules.iter().map(|r| &r.rule), [], ifs, Self::publish_with);
        Ok(())
    }

    /// The answer to `stats`: the counters, each rule's problems and each
    /// worker's CPU.
    fn stats_report(&self) -> mcr_core::control::StatsReport {
        let mut report = self.stats.report(self.counts(), self.rules.rules());
        for (r, s) in self.rules.rules().iter().zip(&mut report.rules) {
            let status = self.status(r);
            s.problems = status
                .joins
                .iter()
                .filter(|j| !j.joined)
                .map(|j| {
                    format!(
                        "not joined to {} on {}: {}",
                        j.group,
                        j.interface,
                        j.error.as_deref().unwrap_or("?")
                    )
                })
                .chain(status.problems)
                .collect();
        }
        for (w, s) in self.workers.iter().zip(&mut report.workers) {
            s.cpu_s = w.cpu_s();
            s.busy = w.busy;
        }
        self.fill_datapath(&mut report);
        report
    }

    /// Which data path forwards each rule, and where the eBPF one runs.
    fn fill_datapath(&self, report: &mut mcr_core::control::StatsReport) {
        report.datapath_missing = self.kernel_missing.clone();
        let Some(k) = &self.kernel else { return };
        for (r, s) in self.rules.rules().iter().zip(&mut report.rules) {
            match k.why_not(r.slot) {
                None => s.datapath = "ebpf".into(),
                Some(why) => s.datapath_reason = Some(why.to_string()),
            }
        }
        if let Some(d) = &mut report.datapath {
            d.interfaces = k
                .attached()
                .into_iter()
                .map(|i| self.ifs.by_index(i).map_or_else(|| format!("#{i}"), |f| f.name.clone()))
                .collect();
        }
    }

    fn final_totals(&self) -> String {
        let report = self.stats.report(self.counts(), self.rules.rules());
        let mut out = String::from("mcrd final totals\n");
        for r in &report.rules {
            out.push_str(&format!(
                "  rule {:<20} {:>12} packets {:>14} bytes\n",
                r.name, r.packets, r.bytes
            ));
            for o in &r.outputs {
                let drops: u64 = o.drops.values().sum();
                out.push_str(&format!(
                    "    -> {:<40} {:>12} packets {:>10} dropped\n",
                    o.output, o.packets, drops
                ));
            }
        }
        for w in &report.workers {
            let drops: u64 = w.drops.values().sum();
            let why = mcr_core::control::nonzero_drops(&w.drops);
            out.push_str(&format!(
                "  worker {} rx {} frames, tx {} packets, {} ring drops, {} ring errors, {} dropped{}\n",
                w.index,
                w.rx_frames,
                w.tx_packets,
                w.ring_drops,
                w.ring_errors,
                drops,
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join(", "))
                }
            ));
        }
        if let Some(d) = &report.datapath {
            out.push_str(&format!(
                "  ebpf data path rx {} frames, tx {} packets\n",
                d.rx_frames, d.tx_packets
            ));
        }
        out
    }
}
