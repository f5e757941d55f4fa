//! The NMOS component: the relay as an AMWA NMOS Node, when
//! `[daemon.nmos]` says so.
//!
//! - **Owns:** the [`Node`] (its ids, versions, what is staged and
//!   active, the view its APIs answer from), its registration with a
//!   registry ([`registration`]), and the timers of scheduled activations
//!   ([`timer`]).
//! - **Takes from the plane:** the rules, the table version and the
//!   interfaces, to build its view; the rates the statistics measure, for
//!   its senders' bit rates.
//! - **Offers:** answers to the NMOS requests of the HTTP server (`Nmos`,
//!   `NmosGlance`, `NmosStage`), and rules to change: an IS-05 activation
//!   comes back to the supervisor as a [`Change`], which it hands to the
//!   plane as an `Event::Add`.
//!
//! An activation scheduled for later comes back through the receiver
//! [`Nmos::new`] returns, at its time; a request that arrives after an
//! activation's time finds it made first ([`Nmos::catch_up`]).

mod node;
mod registration;
mod timer;

use mcr_core::control::{Reply, Response};
use mcr_core::interfaces::Interfaces;
use mcr_core::rule::Rule;
use tokio::sync::{mpsc, oneshot};

use super::control::Call;
use super::http::Options as HttpOptions;
pub use node::Node;

/// Where the answer to a request goes.
type ReplyTo = oneshot::Sender<Response>;

/// An activation's id and number, when its time has come.
pub type Due = (String, u64);

/// A rule an activation changes: the supervisor hands it to the plane,
/// with `reply` for the plane's answer.
#[derive(Debug)]
pub struct Change {
    /// The rule as it is to be.
    pub rule: Rule,
    /// Where the plane answers (the component tells the controller, or
    /// the log, what became of it).
    pub reply: ReplyTo,
}

/// The NMOS node, if there is one, and its activations' timers.
#[derive(Debug)]
pub struct Nmos {
    node: Option<Node>,
    due: mpsc::UnboundedSender<Due>,
}

impl Nmos {
    /// The node `settings` describe (none without `[daemon.nmos]`), and
    /// where its scheduled activations come back when due.
    pub fn new(
        settings: Option<&mcr_core::config::NmosSettings>,
        http: &HttpOptions,
    ) -> anyhow::Result<(Nmos, mpsc::UnboundedReceiver<Due>)> {
        let (due, due_rx) = mpsc::unbounded_channel();
        Ok((
            Nmos {
                node: Node::new(settings, http)?,
                due,
            },
            due_rx,
        ))
    }

    /// Whether the relay is an NMOS node.
    pub fn is_node(&self) -> bool {
        self.node.is_some()
    }

    /// Starts registering with a registry, asking the supervisor through
    /// `calls` for what to register.
    pub fn register(&self, calls: mpsc::Sender<Call>) {
        if let Some(node) = &self.node {
            node.register(calls);
        }
    }

