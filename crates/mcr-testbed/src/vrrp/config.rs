//! One VRRP instance for an MCR pair, written out as keepalived.conf.

use std::path::{Path, PathBuf};

/// What differs between the keepalived configurations of an MCR pair (and
/// between a test's and the packaged example): one `vrrp_instance`, its
/// notify script and what it tracks.
///
/// [`VrrpConfig::render`] writes the directives of
/// `packaging/keepalived/keepalived.conf.example` in the same order; a test
/// holds the two together.
#[derive(Debug, Clone, PartialEq)]
pub struct VrrpConfig {
    /// The `vrrp_instance` name, which the notify script follows.
    pub instance: String,
    /// The interface the VRRP adverts go out and come in on (it needs an
    /// IPv4 address).
    pub interface: String,
    /// `virtual_router_id`, 1 to 255, the same on both relays and unique
    /// among the VRRP routers of that link.
    pub vrid: u8,
    /// `priority`, 1 to 254: who wins when both start at once.
    pub priority: u8,
    /// `advert_int` in seconds (VRRPv3 takes hundredths).
    pub advert_int_s: f64,
    /// Interfaces whose link going down puts the instance in FAULT (the
    /// relay's input and output interfaces).
    pub track_interfaces: Vec<String>,
    /// A process name (`/proc/PID/comm`) whose absence puts the instance in
    /// FAULT, e.g. `mcrd`; `None` tracks none.
    pub track_process: Option<String>,
    /// A command (`vrrp_script mcr_alive`, run every second) whose failure
    /// puts the instance in FAULT; `None` runs none. It stands in for
    /// `track_process` where that cannot work: keepalived learns of
    /// processes from the kernel's process connector, which answers only
    /// in the initial network namespace, so a keepalived in a test bed's
    /// namespace never hears that a tracked process ended.
    pub track_script: Option<String>,
    /// The `virtual_ipaddress` (CIDR) that moves to the master; keepalived
    /// requires one.
    pub virtual_ip: String,
    /// The notify fifo script, `mcr-vrrp-notify`.
    pub notify_script: PathBuf,
    /// The control socket the notify script passes to `mcrctl --socket`.
    pub control_socket: PathBuf,
    /// The user that keepalived runs the notify script as (and that owns
    /// the fifo): `mcr` on a relay, `root` in a test.
    pub script_user: String,
    /// A second instance, on another link, synchronised with the first:
    /// `None` for one instance.
    pub synced: Option<SyncedInstance>,
}

/// A second VRRP instance with adverts on a link of its own (the relay's
/// other network), in one `vrrp_sync_group` with the first: either
/// instance failing (its link down) fails both, and the one whose link
/// still works tells the peer at once (an advert of priority 0), whichever
/// link went down.
///
/// The sync group takes [`VrrpConfig::instance`]'s name and the notify
/// script follows it (`--group`); the two instances are named after it and
/// their interfaces (`MCR_eth0`). The second has the first's priority,
/// advert interval and tracked process and script.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncedInstance {
    /// The link its adverts go out and come in on (with an IPv4 address).
    pub interface: String,
    /// Its `virtual_router_id`, unique among the VRRP routers of that link.
    pub vrid: u8,
    /// Its `virtual_ipaddress` (CIDR), in that link's subnet.
    pub virtual_ip: String,
}

impl VrrpConfig {
    /// The values of `packaging/keepalived/keepalived.conf.example`, with
    /// its notify fifo at [`VrrpConfig::EXAMPLE_FIFO`].
    pub fn example() -> VrrpConfig {
        VrrpConfig {
            instance: "MCR".into(),
            interface: "eth0".into(),
            vrid: 51,
            priority: 150,
            advert_int_s: 0.1,
            track_interfaces: vec!["eth1".into(), "eth2".into()],
            track_process: Some("mcrd".into()),
            track_script: None,
            virtual_ip: "192.0.2.10/24".into(),
            notify_script: "/usr/libexec/mcr/mcr-vrrp-notify".into(),
            control_socket: "/run/mcr/mcrd.sock".into(),
            script_user: "mcr".into(),
            synced: None,
        }
    }

    /// Where the example has keepalived make its notify fifo.
    pub const EXAMPLE_FIFO: &str = "/run/mcr-vrrp.fifo";

    /// The configuration file's text, with the notify fifo at `fifo`.
    pub fn render(&self, fifo: &Path) -> String {
        let mut s = String::new();
        let mut line = |text: &str| {
            s.push_str(text);
            s.push('\n');
        };
        line("global_defs {");
        line("    vrrp_version 3");
        line(&format!("    script_user {}", self.script_user));
        line("    enable_script_security");
        line(&format!("    vrrp_notify_fifo {} {}", fifo.display(), self.script_user));
        line(&format!(
            "    vrrp_notify_fifo_script \"{} --{} {} --socket {}\"",
            self.notify_script.display(),
            if self.synced.is_some() { "group" } else { "instance" },
            self.instance,
            self.control_socket.display()
        ));
        line("    fifo_write_vrrp_states_on_reload");
        line("}");
        if let Some(process) = &self.track_process {
            line(&format!("vrrp_track_process {process} {{"));
            line(&format!("    process {process}"));
            line("    quorum 1");
            line("}");
        }
        if let Some(script) = &self.track_script {
            line("vrrp_script mcr_alive {");
            line(&format!("    script \"{script}\""));
            line("    interval 1");
            line("    fall 1");
            line("    rise 1");
            line("}");
        }
        match &self.synced {
            None => self.instance_block(
                &mut line,
                &self.instance,
                &self.interface,
                self.vrid,
                &self.track_interfaces,
                &self.virtual_ip,
            ),
            Some(other) => {
                let name = |interface: &str| format!("{}_{interface}", self.instance);
                line(&format!("vrrp_sync_group {} {{", self.instance));
                line("    group {");
                line(&format!("        {}", name(&self.interface)));
                line(&format!("        {}", name(&other.interface)));
                line("    }");
                line("}");
                self.instance_block(
                    &mut line,
                    &name(&self.interface),
                    &self.interface,
                    self.vrid,
                    &self.track_interfaces,
                    &self.virtual_ip,
                );
                self.instance_block(
                    &mut line,
                    &name(&other.interface),
                    &other.interface,
                    other.vrid,
                    &[],
                    &other.virtual_ip,
                );
            }
        }
        s
    }

