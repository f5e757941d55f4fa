//! The relay as an AMWA NMOS Node (`[daemon.nmos]`): what it says about
//! itself, made from its settings and the HTTP server's, and the view of
//! its rules the HTTP server's NMOS APIs answer from (built by
//! `mcr_core::nmos` each time it is asked, with the versions kept here).

use mcr_core::config::{HttpListen, NmosSettings};
use mcr_core::interfaces::Interfaces;
use mcr_core::nmos::{Ids, NmosView, NodeInfo, Versions};
use mcr_core::rule::Rule;

use super::http::{DEFAULT_LISTEN, Options as HttpOptions};

/// The node.
#[derive(Debug)]
pub struct Node {
    info: NodeInfo,
    ids: Ids,
    versions: Versions,
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
                protocol: if http.tls_cert.is_some() { "https" } else { "http" },
                authorization: http.reads_need_token,
            },
            ids: Ids::new(&seed),
            versions: Versions::default(),
        }))
    }

    /// What the APIs answer for `rules` now.
    pub fn view<'a>(&mut self, rules: impl Iterator<Item = &'a Rule>, interfaces: &Interfaces) -> NmosView {
        let rules: Vec<Rule> = rules.cloned().collect();
        mcr_core::nmos::build(&self.info, &self.ids, &rules, interfaces, &mut self.versions)
    }
}
