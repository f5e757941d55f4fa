//! One worker process as the supervisor holds it: started by re-executing
//! `mcrd worker` with its channel, statistics memory and ring keeper,
//! watched through its channel and exit, sampled for CPU time; the rings
//! it read are kept for the worker that replaces it.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use mcr_core::control::WorkerStatus;
use mcr_core::plane::machine::Worker;
use mcr_sys::ring::RingGeometry;
use mcr_sys::shm::SharedCounters;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};

use crate::channel::{
    FromWorker, Problem, RingNote, ToWorker, WORKER_CHANNEL_FD, WORKER_FILTER_FD, WORKER_HEALTH_FD, WORKER_RINGS_FD,
    WORKER_STATS_FD,
};
use crate::supervisor::control::{LineEnd, read_line};
use crate::supervisor::handover;

use super::{FromKernel, KeptRings, Recipe, WorkerEvent};

/// The supervisor's hold on one worker process: the process, what it
/// could not set up, its CPU time and the rings kept for its successor
/// (the process itself runs `worker::Worker`; where it is in its life is
/// the plane's [`mcr_core::plane::machine::Worker`]).
#[derive(Debug)]
pub struct WorkerSlot {
    /// Its index (also its statistics block).
    pub index: usize,
    /// The CPU it is pinned to.
    pub cpu: usize,
    /// Its process id while it runs.
    pub pid: Option<u32>,
    /// What it could not set up for that table.
    pub problems: Vec<Problem>,
    /// Its SRT outputs as it last said (by output slot); none once it
    /// ends, since its connections end with it.
    pub srt: Vec<(u32, mcr_core::control::SrtStatus)>,
    /// Its SRT inputs as it last said (by rule slot and input).
    pub srt_inputs: Vec<(u32, usize, mcr_core::control::SrtStatus)>,
    /// Its RIST outputs as it last said (by output slot).
    pub rist: Vec<(u32, mcr_core::control::SrtStatus)>,
    /// Its RIST inputs as it last said (by rule slot and input).
    pub rist_inputs: Vec<(u32, usize, mcr_core::control::SrtStatus)>,
    /// The line race of its arbitrated rules as it last said (by rule
    /// slot).
    pub race: Vec<(u32, Vec<mcr_core::arbitrate::race::LagSummary>)>,
    /// CPU seconds of its earlier processes.
    cpu_before_s: f64,
    /// CPU seconds of the current process when last sampled, and when.
    cpu_now: Option<(Instant, f64)>,
    /// The share of a CPU it used between the last two samples.
    pub busy: f64,
    generation: u64,
    stop: Option<oneshot::Sender<()>>,
    /// The rings of the dead process, for the next one.
    kept: KeptRings,
    /// The supervisor's end of the live process's ring channel, to hand it
    /// new rings.
    ring_tx: Option<OwnedFd>,
}

/// The longest message line a worker may send (its largest, an `applied`
/// with a problem for each of thousands of rules, is far below).
const MAX_WORKER_LINE: usize = 16 << 20;

impl WorkerSlot {
    /// A worker slot, not started yet.
    pub fn new(index: usize, cpu: usize) -> Self {
        WorkerSlot {
            index,
            cpu,
            pid: None,
            problems: Vec::new(),
            srt: Vec::new(),
            srt_inputs: Vec::new(),
            rist: Vec::new(),
            rist_inputs: Vec::new(),
            race: Vec::new(),
            cpu_before_s: 0.0,
            cpu_now: None,
            busy: 0.0,
            generation: 0,
            stop: None,
            kept: KeptRings::new(),
            ring_tx: None,
        }
    }

    /// True for events of this incarnation.
    pub fn is_current(&self, generation: u64) -> bool {
        generation == self.generation
    }

