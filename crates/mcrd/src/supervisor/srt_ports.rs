//! A rule's SRT listeners need their UDP ports free: worker 0 binds them
//! when the table reaches it, and a port another program has would only
//! show there, as a problem on the rule. So `mcrctl add` tries each new
//! listener's port first and refuses the rule, naming the port, when it is
//! taken. (A listener the rules have already is worker 0's own.)

use std::net::{SocketAddr, UdpSocket};

use mcr_core::control::{ControlError, ErrorKind};
use mcr_core::rule::Rule;
use mcr_core::snapshot::SlottedRule;
use mcr_core::srt::{SrtEndpoint, SrtMode};

/// Every SRT listener of `rule`, with the field that names it.
fn listeners(rule: &Rule) -> impl Iterator<Item = (String, &SrtEndpoint)> {
    let inputs = rule.inputs().enumerate().filter_map(|(k, i)| {
        let field = if k == 0 {
            "input".to_string()
        } else {
            format!("redundancy.inputs[{}]", k - 1)
        };
        Some((field, i.as_srt()?))
    });
    let outputs = rule
        .outputs
        .iter()
        .enumerate()
        .filter_map(|(j, o)| Some((format!("outputs[{j}]"), o.as_srt()?)));
    inputs.chain(outputs).filter(|(_, e)| e.mode == SrtMode::Listener)
}

/// Whether a rule of `current` listens on `addr` already (on its port, at
/// that address or the wildcard).
fn ours(addr: SocketAddr, current: &[SlottedRule]) -> bool {
    current.iter().any(|r| {
        listeners(&r.rule).any(|(_, e)| {
            e.address.port() == addr.port()
                && (e.address.ip() == addr.ip() || e.address.ip().is_unspecified() || addr.ip().is_unspecified())
        })
    })
}

/// The refusal for `rule` if another program has the UDP port of one of
/// its new SRT listeners.
pub fn taken(rule: &Rule, current: &[SlottedRule]) -> Option<ControlError> {
    for (field, e) in listeners(rule) {
        if ours(e.address, current) {
            continue;
        }
        if let Err(err) = UdpSocket::bind(e.address) {
            let why = if err.kind() == std::io::ErrorKind::AddrInUse {
                format!("UDP port {} is taken by another program", e.address.port())
            } else {
                format!("cannot bind {}: {err}", e.address)
            };
            let mut refusal = ControlError::new(
                ErrorKind::InvalidRule,
                format!(
                    "rule `{}`: {field}: SRT listener {}: {why}; choose another port or stop that program",
                    rule.name, e.address
                ),
            );
            refusal.field = Some(field);
            return Some(refusal);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_another_program_has_is_refused_and_a_free_one_is_not() {
        let other = UdpSocket::bind("127.0.0.1:0").expect("a port");
        let port = other.local_addr().expect("addr").port();
        let rule = |out: String| {
            Rule::new(
                "r",
                "veth1:239.1.1.1:5001".parse().expect("input"),
                vec![out.parse().expect("output")],
            )
        };
        let e = taken(&rule(format!("srt://127.0.0.1:{port},mode=listener")), &[]).expect("refused");
        assert_eq!(e.field.as_deref(), Some("outputs[0]"));
        assert!(
            e.message
                .contains(&format!("UDP port {port} is taken by another program")),
            "{}",
            e.message
        );
        drop(other);
        assert!(taken(&rule(format!("srt://127.0.0.1:{port},mode=listener")), &[]).is_none());
        // A caller binds nothing.
        assert!(taken(&rule(format!("srt://127.0.0.1:{port}")), &[]).is_none());
    }
}
