//! The supervisor: never touches a data packet. What it decides (the rule
//! table, every change and its steps, when to answer, when to restart a
//! worker) is the control plane's, `mcr_core::plane::machine`; here the
//! plane is fed what happens (requests, the workers' messages and exits,
//! interface changes, the timer) and its effects are carried out: groups
//! joined and left, ports held, the table sent to every worker and written
//! to the eBPF data path's maps, answers, worker processes started. The
//! supervisor also sums the statistics, keeps the recent events, and
//! serves the control socket and HTTP (the web page, the API, `/metrics`).

mod carry;
mod config_file;
mod continuity;
mod control;
mod datapath;
pub mod etcd;
mod fanout;
pub mod handover;
mod http;
mod journal;
mod links;
mod membership;
mod nmos;
mod notify;
mod ports;
mod privilege;
mod restart;
mod role;
mod secret_file;
mod srt_ports;
mod stats;
mod store_cache;
mod workers;

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use mcr_core::config::{Datapath, Settings};
use mcr_core::control::{ControlError, ErrorKind, PROTOCOL, Reply, Request, Response, RuleStatus};
use mcr_core::plane::claims::Action;
use mcr_core::plane::machine::{Effect, Event, Level, Plane};
use mcr_core::rule::Rule;
use mcr_core::snapshot::SlottedRule;
use mcr_core::stats::StatsLayout;
use mcr_sys::shm::SharedCounters;
use tokio::sync::{mpsc, oneshot};

use crate::channel::FromWorker;
use membership::Memberships;
use ports::Ports;
use stats::Stats;
use workers::{Recipe, WorkerEvent, Workers};

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
    /// The HTTP server.
    pub http: HttpOptions,
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
    /// The role to start in.
    pub role: mcr_core::config::Role,
}

pub use config_file::load as load_config;
pub use http::{Options as HttpOptions, check as check_http};
use links::interfaces;

/// Where the answer to a request goes.
type ReplyTo = oneshot::Sender<Response>;

/// The daemon's I/O around the control plane ([`Plane`], which decides):
/// it feeds the plane what happens and carries out what the plane says
/// (memberships, ports, the table sent to the workers and the kernel's
/// maps, answers, worker processes), and reads the counters.
struct Supervisor {
    plane: Plane<ReplyTo>,
    members: Memberships,
    ports: Ports,
    workers: Workers,
    counters: SharedCounters,
    /// The in-kernel data path, when it is chosen and could be loaded.
    kernel: Option<datapath::Datapath>,
    /// Why it is not there, when it was chosen.
    kernel_missing: Option<String>,
    stats: Stats,
    /// What happened lately.
    journal: journal::Journal,
    /// Active or standby.
    role: role::RoleKeeper,
    /// What passes from this mcrd to the next, and came from the one
    /// before.
    continuity: continuity::Continuity,
    /// The relay as an NMOS Node, when `[daemon.nmos]` says so.
    nmos: nmos::Nmos,
}

/// What the components other than [`continuity::Continuity`] hold that
/// must outlive this process: the eBPF links, the membership and port
/// sockets.
fn components_held<'a>(
    kernel: Option<&'a datapath::Datapath>,
    members: &'a Memberships,
    ports: &'a Ports,
) -> impl Iterator<Item = handover::Held<'a>> {
    (kernel.into_iter().flat_map(datapath::Datapath::held))
        .chain(members.held())
        .chain(ports.held())
}

/// How long a start waits for every worker to run the initial table
/// before serving anyway.
const WORKERS_READY_LIMIT: Duration = Duration::from_secs(10);

/// Runs the daemon until SIGTERM or SIGINT, taking over what the mcrd
/// before it left (`inherited`).
pub fn run(opts: Options, inherited: handover::Inherited) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the runtime")?;
    rt.block_on(run_async(opts, inherited))
}

