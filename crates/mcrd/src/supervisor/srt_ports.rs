//! A rule's SRT and RIST listeners need their UDP ports free: worker 0 binds them
//! when the table reaches it, and a port another program has would only
//! show there, as a problem on the rule. So `mcrctl add` tries each new
//! listener's port first and refuses the rule, naming the port, when it is
//! taken. (A listener the rules have already is worker 0's own.)

use std::net::{SocketAddr, UdpSocket};

use mcr_core::control::{ControlError, ErrorKind};
use mcr_core::rist::RistMode;
use mcr_core::rule::{Input, Output, Rule};
use mcr_core::snapshot::SlottedRule;
use mcr_core::srt::SrtMode;

/// A listener's protocol and the addresses it binds (a RIST listener in
/// the simple profile binds two ports), if `input` is one.
fn binds_input(input: &Input) -> Option<(&'static str, Vec<SocketAddr>)> {
    match input {
        Input::Srt(e) if e.mode == SrtMode::Listener => Some(("SRT", vec![e.address])),
        Input::Rist(e) if e.mode == RistMode::Listener => Some(("RIST", rist_binds(e))),
        _ => None,
    }
}

/// As [`binds_input`], for an output.
fn binds_output(output: &Output) -> Option<(&'static str, Vec<SocketAddr>)> {
    match output {
        Output::Srt(e) if e.mode == SrtMode::Listener => Some(("SRT", vec![e.address])),
        Output::Rist(e) if e.mode == RistMode::Listener => Some(("RIST", rist_binds(e))),
        _ => None,
    }
}

fn rist_binds(e: &mcr_core::rist::RistEndpoint) -> Vec<SocketAddr> {
    e.ports()
        .into_iter()
        .map(|p| SocketAddr::new(e.address.ip(), p))
        .collect()
}

/// Every SRT and RIST listener of `rule`: the field that names it, its
/// protocol and the addresses it binds.
fn listeners(rule: &Rule) -> impl Iterator<Item = (String, &'static str, Vec<SocketAddr>)> {
    let inputs = rule.inputs().enumerate().filter_map(|(k, i)| {
        let field = if k == 0 {
            "input".to_string()
        } else {
            format!("redundancy.inputs[{}]", k - 1)
        };
        let (what, binds) = binds_input(i)?;
        Some((field, what, binds))
    });
    let outputs = rule.outputs.iter().enumerate().filter_map(|(j, o)| {
        let (what, binds) = binds_output(o)?;
        Some((format!("outputs[{j}]"), what, binds))
    });
    inputs.chain(outputs)
}

/// Whether a rule of `current` listens on `addr` already (on its port, at
/// that address or the wildcard).
fn ours(addr: SocketAddr, current: &[SlottedRule]) -> bool {
    current.iter().any(|r| {
        listeners(&r.rule).flat_map(|(_, _, b)| b).any(|a| {
            a.port() == addr.port() && (a.ip() == addr.ip() || a.ip().is_unspecified() || addr.ip().is_unspecified())
        })
    })
}

/// The refusal for `rule` if another program has a UDP port one of its
/// new SRT or RIST listeners would bind.
pub fn taken(rule: &Rule, current: &[SlottedRule]) -> Option<ControlError> {
    for (field, what, binds) in listeners(rule) {
        for addr in binds {
            if ours(addr, current) {
                continue;
            }
            if let Err(err) = UdpSocket::bind(addr) {
                let why = if err.kind() == std::io::ErrorKind::AddrInUse {
                    format!("UDP port {} is taken by another program", addr.port())
                } else {
                    format!("cannot bind {addr}: {err}")
                };
                let mut refusal = ControlError::new(
                    ErrorKind::InvalidRule,
                    format!(
                        "rule `{}`: {field}: {what} listener {addr}: {why}; choose another port or stop that program",
                        rule.name
                    ),
                );
                refusal.field = Some(field);
                return Some(refusal);
            }
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

    #[test]
    fn a_rist_listener_in_the_simple_profile_needs_its_second_port_free_too() {
        // An even port whose next one another program has.
        let (other, even) = loop {
            let s = UdpSocket::bind("127.0.0.1:0").expect("a port");
            let p = s.local_addr().expect("addr").port();
            if p % 2 == 1 && UdpSocket::bind(("127.0.0.1", p - 1)).is_ok() {
                break (s, p - 1);
            }
        };
        let rule = Rule::new(
            "r",
            "veth1:239.1.1.1:5001".parse().expect("input"),
            vec![
                format!("rist://127.0.0.1:{even},mode=listener,profile=simple")
                    .parse()
                    .expect("output"),
            ],
        );
        let e = taken(&rule, &[]).expect("refused");
        assert!(
            e.message.contains(&format!(
                "RIST listener 127.0.0.1:{}: UDP port {} is taken",
                even + 1,
                even + 1
            )),
            "{}",
            e.message
        );
        drop(other);
        assert!(taken(&rule, &[]).is_none());
    }
}
