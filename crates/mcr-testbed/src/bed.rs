//! The test bed: the namespaces one test made, removed together on drop.

use mcr_sys::process::effective_uid;

use crate::naming::{new_prefix, reap_stale, remove_namespace};
use crate::{Error, Ns, Result};

/// A set of network namespaces created for one test or benchmark.
///
/// Dropping it kills every process still running in its namespaces and
/// deletes them, their veth pairs and bridges with them. This also happens
/// while a test panics; a process that is killed outright leaves its
/// namespaces for the next [`Testbed::new`] to reap.
#[derive(Debug)]
pub struct Testbed {
    prefix: String,
    namespaces: Vec<Ns>,
}

/// How a Linux bridge treats multicast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgeOptions {
    /// IGMP/MLD snooping: forward a group only to ports that joined it (and
    /// to multicast-router ports).
    pub snooping: bool,
    /// The bridge sends IGMPv3/MLDv2 general queries itself, as a switch's
    /// querier would, so hosts keep reporting their memberships. (Its
    /// query response interval is cut to 1 s: a new querier floods unknown
    /// groups for one such interval before it prunes them.)
    pub querier: bool,
}

/// Runs `f` on a thread of its own inside a fresh namespace (loopback
/// up) of a test bed tagged `tag`, removed afterwards even when `f`
/// panics (the panic then goes on). For tests of libraries that open
/// their sockets in the namespace of the calling thread (libsrt, librist).
pub fn on_thread_in_namespace<T: Send + 'static>(tag: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let mut tb = Testbed::new(tag).expect("test bed");
    let name = tb.ns("t").expect("namespace").name().to_string();
    let ran = std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        f()
    })
    .join();
    drop(tb);
    ran.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

impl Testbed {
    /// A new, empty test bed. `tag` (the test's name, say) is kept, shortened,
    /// in every namespace name so a leftover can be traced to its test.
    /// First removes the namespaces of test beds whose process has died.
    pub fn new(tag: &str) -> Result<Testbed> {
        let uid = effective_uid();
        if uid != 0 {
            return Err(Error::NotRoot { uid });
        }
        reap_stale();
        let prefix = new_prefix(tag).map_err(|source| Error::Io {
            what: "name the test bed".into(),
            source,
        })?;
        Ok(Testbed {
            prefix,
            namespaces: Vec::new(),
        })
    }

    /// The prefix of every namespace name of this test bed.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespaces made so far, in creation order.
    pub fn namespaces(&self) -> &[Ns] {
        &self.namespaces
    }

    /// Creates a namespace for `role` (e.g. `"gen"`) with its loopback up.
    pub fn ns(&mut self, role: &str) -> Result<Ns> {
        let name = format!("{}{role}", self.prefix);
        crate::command::ip(&["netns", "add", &name])?;
        let ns = Ns::new(name);
        // Track it before configuring it, so a failure below still removes it.
        self.namespaces.push(ns.clone());
        ns.link_up("lo")?;
        Ok(ns)
    }

    /// Creates a veth pair with one end, `a_if`, in `a` and the other,
    /// `b_if`, in `b`, and brings both up. The ends are created inside their
    /// namespaces, so their names never meet those of another test.
    pub fn veth(&self, a: &Ns, a_if: &str, b: &Ns, b_if: &str) -> Result<()> {
        a.ip(&[
            "link",
            "add",
            a_if,
            "type",
            "veth",
            "peer",
            "name",
            b_if,
            "netns",
            b.name(),
        ])?;
        a.link_up(a_if)?;
        b.link_up(b_if)
    }

    /// Creates bridge `name` in `ns` with the given multicast behaviour and
    /// brings it up.
    pub fn bridge(&self, ns: &Ns, name: &str, opts: BridgeOptions) -> Result<()> {
        let snooping = if opts.snooping { "1" } else { "0" };
        let querier = if opts.querier { "1" } else { "0" };
        ns.ip(&[
            "link",
            "add",
            name,
            "type",
            "bridge",
            "stp_state",
            "0",
            "mcast_snooping",
            snooping,
            "mcast_querier",
            querier,
            "mcast_igmp_version",
            "3",
            "mcast_mld_version",
            "2",
            "mcast_query_response_interval",
            "100",
        ])?;
        ns.link_up(name)
    }

    /// Makes `port` (a link in `ns`) a port of `bridge` and brings it up.
    pub fn attach(&self, ns: &Ns, port: &str, bridge: &str) -> Result<()> {
        ns.ip(&["link", "set", port, "master", bridge])?;
        ns.link_up(port)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            remove_namespace(ns.name());
        }
    }
}