    /// One `vrrp_instance` block, with this configuration's priority,
    /// interval and tracked process and script.
    fn instance_block(
        &self,
        line: &mut impl FnMut(&str),
        name: &str,
        interface: &str,
        vrid: u8,
        track_interfaces: &[String],
        virtual_ip: &str,
    ) {
        line(&format!("vrrp_instance {name} {{"));
        line("    state BACKUP");
        line("    nopreempt");
        line(&format!("    interface {interface}"));
        line(&format!("    virtual_router_id {vrid}"));
        line(&format!("    priority {}", self.priority));
        line(&format!("    advert_int {}", seconds(self.advert_int_s)));
        if !track_interfaces.is_empty() {
            line("    track_interface {");
            for i in track_interfaces {
                line(&format!("        {i}"));
            }
            line("    }");
        }
        if let Some(process) = &self.track_process {
            line("    track_process {");
            line(&format!("        {process}"));
            line("    }");
        }
        if self.track_script.is_some() {
            line("    track_script {");
            line("        mcr_alive");
            line("    }");
        }
        line("    virtual_ipaddress {");
        line(&format!("        {virtual_ip}"));
        line("    }");
        line("}");
    }
}

/// Seconds as keepalived reads them: hundredths at most, no trailing zeros
/// (`0.1`, `1`).
fn seconds(s: f64) -> String {
    let text = format!("{s:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The directives of a keepalived.conf: every line without its comment
/// (`#` or `!` to the end of the line) and its surrounding blanks, with runs
/// of blanks made one space, empty lines left out.
pub fn directives(conf: &str) -> Vec<String> {
    conf.lines()
        .map(|l| {
            let end = l.find(['#', '!']).unwrap_or(l.len());
            l[..end].split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .filter(|l| !l.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_holds_the_directives_render_writes() {
        let path = super::super::example_conf();
        let example = std::fs::read_to_string(&path).expect("read the example");
        let rendered = VrrpConfig::example().render(Path::new(VrrpConfig::EXAMPLE_FIFO));
        assert_eq!(directives(&example), directives(&rendered), "{}", path.display());
    }

    #[test]
    fn advert_intervals_are_written_as_keepalived_reads_them() {
        assert_eq!(seconds(0.1), "0.1");
        assert_eq!(seconds(1.0), "1");
        assert_eq!(seconds(0.25), "0.25");
        assert_eq!(seconds(2.5), "2.5");
    }

    #[test]
    fn a_synced_config_has_one_instance_per_link_in_a_group_the_script_follows() {
        let c = VrrpConfig {
            track_interfaces: vec![],
            synced: Some(SyncedInstance {
                interface: "eth1".into(),
                vrid: 52,
                virtual_ip: "198.51.100.10/24".into(),
            }),
            ..VrrpConfig::example()
        };
        let d = directives(&c.render(Path::new(VrrpConfig::EXAMPLE_FIFO)));
        let at = |l: &str| {
            d.iter()
                .position(|x| x == l)
                .unwrap_or_else(|| panic!("no `{l}` in {d:#?}"))
        };
        assert!(
            d.iter()
                .any(|l| l.ends_with("--group MCR --socket /run/mcr/mcrd.sock\"")),
            "{d:#?}"
        );
        let group = at("vrrp_sync_group MCR {");
        assert_eq!(d[group + 1..group + 5], ["group {", "MCR_eth0", "MCR_eth1", "}"]);
        let (first, second) = (at("vrrp_instance MCR_eth0 {"), at("vrrp_instance MCR_eth1 {"));
        assert!(group < first && first < second, "{d:#?}");
        assert_eq!(d[second + 3..second + 5], ["interface eth1", "virtual_router_id 52"]);
        assert_eq!(d.iter().filter(|l| *l == "track_process {").count(), 2, "{d:#?}");
        assert!(!d.iter().any(|l| l == "track_interface {"), "{d:#?}");
        assert!(d.iter().any(|l| l == "198.51.100.10/24"), "{d:#?}");
    }

    #[test]
    fn a_test_config_tracks_no_process() {
        let c = VrrpConfig {
            track_process: None,
            track_interfaces: vec![],
            ..VrrpConfig::example()
        };
        let text = c.render(Path::new("/tmp/x.fifo"));
        assert!(!text.contains("track_process"), "{text}");
        assert!(!text.contains("track_interface"), "{text}");
        assert!(
            text.contains(
                "vrrp_notify_fifo_script \"/usr/libexec/mcr/mcr-vrrp-notify --instance MCR --socket /run/mcr/mcrd.sock\""
            ),
            "{text}"
        );
        assert!(text.contains("vrrp_notify_fifo /tmp/x.fifo mcr"), "{text}");
    }
}
