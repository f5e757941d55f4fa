//! One network namespace of a test bed: run commands and spawn processes
//! inside it, and configure its links.

use std::ffi::OsStr;
use std::process::Command;

use crate::{Proc, Result, command};

/// A network namespace made by a [`crate::Testbed`]. Cloning the handle does
/// not copy the namespace; the test bed removes it when dropped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ns {
    name: String,
}

impl Ns {
    pub(crate) fn new(name: String) -> Self {
        Ns { name }
    }

    /// The namespace's full name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that will run `program` inside this namespace (through
    /// `ip netns exec`, which execs it, so the spawned PID is the program's).
    /// It is killed if the thread that spawns it ends.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        mcr_sys::process::kill_with_parent(&mut cmd);
        cmd
    }

    /// Runs `program args...` inside the namespace to completion and returns
    /// its stdout; a non-zero exit is an error carrying its stderr.
    pub fn exec<I, S>(&self, program: &str, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        command::run(self.command(program).args(args))
    }

    /// One of the namespace's protocol counters in `/proc/net/snmp`, by
    /// its table and name (`("Ip", "InReceives")`, `("Udp",
    /// "RcvbufErrors")`); none if the kernel has no such counter.
    pub fn snmp(&self, table: &str, name: &str) -> Option<u64> {
        let snmp = self.exec("cat", ["/proc/net/snmp"]).ok()?;
        let prefix = format!("{table}:");
        let mut rows = snmp.lines().filter(|l| l.starts_with(&prefix));
        let (names, values) = (rows.next()?, rows.next()?);
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse().ok())
    }

    /// Spawns `cmd` (made with [`Ns::command`]) with stdout and stderr
    /// captured, and returns once it is inside the namespace (`ip netns
    /// exec` enters it only after it starts): from then on the test bed
    /// finds it there and ends it when it is dropped.
    pub fn spawn(&self, cmd: Command) -> Result<Proc> {
        let p = Proc::spawn(cmd)?;
        let want = crate::naming::inode(&format!("{}/{}", crate::naming::NETNS_DIR, self.name));
        let pid = p.pid();
        for _ in 0..1000 {
            match crate::naming::inode(&format!("/proc/{pid}/ns/net")) {
                // Inside, or already gone.
                Some(i) if Some(i) == want => break,
                None => break,
                Some(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        Ok(p)
    }

    /// `ip -n NS ARGS...`
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        command::ip(&full)
    }

    /// Sets a sysctl inside the namespace (only `net.*` keys are per
    /// namespace), e.g. `sysctl("net.ipv4.igmp_max_memberships", "20")`.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.exec("sysctl", ["-q", "-w", &format!("{key}={value}")]).map(|_| ())
    }

    /// Reads a sysctl inside the namespace.
    pub fn sysctl_get(&self, key: &str) -> Result<String> {
        self.exec("sysctl", ["-n", key]).map(|s| s.trim().to_string())
    }

    /// Turns the reverse-path filter off for every interface, present and
    /// future.
    pub fn rp_filter_off(&self) -> Result<()> {
        self.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
        self.sysctl("net.ipv4.conf.default.rp_filter", "0")
    }

    /// Adds an address, e.g. `addr("veth0", "10.0.0.1/24")`.
    pub fn addr(&self, ifname: &str, cidr: &str) -> Result<()> {
        self.ip(&["addr", "add", cidr, "dev", ifname]).map(|_| ())
    }

    /// Adds an IPv6 address usable at once (no duplicate address
    /// detection), e.g. `addr6("veth0", "fd00::1/64")`.
    pub fn addr6(&self, ifname: &str, cidr: &str) -> Result<()> {
        self.ip(&["-6", "addr", "add", cidr, "dev", ifname, "nodad"])
            .map(|_| ())
    }

    /// Removes an address.
    pub fn del_addr(&self, ifname: &str, cidr: &str) -> Result<()> {
        self.ip(&["addr", "del", cidr, "dev", ifname]).map(|_| ())
    }

    /// Adds a route, e.g. `route(&["10.0.1.0/24", "via", "10.0.0.2"])`.
    pub fn route(&self, spec: &[&str]) -> Result<()> {
        let mut args = vec!["route", "add"];
        args.extend_from_slice(spec);
        self.ip(&args).map(|_| ())
    }

    /// The programs attached to the tc ingress hook (tcx) of `ifname` in
    /// this namespace, in the order they run: each program's id and its
    /// link's (asked from a thread that enters the namespace).
    pub fn tcx_ingress(&self, ifname: &str) -> Result<Vec<mcr_sys::bpf::LinkIds>> {
        let (ns, name) = (self.name.clone(), ifname.to_string());
        let asked = std::thread::spawn(move || -> std::io::Result<Vec<mcr_sys::bpf::LinkIds>> {
            mcr_sys::netns::enter(&ns)?;
            mcr_sys::bpf::tcx_ingress(mcr_sys::iface::index_or_unknown(&name)?)
        })
        .join()
        .map_err(|_| std::io::Error::other("the thread asking panicked"));
        asked.and_then(|r| r).map_err(|source| crate::Error::Io {
            what: format!("query the tc ingress programs of `{ifname}` in {}", self.name),
            source,
        })
    }

    /// Brings a link up.
    pub fn link_up(&self, ifname: &str) -> Result<()> {
        self.ip(&["link", "set", ifname, "up"]).map(|_| ())
    }

    /// Takes a link down.
    pub fn link_down(&self, ifname: &str) -> Result<()> {
        self.ip(&["link", "set", ifname, "down"]).map(|_| ())
    }

    /// Deletes a link (for a veth, both ends).
    pub fn link_del(&self, ifname: &str) -> Result<()> {
        self.ip(&["link", "del", ifname]).map(|_| ())
    }

    /// Sets a link's MTU.
    pub fn mtu(&self, ifname: &str, mtu: u32) -> Result<()> {
        self.ip(&["link", "set", ifname, "mtu", &mtu.to_string()]).map(|_| ())
    }

    /// The MAC address of a link, as `aa:bb:cc:dd:ee:ff`.
    pub fn mac(&self, ifname: &str) -> Result<String> {
        self.exec("cat", [format!("/sys/class/net/{ifname}/address")])
            .map(|s| s.trim().to_string())
    }

    /// The index of a link.
    pub fn ifindex(&self, ifname: &str) -> Result<u32> {
        let s = self.exec("cat", [format!("/sys/class/net/{ifname}/ifindex")])?;
        s.trim().parse().map_err(|_| crate::Error::Io {
            what: format!("the index of `{ifname}` in {}", self.name),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, s.clone()),
        })
    }

    /// Turns generic receive offload off on a link (needs `ethtool`), so a
    /// receiver sees packets one by one, as a relay on real hardware would.
    pub fn gro_off(&self, ifname: &str) -> Result<()> {
        self.exec("ethtool", ["-K", ifname, "gro", "off"]).map(|_| ())
    }

    /// Steers receive processing of a link's first queue to the CPUs in
    /// `cpu_mask` (receive packet steering), e.g. `0x2` for CPU 1.
    pub fn rps(&self, ifname: &str, cpu_mask: u64) -> Result<()> {
        self.exec(
            "sh",
            [
                "-c",
                &format!("echo {cpu_mask:x} > /sys/class/net/{ifname}/queues/rx-0/rps_cpus"),
            ],
        )
        .map(|_| ())
    }

    /// Replaces the root qdisc of a link with `netem` and the given options,
    /// e.g. `netem("veth0", &["loss", "5%"])`.
    pub fn netem(&self, ifname: &str, opts: &[&str]) -> Result<()> {
        let mut args = vec!["qdisc", "replace", "dev", ifname, "root", "netem"];
        args.extend_from_slice(opts);
        self.exec("tc", &args).map(|_| ())
    }
}