    /// Starts (or restarts) the process and its channel tasks.
    pub fn spawn(
        &mut self,
        recipe: &Recipe,
        counters: &SharedCounters,
        kernel: Option<FromKernel<'_>>,
        table: &watch::Sender<Arc<Vec<u8>>>,
        events: &mpsc::UnboundedSender<WorkerEvent>,
    ) -> std::io::Result<()> {
        let (ours, theirs) = StdUnixStream::pair()?;
        let (keeper, keeper_theirs) = mcr_sys::fdpass::seqpacket_pair()?;
        mcr_sys::fdpass::set_nonblocking(keeper.as_fd(), true)?;
        hand_over(&keeper, &self.kept, self.index);
        let mut cmd = std::process::Command::new(&recipe.exe);
        cmd.arg("worker")
            .args(&recipe.common_args)
            .args(["--index", &self.index.to_string(), "--cpu", &self.cpu.to_string()])
            .stdin(Stdio::null());
        let mut fds = vec![
            (theirs.as_fd(), WORKER_CHANNEL_FD),
            (counters.as_fd(), WORKER_STATS_FD),
            (keeper_theirs.as_fd(), WORKER_RINGS_FD),
        ];
        if let Some(k) = kernel {
            fds.push((k.ring_filter, WORKER_FILTER_FD));
            cmd.arg("--ring-filter");
            if let Some(h) = k.health_ring {
                fds.push((h, WORKER_HEALTH_FD));
                cmd.arg("--health-ring");
            }
        }
        mcr_sys::process::pass_fds(&mut cmd, &fds);
        // A worker dies with its supervisor.
        mcr_sys::process::kill_with_parent(&mut cmd);
        let mut child = tokio::process::Command::from(cmd).kill_on_drop(true).spawn()?;
        drop(theirs);
        drop(keeper_theirs);
        self.generation += 1;
        self.pid = child.id();
        self.problems.clear();
        ours.set_nonblocking(true)?;
        let stream = UnixStream::from_std(ours)?;
        let (rd, mut wr) = stream.into_split();
        let (index, generation) = (self.index, self.generation);

        // Reader: the worker's messages, line by line, each at most
        // MAX_WORKER_LINE long: a worker that sends more is not trusted to
        // go on and is killed (and restarted like any worker that dies).
        let tx = events.clone();
        // A pidfd, so that the kill below reaches this process even if it has
        // died and been reaped meanwhile and its pid is someone else's.
        let pidfd = child.id().and_then(|p| mcr_sys::process::PidFd::open(p).ok());
        tokio::spawn(async move {
            let mut rd = BufReader::new(rd);
            let mut line = Vec::new();
            loop {
                line.clear();
                match read_line(&mut rd, &mut line, MAX_WORKER_LINE).await {
                    Ok(LineEnd::Newline) => {}
                    Ok(LineEnd::TooLong) => {
                        tracing::error!(
                            "worker {index}: a message longer than {MAX_WORKER_LINE} bytes; killing it (it will be restarted)"
                        );
                        if let Some(p) = &pidfd {
                            let _ = p.signal(mcr_sys::process::Signal::Kill);
                        }
                        return;
                    }
                    Ok(LineEnd::Eof) | Err(_) => return,
                }
                match serde_json::from_slice::<FromWorker>(&line) {
                    Ok(msg) => {
                        let _ = tx.send(WorkerEvent::Said { index, generation, msg });
                    }
                    Err(e) => tracing::warn!(
                        "worker {index}: unreadable message ({e}): {}",
                        String::from_utf8_lossy(&line[..line.len().min(200)])
                    ),
                }
            }
        });

        // Writer: the newest table whenever it changes (so a worker that
        // falls behind gets the latest, not every one in between), and a
        // stop when asked.
        let mut tables = table.subscribe();
        tables.mark_changed();
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        self.stop = Some(stop_tx);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = &mut stop_rx => {
                        if let Ok(mut line) = serde_json::to_vec(&ToWorker::Stop) {
                            line.push(b'\n');
                            let _ = wr.write_all(&line).await;
                        }
                        return;
                    }
                    changed = tables.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let bytes = tables.borrow_and_update().clone();
                        if wr.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });

        // Keeper: the copies of its rings, as it reports them, until its
        // end of the ring channel closes.
        self.ring_tx = keeper.try_clone().ok();
        let kept = std::mem::take(&mut self.kept);
        let keeping = tokio::task::spawn_blocking(move || keep_rings(&keeper, kept, index));

        // Watcher: how it ends, with its rings.
        let tx = events.clone();
        tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(s) => describe_exit(s),
                Err(e) => format!("could not be waited for: {e}"),
            };
            let rings = keeping.await.unwrap_or_default();
            let _ = tx.send(WorkerEvent::Exited {
                index,
                generation,
                how,
                rings,
            });
        });
        Ok(())
    }

    /// Takes a ring the mcrd before left this worker (read on by the
    /// process that starts next, from where the last one stopped).
    pub fn adopt_ring(&mut self, ifindex: u32, geometry: RingGeometry, fd: OwnedFd) {
        self.kept.insert(ifindex, (geometry, fd));
    }

    /// The rings kept for the next process (after the last one ended),
    /// with the names they are handed over under.
    pub fn kept_rings(&self) -> impl Iterator<Item = (String, std::os::fd::BorrowedFd<'_>)> {
        self.kept
            .iter()
            .map(|(i, (g, fd))| (super::handover::ring_name(self.index, *i, *g), fd.as_fd()))
    }

    /// Notes that the process ended, leaving `rings` for the next one.
    pub fn ended(&mut self, rings: KeptRings) {
        self.pid = None;
        self.ring_tx = None;
        self.srt.clear();
        self.srt_inputs.clear();
        self.rist.clear();
        self.rist_inputs.clear();
        self.race.clear();
        self.kept.extend(rings);
        self.cpu_before_s += self.cpu_now.take().map_or(0.0, |(_, s)| s);
        self.busy = 0.0;
        self.stop = None;
    }

    /// Hands it a ring it did not open (the founding member of a fanout
    /// group): through its ring channel while it runs (it takes the ring
    /// when it next applies a table, and tells the keeper it holds it),
    /// else kept for the process that starts next.
    pub fn give_ring(&mut self, ifindex: u32, ring: mcr_sys::ring::RxRing) {
        let (geometry, fd) = ring.into_socket();
        if let Some(tx) = &self.ring_tx {
            let note = RingNote::encode(&[RingNote::Hold { ifindex, geometry }]);
            match mcr_sys::fdpass::send_nowait(tx.as_fd(), &note, &[fd.as_fd()]) {
                Ok(()) => return,
                Err(e) => tracing::warn!(
                    "worker {}: could not hand over the ring of interface #{ifindex} ({e}); kept for its next start",
                    self.index
                ),
            }
        }
        self.kept.insert(ifindex, (geometry, fd));
    }

    /// Reads the CPU time of its process, for [`WorkerSlot::cpu_s`] and
    /// [`WorkerSlot::busy`].
    pub fn sample_cpu(&mut self) {
        let Some(now_s) = self.pid.and_then(|p| mcr_sys::process::cpu_seconds(p, false)) else {
            return;
        };
        let now = Instant::now();
        if let Some((then, then_s)) = self.cpu_now {
            let dt = now.duration_since(then).as_secs_f64();
            if dt > 0.0 {
                self.busy = ((now_s - then_s) / dt).clamp(0.0, 1.0);
            }
        }
        self.cpu_now = Some((now, now_s));
    }

    /// CPU seconds over all its processes (as last sampled): never goes
    /// backwards across restarts.
    pub fn cpu_s(&self) -> f64 {
        self.cpu_before_s + self.cpu_now.map_or(0.0, |(_, s)| s)
    }

    /// Kills the running process (SIGKILL), if any.
    pub fn kill(&self) {
        if let Some(p) = self.pid.and_then(|p| mcr_sys::process::PidFd::open(p).ok()) {
            let _ = p.signal(mcr_sys::process::Signal::Kill);
        }
    }

    /// Asks the worker to finish and exit.
    pub fn ask_to_stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Its status for `mcrctl workers`, with what the plane knows of it.
    pub fn status(&self, life: &Worker) -> WorkerStatus {
        WorkerStatus {
            index: self.index,
            pid: self.pid,
            cpu: self.cpu,
            state: life.state.name().into(),
            restarts: life.restarts,
            table_version: life.applied,
            last_exit: life.last_exit.clone(),
            problems: self.problems.iter().map(|p| p.error.clone()).collect(),
        }
    }
}

