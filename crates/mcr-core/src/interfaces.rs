//! What MCR knows about the host's interfaces, as the supervisor found them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceInfo {
    /// Its name.
    pub name: String,
    /// Its index (`ifindex`).
    pub index: u32,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its MTU in bytes.
    pub mtu: u32,
    /// Its addresses, IPv4 first.
    pub addresses: Vec<IpAddr>,
    /// An Ethernet interface (the only kind MCR reads and writes frames
    /// on).
    #[serde(default = "yes")]
    pub ethernet: bool,
    /// The bridge it is a port of, if any: frames sent on one port of a
    /// bridge reach its other ports and the bridge itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// Whether the link is up: set up, and with a carrier.
    #[serde(default, skip_serializing_if = "Link::is_up")]
    pub link: Link,
}

/// The state of an interface's link, as an operator sees it: set up or
/// down (`ip link set … up`, `IFF_UP`), and when up, whether it has a
/// carrier and is operationally up (`IFF_RUNNING`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// Set up, with a carrier: frames come and go.
    #[default]
    Up,
    /// Set up, but without a carrier (the cable, the peer or the lower
    /// device is down): nothing comes or goes.
    NoCarrier,
    /// Set down (administratively): nothing comes or goes.
    AdminDown,
}

impl Link {
    /// The state from the flags: set up (`IFF_UP`), operationally up
    /// (`IFF_RUNNING`).
    pub fn from_flags(up: bool, running: bool) -> Link {
        match (up, running) {
            (false, _) => Link::AdminDown,
            (true, false) => Link::NoCarrier,
            (true, true) => Link::Up,
        }
    }

    /// Frames come and go.
    pub fn is_up(&self) -> bool {
        *self == Link::Up
    }

    /// Why it is down, for messages: none when it is up.
    pub fn why_down(&self) -> Option<&'static str> {
        match self {
            Link::Up => None,
            Link::NoCarrier => Some("no carrier"),
            Link::AdminDown => Some("set down"),
        }
    }
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.why_down() {
            None => f.write_str("up"),
            Some(why) => write!(f, "down ({why})"),
        }
    }
}

/// fe80::/10 unicast, or a multicast group of link-local scope.
fn is_link_local_v6(a: std::net::Ipv6Addr) -> bool {
    let s = a.segments()[0];
    s & 0xffc0 == 0xfe80 || (s & 0xff00 == 0xff00 && s & 0x000f <= 2)
}

fn yes() -> bool {
    true
}

impl InterfaceInfo {
    /// An Ethernet interface `name` with index `index`, the locally
    /// administered MAC 02:00:00:00:00:`index`, an MTU of 1500 and
    /// `addresses`: the interface of examples and tests.
    pub fn ethernet(name: &str, index: u32, addresses: impl IntoIterator<Item = IpAddr>) -> InterfaceInfo {
        InterfaceInfo {
            name: name.into(),
            index,
            mac: [2, 0, 0, 0, 0, index as u8],
            mtu: 1500,
            addresses: addresses.into_iter().collect(),
            ethernet: true,
            master: None,
            link: Link::Up,
        }
    }

    /// True if `self` and `other` differ in more than their link state:
    /// what the table is built from (index, MAC, MTU, addresses, bridge)
    /// changed, not only whether frames can pass.
    pub fn differs_beyond_link(&self, other: &InterfaceInfo) -> bool {
        let same_link = InterfaceInfo {
            link: other.link,
            ..self.clone()
        };
        same_link != *other
    }

    /// The address to send to `like` from: the first of its family, and
    /// for IPv6 the first of wider than link-local scope when there is one
    /// (a link-local fe80:: source is used only when a link-local
    /// destination needs it, or the interface has nothing else).
    pub fn address_like(&self, like: IpAddr) -> Option<IpAddr> {
        let same = || self.addresses.iter().copied().filter(|a| a.is_ipv4() == like.is_ipv4());
        match like {
            IpAddr::V6(l) if !is_link_local_v6(l) => same()
                .find(|a| matches!(a, IpAddr::V6(v) if !is_link_local_v6(*v)))
                .or_else(|| same().next()),
            _ => same().next(),
        }
    }
}

/// The interfaces of the host, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interfaces {
    by_name: BTreeMap<String, InterfaceInfo>,
}

impl Interfaces {
    /// A set of interfaces.
    pub fn new(list: impl IntoIterator<Item = InterfaceInfo>) -> Self {
        Interfaces {
            by_name: list.into_iter().map(|i| (i.name.clone(), i)).collect(),
        }
    }

    /// The layer-2 segment `name` is on: the bridge it is a port of, or
    /// itself (a bridge is on its own segment, with its ports).
    pub fn segment<'a>(&'a self, name: &'a str) -> &'a str {
        self.get(name).and_then(|i| i.master.as_deref()).unwrap_or(name)
    }

    /// The interface called `name`.
    pub fn get(&self, name: &str) -> Option<&InterfaceInfo> {
        self.by_name.get(name)
    }

    /// The interface with index `index`.
    pub fn by_index(&self, index: u32) -> Option<&InterfaceInfo> {
        self.by_name.values().find(|i| i.index == index)
    }

    /// Every interface, by name.
    pub fn iter(&self) -> impl Iterator<Item = &InterfaceInfo> {
        self.by_name.values()
    }

    /// The names, comma separated, for error messages.
    pub fn names(&self) -> String {
        self.by_name.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_output_sends_from_an_address_wider_than_the_link() {
        let i = InterfaceInfo {
            name: "veth2".into(),
            index: 3,
            mac: [2, 0, 0, 0, 0, 3],
            mtu: 1500,
            addresses: ["fe80::1", "10.0.1.1", "fd00:1::1"]
                .iter()
                .map(|a| a.parse().expect("literal"))
                .collect(),
            ethernet: true,
            master: None,
            link: Link::Up,
        };
        let a = |s: &str| s.parse::<IpAddr>().expect("literal");
        assert_eq!(i.address_like(a("ff3e::1")), Some(a("fd00:1::1")));
        assert_eq!(i.address_like(a("2001:db8::9")), Some(a("fd00:1::1")));
        assert_eq!(i.address_like(a("ff02::1:3")), Some(a("fe80::1")));
        assert_eq!(i.address_like(a("239.1.1.1")), Some(a("10.0.1.1")));
        let only_link = InterfaceInfo {
            addresses: vec![a("fe80::1")],
            ..i
        };
        assert_eq!(only_link.address_like(a("ff3e::1")), Some(a("fe80::1")));
    }
}