    /// The rules' bit rates (their peaks, with the headers, bit/s).
    pub fn measured<'a>(&mut self, peaks: impl Iterator<Item = (&'a str, f64)>) {
        if let Some(node) = &mut self.node {
            node.measured(peaks);
        }
    }

    /// The answer to `nmos`: the view of `rules` at `version`.
    pub fn read<'a>(
        &mut self,
        rules: impl Iterator<Item = &'a Rule> + Clone,
        version: u64,
        interfaces: &Interfaces,
    ) -> Option<Reply> {
        let node = self.node.as_mut()?;
        Some(Reply::Nmos(node.view_to_read(rules, version, interfaces)))
    }

    /// The answer to `nmos_glance`.
    pub fn glance<'a>(
        &self,
        rules: impl Iterator<Item = &'a Rule>,
        version: u64,
        interfaces: &Interfaces,
    ) -> Option<Reply> {
        let node = self.node.as_ref()?;
        Some(Reply::NmosGlance(node.glance(rules, version, interfaces)))
    }

    /// An IS-05 PATCH of `staged`: answered at once (or scheduled, and
    /// answered), or the rule to change now, the answer going to
    /// `reply_to` once the plane has taken it.
    pub fn stage<'a>(
        &mut self,
        receiver: bool,
        id: &str,
        body: &serde_json::Value,
        rules: impl Iterator<Item = &'a Rule> + Clone,
        interfaces: &Interfaces,
        reply_to: ReplyTo,
    ) -> Option<Change> {
        let answer = |status: u16, body: serde_json::Value| Reply::NmosStaged { status, body };
        let Some(node) = &mut self.node else {
            let _ = reply_to.send(answer(404, node::error(404, "mcrd is no NMOS node")).into());
            return None;
        };
        match node.stage(receiver, id, body, rules, interfaces) {
            node::Outcome::Answer(status, body) => {
                let _ = reply_to.send(answer(status, body).into());
                None
            }
            node::Outcome::Schedule { body, due, generation } => {
                // On the monotonic clock, read now: the timer's task may
                // first run some time from now on a busy machine.
                let wait_ns =
                    u64::try_from(due.as_ns().saturating_sub(mcr_core::nmos::tai_now().as_ns())).unwrap_or(u64::MAX);
                let deadline_ns = mcr_sys::clock::monotonic_ns().saturating_add(wait_ns);
                let (tx, id) = (self.due.clone(), id.to_string());
                // This is the supervisor's loop (it calls us).
                let this_loop = mcr_sys::process::thread_id();
                tokio::spawn(timer::at_its_time(deadline_ns, this_loop, move || {
                    let _ = tx.send((id, generation));
                }));
                let _ = reply_to.send(answer(202, body).into());
                None
            }
            node::Outcome::Apply { rule, body } => {
                tracing::info!("NMOS: {id} activated: rule {} changes", rule.name);
                let (tx, rx) = oneshot::channel::<Response>();
                tokio::spawn(async move {
                    let done = match rx.await {
                        Ok(r) if r.ok => answer(200, body),
                        Ok(r) => match r.reply {
                            Reply::Error { error } => answer(400, node::error(400, error.message)),
                            _ => answer(500, node::error(500, "the rule was not changed")),
                        },
                        Err(_) => answer(500, node::error(500, "mcrd is stopping")),
                    };
                    let _ = reply_to.send(done.into());
                });
                Some(Change { rule, reply: tx })
            }
        }
    }

    /// The scheduled activations whose time has passed (before an NMOS
    /// request is answered: IS-05 says a resource is active from its
    /// activation time, and a GET can reach the loop before the timer's
    /// call-back does; the call-back then finds nothing left to do).
    pub fn catch_up(&self) -> Vec<Due> {
        match &self.node {
            Some(node) => node.overdue(mcr_core::nmos::tai_now()),
            None => Vec::new(),
        }
    }

    /// Scheduled activation `generation` of `id` is due, and was taken up
    /// `at`: the rule it changes, if it still stands; why it cannot be
    /// made, if it cannot.
    pub fn activate<'a>(
        &mut self,
        (id, generation): &Due,
        at: mcr_core::nmos::Tai,
        rules: impl Iterator<Item = &'a Rule> + Clone,
        interfaces: &Interfaces,
    ) -> Option<Result<Change, String>> {
        let node = self.node.as_mut()?;
        match node.due(id, *generation, at, rules, interfaces)? {
            Ok(rule) => {
                tracing::info!("NMOS: {id}'s scheduled activation: rule {} changes", rule.name);
                let (tx, rx) = oneshot::channel::<Response>();
                let id = id.clone();
                tokio::spawn(async move {
                    if let Ok(r) = rx.await
                        && let Reply::Error { error } = r.reply
                    {
                        tracing::warn!("NMOS: {id}'s scheduled activation was refused: {}", error.message);
                    }
                });
                Some(Ok(Change { rule, reply: tx }))
            }
            Err(why) => Some(Err(format!("NMOS: {id}'s scheduled activation cannot be made: {why}"))),
        }
    }

    /// The loop made the activation its timer woke it for: it goes back
    /// to the ordinary scheduling class ([`timer::at_its_time`] made it
    /// prompt).
    pub fn taken_up(&self) {
        let _ = mcr_sys::process::set_prompt(0, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcr_core::config::NmosSettings;
    use serde_json::json;

    fn rules() -> [Rule; 1] {
        [Rule::new(
            "r0",
            "lo:239.1.1.1:5001".parse().expect("input"),
            vec!["lo:239.10.1.1:6001".parse().expect("output")],
        )]
    }

    #[tokio::test]
    async fn without_a_node_every_request_is_refused_and_nothing_changes() {
        let (mut nmos, _due) = Nmos::new(None, &HttpOptions::default()).expect("no settings");
        assert!(!nmos.is_node());
        let (rules, ifs) = (rules(), Interfaces::default());
        assert!(nmos.read(rules.iter(), 1, &ifs).is_none());
        assert!(nmos.glance(rules.iter(), 1, &ifs).is_none());
        let (tx, rx) = oneshot::channel();
        assert!(nmos.stage(true, "x", &json!({}), rules.iter(), &ifs, tx).is_none());
        match rx.await.expect("answered").reply {
            Reply::NmosStaged { status, .. } => assert_eq!(status, 404),
            other => panic!("{other:?}"),
        }
        assert!(nmos.catch_up().is_empty());
    }

    /// A relative activation is answered 202, comes back from its timer,
    /// and is a rule change once: the timer's call-back after a request
    /// made it changes nothing.
    #[tokio::test]
    async fn a_scheduled_activation_comes_back_at_its_time_as_one_change() {
        let settings = NmosSettings {
            id_seed: Some("seed".into()),
            ..NmosSettings::default()
        };
        let (mut nmos, mut due_rx) = Nmos::new(Some(&settings), &HttpOptions::default()).expect("settings");
        let (rules, ifs) = (rules(), Interfaces::default());
        let Some(Reply::Nmos(view)) = nmos.read(rules.iter(), 1, &ifs) else {
            panic!("a view");
        };
        let sender = view.connection_senders[0].id.clone();
        let body = json!({
            "transport_params": [{"destination_port": 6002}],
            "activation": {"mode": "activate_scheduled_relative", "requested_time": "0:10000000"},
        });
        let (tx, rx) = oneshot::channel();
        assert!(nmos.stage(false, &sender, &body, rules.iter(), &ifs, tx).is_none());
        match rx.await.expect("answered").reply {
            Reply::NmosStaged { status, .. } => assert_eq!(status, 202),
            other => panic!("{other:?}"),
        }
        let due = due_rx.recv().await.expect("the timer");
        assert_eq!(due.0, sender);
        assert_eq!(nmos.catch_up(), vec![due.clone()], "its time has passed");
        let change = nmos
            .activate(&due, mcr_core::nmos::tai_now(), rules.iter(), &ifs)
            .expect("due")
            .expect("made");
        nmos.taken_up();
        assert_eq!(change.rule.outputs[0].as_udp().expect("udp").destination.port(), 6002);
        assert!(
            nmos.activate(&due, mcr_core::nmos::tai_now(), rules.iter(), &ifs)
                .is_none(),
            "made once"
        );
        assert!(nmos.catch_up().is_empty());
    }
}