async fn run_async(mut opts: Options, mut inherited: handover::Inherited) -> anyhow::Result<()> {
    let layout = StatsLayout::new(opts.workers);
    let counters = SharedCounters::create("mcrd-stats", layout.len()).context("create the statistics memory")?;
    // The control socket first: a second mcrd beside a running one stops
    // here, before it loads or touches anything.
    let listener = match inherited.control.take() {
        Some(fd) => control::adopt(fd)?,
        None => control::listen(&opts.control_socket)?,
    };
    let (mut kernel, kernel_missing) = match opts.datapath {
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
    let took_over = inherited.summary();
    let mut refused = match &mut kernel {
        Some(k) => k.adopt(std::mem::take(&mut inherited.links)),
        None => std::mem::take(&mut inherited.links)
            .into_iter()
            .map(|(name, _)| format!("`{name}`: this mcrd runs without the eBPF data path, so it is detached"))
            .collect(),
    };
    let exe = std::env::current_exe().context("find this executable to start workers")?;
    let (workers, mut events_rx) = Workers::new(
        opts.workers,
        &opts.cpus,
        Recipe {
            exe,
            common_args: opts.worker_args.clone(),
        },
        opts.ring,
    );
    let (nmos, mut due_rx) = nmos::Nmos::new(opts.file_settings.nmos.as_ref(), &opts.http)?;
    let (continuity, continuity_notes) = continuity::Continuity::take_over(&mut inherited);
    let mut sup = Supervisor {
        plane: Plane::new(
            layout.rule_slots,
            layout.output_slots,
            opts.workers,
            opts.config_path.clone(),
            opts.file_settings.clone(),
        ),
        members: Memberships::default(),
        ports: Ports::default(),
        workers,
        counters,
        kernel,
        kernel_missing,
        stats: Stats::new(layout),
        journal: journal::Journal::default(),
        role: role::RoleKeeper::new(opts.role),
        continuity,
        nmos,
    };
    for (level, m) in continuity_notes {
        sup.journal.note(level, m);
    }
    refused.extend(sup.ports.adopt(std::mem::take(&mut inherited.ports)));
    refused.extend(sup.workers.adopt_rings(std::mem::take(&mut inherited.rings)));
    if let Some(e) = &inherited.error {
        sup.journal.note(
            Level::Warn,
            format!("restart: could not take what the mcrd before left: {e}"),
        );
    }
    if let Some(s) = took_over {
        sup.journal.note(Level::Info, s);
    }
    for why in refused {
        sup.journal.note(Level::Warn, format!("restart: not taken over: {why}"));
    }
    // Before any worker starts, and before the eBPF program sees a rule.
    sup.stats
        .set_standby(sup.counts(), opts.role == mcr_core::config::Role::Standby);
    if opts.role == mcr_core::config::Role::Standby {
        sup.journal.note(
            Level::Info,
            "starting as standby: forwarding is ready but nothing is sent until `mcrctl role active`".into(),
        );
    }
    // The config file's rules before any worker starts, so that every
    // worker starts with them.
    let start = sup
        .plane
        .start(std::mem::take(&mut opts.rules), interfaces())
        .map_err(anyhow::Error::msg)?;
    sup.carry_out(start);
    // What etcd gave last, until it answers: the workers start with it.
    let cache = opts
        .file_settings
        .etcd
        .as_ref()
        .and_then(|e| Some((e.cache.clone()?, e.prefix.clone())));
    if let Some((path, prefix)) = &cache {
        match store_cache::read(path, prefix) {
            Ok(Some((revision, entries))) => sup.step(Event::Store {
                update: mcr_core::plane::store::StoreUpdate::Cached { revision, entries },
                interfaces: interfaces(),
            }),
            Ok(None) => {}
            Err(why) => sup.journal.note(Level::Warn, format!("etcd cache not used: {why}")),
        }
    }
    // etcd's files (CA, certificate, key, password) are read now, while
    // mcrd may still read them; the follower starts once workers run.
    let etcd = match &opts.file_settings.etcd {
        Some(e) => Some(etcd::store_settings(e).and_then(|s| s.prepare())?),
        None => None,
    };
    let http = http::open(&opts.http).await?;
    if sup.nmos.is_node() {
        // For scheduled activations once privileges are dropped (as root
        // CAP_SYS_NICE does; where neither works, they wake at ordinary
        // priority and the timer says so once).
        let _ = mcr_sys::process::allow_prompt();
    }
    let access = privilege::settle(
        &opts.control_socket,
        opts.user.as_deref(),
        opts.control_group.as_deref(),
    )?;
    let (links_tx, mut links_rx) = mpsc::channel::<()>(1);
    links::watch(links_tx);
    let start = sup.plane.start_workers();
    sup.carry_out(start);
    // Ready (control requests answered, systemd told) only once every
    // worker runs the initial table with its rings open and filters
    // attached: a frame that arrives before that reaches no ring. Clients
    // that connect meanwhile wait in the socket's backlog.
    sup.wait_for_workers(&mut events_rx).await;
    // Every membership and port is held by this process now: let go of
    // what the mcrd before held.
    if inherited.source.is_some() {
        let joins = sup.continuity.let_go_held_over();
        let ports = sup.ports.drop_adopted();
        tracing::info!(
            "restart: this mcrd holds every membership and port itself; let go {joins} membership socket(s) and {ports} unclaimed port socket(s) of the mcrd before"
        );
    }
    // The workers of the mcrd before are gone and its program no longer
    // runs (this one's took the interfaces over as it published): their
    // counts are final.
    sup.carry_counts();
    sup.keep_store();
    let (calls_tx, mut calls_rx) = mpsc::channel::<control::Call>(64);
    if let Some(server) = http {
        server.spawn(calls_tx.clone()).context("start the HTTP server")?;
    }
    sup.nmos.register(calls_tx.clone());
    // A copy of the control socket, for the program `mcrctl restart` runs.
    let control_copy = listener
        .as_fd()
        .try_clone_to_owned()
        .context("keep the control socket")?;
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
        sup.plane.rules().len(),
        opts.workers
    ));
    // Rules from etcd, when the config names a store: each update is
    // applied as it comes, on this loop, like any other change.
    let (store_tx, mut store_rx) = mpsc::unbounded_channel::<etcd::StoreUpdate>();
    let _follower = match etcd {
        Some(prepared) => Some(
            etcd::follow(prepared, move |u| {
                let _ = store_tx.send(u);
            })
            .context("follow etcd")?,
        ),
        None => None,
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            Some(u) = store_rx.recv() => sup.step(Event::Store { update: u.into(), interfaces: interfaces() }),
            Some((req, reply_to)) = calls_rx.recv() => {
                sup.handle(req, reply_to);
                if sup.continuity.restart_asked() {
                    sup.restart_in_place(control_copy.as_fd(), &mut events_rx).await;
                }
            }
            Some(ev) = events_rx.recv() => sup.on_worker(ev),
            Some(due) = due_rx.recv() => {
                sup.nmos_activate(&due);
                sup.nmos.taken_up();
            }
            Some(()) = links_rx.recv() => sup.step(Event::Interfaces(interfaces())),
            _ = tick.tick() => {
                if let Some((path, prefix)) = &cache {
                    sup.write_store_cache(path, prefix);
                }
                sup.sample_stats();
                if let Some(k) = &mut sup.kernel {
                    k.sample_race();
                }
                for w in sup.workers.iter_mut() {
                    w.sample_cpu();
                }
                sup.step(Event::Tick);
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
    /// An IS-05 PATCH of `staged`: answered at once, or once the rule it
    /// changes is in effect, or scheduled.
    fn nmos_stage(&mut self, receiver: bool, id: &str, body: &serde_json::Value, reply_to: ReplyTo) {
        let interfaces = interfaces();
        let rules = self.plane.rules().iter().map(|r| &r.rule);
        if let Some(change) = self.nmos.stage(receiver, id, body, rules, &interfaces, reply_to) {
            self.step(Event::Add {
                rule: change.rule,
                interfaces,
                reply: change.reply,
            });
        }
    }

    /// Makes every scheduled activation whose time has passed, before an
    /// NMOS request is answered.
    fn nmos_catch_up(&mut self) {
        for due in self.nmos.catch_up() {
            self.nmos_activate(&due);
        }
    }

    /// A scheduled IS-05 activation is due: the rule changes, if it still
    /// stands.
    fn nmos_activate(&mut self, due: &nmos::Due) {
        // The activation's time: when it was taken up, before the
        // interfaces are read (a netlink dump, which waits for the
        // kernel's RTNL lock while anything else on the host changes
        // links) and the rule made.
        let at = mcr_core::nmos::tai_now();
        let interfaces = interfaces();
        let rules = self.plane.rules().iter().map(|r| &r.rule);
        match self.nmos.activate(due, at, rules, &interfaces) {
            None => {}
            Some(Ok(change)) => self.step(Event::Add {
                rule: change.rule,
                interfaces,
                reply: change.reply,
            }),
            Some(Err(why)) => self.journal.note(Level::Warn, why),
        }
    }

    /// Where every counter is.
    fn counts(&self) -> stats::Counters<'_> {
        stats::Counters::of(&self.counters, self.kernel.as_ref())
    }

    /// Samples the counters for rates.
    fn sample_stats(&mut self) {
        self.stats.sample(
            stats::Counters::of(&self.counters, self.kernel.as_ref()),
            self.plane.rules(),
        );
        // (IPv4 and UDP headers: 28 bytes a packet.)
        self.nmos.measured(self.stats.peaks(28.0));
    }

    /// Writes what etcd gave last to `path`, if it changed since the last
    /// write; a failure is logged (the next change tries again).
    fn write_store_cache(&mut self, path: &std::path::Path, prefix: &str) {
        if let Some((revision, entries)) = self.plane.take_store_cache()
            && let Err(e) = store_cache::write(path, prefix, revision, &entries)
        {
            self.journal.note(
                Level::Warn,
                format!("etcd cache {}: cannot write it: {e}", path.display()),
            );
        }
    }

    /// Tells the plane what happened, and carries out what it says.
    fn step(&mut self, event: Event<ReplyTo>) {
        let effects = self.plane.handle(event, Instant::now());
        self.carry_out(effects);
    }

    /// Adds what the mcrd before counted to this one's counts, once its
    /// counts are final; says so in the journal.
    fn carry_counts(&mut self) {
        let layout = self.stats.layout();
        if let Some(m) = self
            .continuity
            .carry_counts(&layout, self.plane.rules(), self.stats.carried_mut())
        {
            self.journal.note(Level::Info, m);
            self.write_slots();
        }
    }

    /// Writes which slots count what (and what was carried over) for the
    /// next mcrd.
    fn write_slots(&mut self) {
        let layout = self.stats.layout();
        if let Some(why) = self
            .continuity
            .write_slots(&layout, self.plane.rules(), self.stats.carried())
        {
            self.journal.note(Level::Warn, why);
        }
    }

    /// Keeps systemd's file-descriptor store equal to what must outlive
    /// this process: the eBPF links, the membership and port sockets, the
    /// counters.
    fn keep_store(&mut self) {
        if !self.continuity.keeps_store() {
            return;
        }
        let counts = stats::Counters::of(&self.counters, self.kernel.as_ref());
        let others = components_held(self.kernel.as_ref(), &self.members, &self.ports);
        for why in self.continuity.keep_store(others, counts) {
            self.journal.note(Level::Warn, why);
        }
    }

    /// Carries out what the plane says, in order.
    fn carry_out(&mut self, effects: Vec<Effect<ReplyTo>>) {
        let holds = effects
            .iter()
            .any(|e| matches!(e, Effect::Host { .. } | Effect::Publish(_) | Effect::RetryPorts));
        self.carry_out_each(effects);
        if holds {
            self.keep_store();
        }
    }

    fn carry_out_each(&mut self, effects: Vec<Effect<ReplyTo>>) {
        for effect in effects {
            match effect {
                Effect::Host { action, rule } => self.hold(action, rule.as_deref()),
                Effect::RetryPorts => {
                    let ports = self.ports.retry_failed();
                    if ports > 0 {
                        tracing::info!("{ports} unicast port(s) held now");
                    }
                }
                Effect::Zero(reused) => self.stats.zero(
                    stats::Counters::of(&self.counters, self.kernel.as_ref()),
                    &reused.rules,
                    &reused.outputs,
                ),
                Effect::Publish(_) => self.publish(),
                Effect::Answer { to, mut reply, .. } => {
                    self.complete(&mut reply);
                    self.journal_answer(&reply);
                    let _ = to.send(reply.into());
                }
                Effect::Refuse { to, error } => {
                    let _ = to.send(Reply::Error { error }.into());
                }
                Effect::Start(i) => self.start_worker(i),
                Effect::RestartAfter { index, delay } => self.workers.restart_later(index, delay),
                Effect::Log(level, m) => self.journal.note(level, m),
            }
        }
    }

    /// Makes the host hold or give up a membership or port, for `rule`
    /// when it takes it (a join that fails is logged here and shown on
    /// the rule, and stops nothing).
    fn hold(&mut self, action: Action, rule: Option<&str>) {
        match action {
            Action::Join { key, interface } => {
                let j = self.members.ensure(key, &interface);
                if !j.joined {
                    let m = format!(
                        "rule `{}`: joining {} on {}: {}",
                        rule.unwrap_or("?"),
                        j.group,
                        j.interface,
                        j.error.as_deref().unwrap_or("?")
                    );
                    self.journal.note(Level::Warn, m);
                }
            }
            Action::Leave(key) => self.members.leave(key),
            Action::HoldPort(a) => {
                if let Some(p) = self.ports.ensure(a) {
                    self.journal.note(Level::Warn, p);
                }
            }
            Action::FreePort(a) => self.ports.free(a),
        }
    }

    /// Sends the current table to every worker (each gets the newest).
    fn publish(&mut self) {
        let ifs = self.plane.interfaces();
        let snap = self.plane.snapshot();
        let (table, _) = mcr_core::table::MatchTable::compile(&snap);
        // The kernel's maps first: a worker that gets the table before they
        // are written still has every rule, and a frame is forwarded by
        // whichever side the maps say, never by both.
        if let Some(k) = &mut self.kernel {
            k.reconcile(&table, ifs, &self.stats.layout());
        }
        self.workers.publish(snap, &table, ifs);
        self.write_slots();
    }

    fn start_worker(&mut self, i: usize) {
        // Worker 0 reads the kernel data path's health records.
        let kernel = self.kernel.as_ref().map(|k| workers::FromKernel {
            ring_filter: k.ring_filter(),
            health_ring: (i == 0).then(|| k.health_ring()).flatten(),
        });
        match self.workers.spawn(i, &self.counters, kernel) {
            Ok(()) => {
                let w = &self.workers[i];
                let pid = w.pid.map_or_else(|| "?".into(), |p| p.to_string());
                let m = format!("worker {i} started (pid {pid}, CPU {})", w.cpu);
                self.journal.note(Level::Info, m);
                self.step(Event::WorkerStarted(i));
            }
            Err(e) => self.step(Event::WorkerFailedToStart {
                index: i,
                why: e.to_string(),
            }),
        }
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
                            self.journal
                                .note(Level::Warn, format!("worker {index}, table {version}: {}", p.error));
                        }
                        w.problems = problems;
                        self.step(Event::WorkerApplied { index, version });
                    }
                    FromWorker::Srt { outputs, inputs } => {
                        w.srt = outputs;
                        w.srt_inputs = inputs;
                    }
                    FromWorker::Rist { outputs, inputs } => {
                        w.rist = outputs;
                        w.rist_inputs = inputs;
                    }
                    FromWorker::Race { rules } => w.race = rules,
                }
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
                w.ended(rings);
                self.step(Event::WorkerExited { index, how });
            }
            WorkerEvent::RestartDue { index } => self.step(Event::RestartDue(index)),
        }
    }

    /// Handles the workers' events until every worker runs the current
    /// table, or [`WORKERS_READY_LIMIT`] has passed (then says which do
    /// not, and goes on: `mcrctl workers` shows them).
    async fn wait_for_workers(&mut self, events: &mut mpsc::UnboundedReceiver<WorkerEvent>) {
        let deadline = tokio::time::Instant::now() + WORKERS_READY_LIMIT;
        while !self.plane.not_ready().is_empty() {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(ev)) => self.on_worker(ev),
                Ok(None) => return,
                Err(_) => {
                    tracing::warn!(
                        "worker(s) {:?} do not run the rules {:?} after start; serving anyway (see mcrctl workers)",
                        self.plane.not_ready(),
                        WORKERS_READY_LIMIT
                    );
                    return;
                }
            }
        }
    }

    /// Adds to the plane's answer to a change what only the daemon
    /// knows: how the rule's joins stand and what keeps the rules it
    /// changed from forwarding.
    fn complete(&self, reply: &mut Reply) {
        match reply {
            Reply::Added {
                rule, joins, problems, ..
            } => {
                if let Some(r) = self.plane.rules().iter().find(|r| r.rule.name == *rule) {
                    let status = self.status(r);
                    *joins = status.joins;
                    *problems = status.problems;
                }
            }
            Reply::Reloaded {
                added,
                changed,
                problems,
                ..
            } => {
                *problems = self
                    .plane
                    .rules()
                    .iter()
                    .filter(|r| added.contains(&r.rule.name) || changed.contains(&r.rule.name))
                    .flat_map(|r| {
                        self.problems_of(&r.rule)
                            .into_iter()
                            .map(|p| format!("rule `{}`: {p}", r.rule.name))
                    })
                    .collect();
            }
            _ => {}
        }
    }

    fn handle(&mut self, req: Request, reply_to: ReplyTo) {
        if matches!(
            req,
            Request::Nmos {} | Request::NmosGlance {} | Request::NmosStage { .. }
        ) {
            self.nmos_catch_up();
        }
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
            Request::Add { rule } => {
                if let Some(error) = srt_ports::taken(&rule, self.plane.rules()) {
                    let _ = reply_to.send(Reply::Error { error }.into());
                    return;
                }
                return self.step(Event::Add {
                    rule,
                    interfaces: interfaces(),
                    reply: reply_to,
                });
            }
            Request::Remove { name } => {
                return self.step(Event::Remove {
                    name,
                    interfaces: interfaces(),
                    reply: reply_to,
                });
            }
            Request::Switch { rule, input } => {
                return self.step(Event::Switch {
                    rule,
                    input,
                    reply: reply_to,
                });
            }
            Request::List {} => Reply::Rules {
                rules: self.plane.rules().iter().map(|r| self.status(r)).collect(),
                store: self.plane.store_status(Instant::now()),
            },
            Request::Stats {} => Reply::Stats(Box::new(self.stats_report())),
            Request::Reload {} => return self.reload(reply_to),
            Request::Save { to } => config_file::save(&self.plane, to),
            Request::Config {} => config_file::text(&self.plane),
            Request::Events {} => Reply::Events {
                events: self.journal.events(),
            },
            Request::History {} => Reply::History(self.stats.history()),
            Request::Role { set } => self.role(set),
            Request::Restart { binary } => self.ask_restart(binary),
            Request::Nmos {} => self
                .nmos
                .read(
                    self.plane.rules().iter().map(|r| &r.rule),
                    self.plane.version(),
                    &interfaces(),
                )
                .unwrap_or_else(no_node),
            Request::NmosGlance {} => self
                .nmos
                .glance(
                    self.plane.rules().iter().map(|r| &r.rule),
                    self.plane.version(),
                    &interfaces(),
                )
                .unwrap_or_else(no_node),
            Request::NmosStage { receiver, id, body } => return self.nmos_stage(receiver, &id, &body, reply_to),
            Request::Store {} => match self.plane.store_status(Instant::now()) {
                Some(s) => Reply::Store(s),
                None => Reply::Error {
                    error: ControlError::new(
                        ErrorKind::InvalidRequest,
                        "mcrd takes no rules from etcd: its config file has no [daemon.etcd]",
                    ),
                },
            },
            // The connection serves `watch` itself with `stats` requests.
            Request::Watch { .. } => Reply::Error {
                error: ControlError::new(ErrorKind::BadRequest, "watch is answered by the connection"),
            },
            Request::Workers {} => Reply::Workers {
                workers: self
                    .workers
                    .iter()
                    .enumerate()
                    .map(|(i, w)| w.status(self.plane.worker(i)))
                    .collect(),
            },
        };
        let _ = reply_to.send(reply.into());
    }

    /// Keeps a change the daemon answered in the journal (the plane logs
    /// reloads, switches and workers itself).
    fn journal_answer(&mut self, reply: &Reply) {
        let m = match reply {
            Reply::Added { rule, replaced, .. } => {
                format!("rule `{rule}` {}", if *replaced { "changed" } else { "added" })
            }
            Reply::Removed { rule, .. } => format!("rule `{rule}` removed"),
            _ => return,
        };
        self.journal.note(Level::Info, m);
    }

    /// The answer to `role`, after taking the role asked for: the word
    /// every sender reads is written at once, so the next frame goes out
    /// (or is held).
    fn role(&mut self, set: Option<mcr_core::config::Role>) -> Reply {
        let before = self.role.role();
        let changed = set.is_some_and(|r| self.role.set(r, "request"));
        if changed {
            let now = self.role.role();
            self.stats
                .set_standby(self.counts(), now == mcr_core::config::Role::Standby);
            self.journal.note(Level::Info, format!("role: {before} -> {now}"));
        }
        let held = self.stats.held(self.counts(), self.plane.rules());
        Reply::Role(self.role.status(held, changed))
    }

    /// Reads the config file again and has the plane apply what changed
    /// (`SIGHUP`, `mcrctl reload`); answered once the workers run it.
    fn reload(&mut self, reply_to: ReplyTo) {
        let config = self.plane.config_file().and_then(config_file::load);
        self.step(Event::Reload {
            config: Box::new(config),
            interfaces: interfaces(),
            reply: reply_to,
        });
    }

    /// What keeps `rule` from forwarding: an interface that is missing or
    /// whose link is down, what the live workers could not set up for it,
    /// and a port that could not be held.
    fn problems_of(&self, rule: &Rule) -> Vec<String> {
        let ifs = self.plane.interfaces();
        let mut out: Vec<String> = mcr_core::validate::missing_interfaces(rule, ifs)
            .into_iter()
            .map(|i| format!("waiting for interface `{i}`: it does not exist (yet); the rule starts when it appears"))
            .collect();
        let missing = !out.is_empty();
        out.extend(mcr_core::plane::links::problems(rule, ifs));
        if missing {
            // What the workers say about such a rule has the same cause.
            return out;
        }
        let ports = self
            .plane
            .claim(&rule.name)
            .map(|c| c.ports.as_slice())
            .unwrap_or_default();
        out.extend(ports.iter().filter_map(|a| self.ports.problem(*a)));
        let live = self
            .workers
            .iter()
            .enumerate()
            .filter(|(i, _)| self.plane.worker(*i).state.live());
        for p in live.flat_map(|(_, w)| &w.problems).filter(|p| p.concerns(rule)) {
            if !out.contains(&p.error) {
                out.push(p.error.clone());
            }
        }
        out
    }

    fn status(&self, r: &SlottedRule) -> RuleStatus {
        RuleStatus {
            rule: r.rule.clone(),
            joins: self
                .plane
                .claim(&r.rule.name)
                .map(|c| c.joins.iter().map(|k| self.members.state(*k)).collect())
                .unwrap_or_default(),
            problems: self.problems_of(&r.rule),
            origin: self.plane.origin(&r.rule.name),
        }
    }

    async fn shutdown(&mut self, events: &mut mpsc::UnboundedReceiver<WorkerEvent>) {
        tracing::info!("stopping");
        self.step(Event::Stop);
        for w in self.workers.iter_mut() {
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
        print!(
            "{}",
            stats::totals(&self.stats.report(self.counts(), self.plane.rules()))
        );
    }

    /// The answer to `stats`: the counters, each rule's problems and each
    /// worker's CPU.
    fn stats_report(&self) -> mcr_core::control::StatsReport {
        let mut report = self.stats.report(self.counts(), self.plane.rules());
        for (r, s) in self.plane.rules().iter().zip(&mut report.rules) {
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
        self.fill_links(&mut report);
        self.fill_datapath(&mut report);
        let held = report.rules.iter().flat_map(|r| &r.outputs).map(|o| o.held).sum();
        report.role = Some(self.role.status(held, false));
        report.store = self.plane.store_status(Instant::now());
        report.interfaces = self.plane.interface_status();
        report
    }

    /// The SRT and RIST endpoints of each rule, as their workers last said.
    fn fill_links(&self, report: &mut mcr_core::control::StatsReport) {
        use mcr_core::control::{RistInputStatus, SrtInputStatus, SrtStatus};
        let by_slot = |f: fn(&workers::WorkerSlot) -> &Vec<(u32, SrtStatus)>| {
            self.workers
                .iter()
                .flat_map(|w| f(w).iter().map(|(k, v)| (*k, v)))
                .collect::<std::collections::HashMap<u32, &SrtStatus>>()
        };
        let (srt, rist) = (by_slot(|w| &w.srt), by_slot(|w| &w.rist));
        for (r, s) in self.plane.rules().iter().zip(&mut report.rules) {
            for (slot, o) in r.output_slots.iter().zip(&mut s.outputs) {
                o.srt = srt.get(slot).map(|&x| x.clone());
                o.rist = rist.get(slot).map(|&x| x.clone());
            }
        }
        // The line race of arbitrated rules, from the worker that carries
        // each (the one whose copies were measured: every worker reports
        // the rules it has, the others with nothing measured).
        let mut races: BTreeMap<u32, &[mcr_core::arbitrate::race::LagSummary]> = BTreeMap::new();
        for (slot, lags) in self.workers.iter().flat_map(|w| &w.race) {
            let measured = |l: &[mcr_core::arbitrate::race::LagSummary]| l.iter().map(|x| x.samples).sum::<u64>();
            if races.get(slot).is_none_or(|had| measured(had) < measured(lags)) {
                races.insert(*slot, lags);
            }
        }
        for (slot, lags) in races {
            let Some(s) = self
                .plane
                .rules()
                .iter()
                .zip(&mut report.rules)
                .find(|(r, _)| r.slot == slot)
                .and_then(|(_, s)| s.redundancy.as_mut())
            else {
                continue;
            };
            set_race(s, lags);
        }
        // ... and of those the eBPF data path carries.
        if let Some(k) = &self.kernel {
            for (r, s) in self.plane.rules().iter().zip(&mut report.rules) {
                let (Some(lags), Some(red)) = (k.race(r.slot), s.redundancy.as_mut()) else {
                    continue;
                };
                set_race(red, &lags);
            }
        }
        let inputs = self.workers.iter().flat_map(|w| {
            w.srt_inputs
                .iter()
                .map(|x| (true, x))
                .chain(w.rist_inputs.iter().map(|x| (false, x)))
        });
        for (is_srt, (slot, k, status)) in inputs {
            let Some((r, s)) = self
                .plane
                .rules()
                .iter()
                .zip(&mut report.rules)
                .find(|(r, _)| r.slot == *slot)
            else {
                continue;
            };
            let input = r.rule.inputs().nth(*k).map(ToString::to_string).unwrap_or_default();
            if is_srt {
                s.srt_inputs.push(SrtInputStatus {
                    input,
                    index: *k,
                    srt: status.clone(),
                });
            } else {
                s.rist_inputs.push(RistInputStatus {
                    input,
                    index: *k,
                    rist: status.clone(),
                });
            }
        }
    }

    /// Which data path forwards each rule (and which worker, where one
    /// must take all its frames), and where the eBPF one runs.
    fn fill_datapath(&self, report: &mut mcr_core::control::StatsReport) {
        report.datapath_missing = self.kernel_missing.clone();
        for (r, s) in self.plane.rules().iter().zip(&mut report.rules) {
            s.worker = self.workers.carrier_of(r.slot);
        }
        let Some(k) = &self.kernel else { return };
        for (r, s) in self.plane.rules().iter().zip(&mut report.rules) {
            if r.rule.inputs().any(|i| i.as_srt().is_some()) {
                s.datapath_reason = Some(mcr_core::datapath::Ineligible::SrtInput.to_string());
                continue;
            }
            if r.rule.inputs().any(|i| i.as_rist().is_some()) {
                s.datapath_reason = Some(mcr_core::datapath::Ineligible::RistInput.to_string());
                continue;
            }
            match k.why_not(r.slot) {
                None => {
                    s.datapath = "ebpf".into();
                    s.worker = None;
                }
                Some(why) => s.datapath_reason = Some(why.to_string()),
            }
        }
        if let Some(d) = &mut report.datapath {
            d.interfaces = k
                .attached()
                .into_iter()
                .map(|i| {
                    self.plane
                        .interfaces()
                        .by_index(i)
                        .map_or_else(|| format!("#{i}"), |f| f.name.clone())
                })
                .collect();
        }
    }
}

/// Each arbitrated line's place in the race, from its lags.
fn set_race(red: &mut mcr_core::control::RedundancyStats, lags: &[mcr_core::arbitrate::race::LagSummary]) {
    for (i, l) in red.inputs.iter_mut().zip(lags) {
        if let Some(line) = &mut i.line {
            line.lag_samples = l.samples;
            line.lag_p50_us = l.p50_ns as f64 / 1e3;
            line.lag_p99_us = l.p99_ns as f64 / 1e3;
        }
    }
}

/// The answer to an NMOS request of an mcrd that is no node.
fn no_node() -> Reply {
    Reply::Error {
        error: ControlError::new(
            ErrorKind::InvalidRequest,
            "mcrd is no NMOS node: its config file has no [daemon.nmos] (or it says enabled = false)",
        ),
    }
}