/// The most rings the supervisor keeps for one worker (one per input
/// interface), so that a worker gone wrong cannot make it hold descriptors
/// without end.
const MAX_KEPT_RINGS: usize = 4096;

/// Puts copies of `kept` in the new worker's ring channel before it starts,
/// so that it finds them all waiting. The channel queues a few messages
/// only (`net.unix.max_dgram_qlen`, 10 by default), of up to 64 rings
/// each; rings beyond what fits are opened afresh by the worker.
fn hand_over(keeper: &OwnedFd, kept: &KeptRings, index: usize) {
    let all: Vec<_> = kept.iter().collect();
    for (sent, chunk) in all.chunks(mcr_sys::fdpass::MAX_FDS).enumerate() {
        let notes: Vec<_> = chunk
            .iter()
            .map(|(ifindex, (geometry, _))| RingNote::Hold {
                ifindex: **ifindex,
                geometry: *geometry,
            })
            .collect();
        let fds: Vec<_> = chunk.iter().map(|(_, (_, fd))| fd.as_fd()).collect();
        if let Err(e) = mcr_sys::fdpass::send(keeper.as_fd(), &RingNote::encode(&notes), &fds) {
            tracing::warn!(
                "worker {index}: could not hand over {} of its {} receive rings ({e}); it opens them afresh, and what they held is lost",
                kept.len() - sent * mcr_sys::fdpass::MAX_FDS,
                kept.len()
            );
            return;
        }
    }
}

