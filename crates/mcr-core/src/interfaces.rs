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
}

fn yes() -> bool {
    true
}

impl InterfaceInfo {
    /// The first address of the family of `like`.
    pub fn address_like(&self, like: IpAddr) -> Option<IpAddr> {
        self.addresses.iter().copied().find(|a| a.is_ipv4() == like.is_ipv4())
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