/// Follows a worker's ring notes, starting from the rings it was handed,
/// until it is gone; returns what it held last. Blocks (a thread of its
/// own for the worker's life).
fn keep_rings(keeper: &OwnedFd, mut kept: KeptRings, index: usize) -> KeptRings {
    // The rings it starts with (kept from the process before, taken over
    // from the mcrd before, or founded by the supervisor) outlive mcrd too:
    // the worker reports only the rings it opens itself.
    for (ifindex, (geometry, fd)) in &kept {
        handover::store_ring(&handover::ring_name(index, *ifindex, *geometry), fd.as_fd());
    }
    if let Err(e) = mcr_sys::fdpass::set_nonblocking(keeper.as_fd(), false) {
        tracing::warn!("worker {index}: ring channel: {e}");
        return kept;
    }
    loop {
        let m = match mcr_sys::fdpass::recv(keeper.as_fd()) {
            Ok(Some(m)) => m,
            Ok(None) => return kept,
            Err(e) => {
                tracing::warn!("worker {index}: ring channel: {e}");
                return kept;
            }
        };
        let notes = match RingNote::decode(&m.text, m.fds.len()) {
            Ok(n) if !m.truncated => n,
            Ok(_) => {
                tracing::warn!("worker {index}: a ring note cut short; ignored");
                continue;
            }
            Err(e) => {
                tracing::warn!("worker {index}: unreadable ring note ({e}); ignored");
                continue;
            }
        };
        let mut fds = m.fds.into_iter();
        for n in notes {
            match n {
                RingNote::Hold { ifindex, geometry } => {
                    let Some(fd) = fds.next() else { break };
                    if kept.len() >= MAX_KEPT_RINGS && !kept.contains_key(&ifindex) {
                        tracing::warn!(
                            "worker {index}: more than {MAX_KEPT_RINGS} receive rings; interface #{ifindex}'s is not kept across a restart"
                        );
                        continue;
                    }
                    let stored = kept
                        .get(&ifindex)
                        .map(|(g, f)| (handover::ring_name(index, ifindex, *g), f));
                    let same = stored.as_ref().is_some_and(|(_, f)| same_socket(f.as_fd(), fd.as_fd()));
                    if !same {
                        if let Some((name, _)) = stored {
                            handover::unstore_ring(&name);
                        }
                        handover::store_ring(&handover::ring_name(index, ifindex, geometry), fd.as_fd());
                    }
                    kept.insert(ifindex, (geometry, fd));
                }
                RingNote::Release { ifindex } => {
                    if let Some((g, _)) = kept.remove(&ifindex) {
                        handover::unstore_ring(&handover::ring_name(index, ifindex, g));
                    }
                }
            }
        }
    }
}

/// True if two descriptors are of one socket.
fn same_socket(a: std::os::fd::BorrowedFd<'_>, b: std::os::fd::BorrowedFd<'_>) -> bool {
    matches!(
        (mcr_sys::handover::identity(a), mcr_sys::handover::identity(b)),
        (Ok(x), Ok(y)) if x == y
    )
}

fn describe_exit(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(sig)) => format!("killed by signal {sig}"),
        _ => s.to_string(),
    }
}
