//! Network interface lookups by name and index.

use std::ffi::CString;
use std::io;

/// The index of the interface called `name` in this network namespace.
pub fn index(name: &str) -> io::Result<u32> {
    let c =
        CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// The names of every interface in this network namespace, sorted.
pub fn names() -> Vec<String> {
    // SAFETY: if_nameindex returns a list terminated by a zero entry, or
    // null; it is freed below with if_freenameindex.
    let head = unsafe { libc::if_nameindex() };
    if head.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = head;
    loop {
        // SAFETY: `cur` walks the list up to and including its terminator.
        let entry = unsafe { &*cur };
        if entry.if_index == 0 || entry.if_name.is_null() {
            break;
        }
        // SAFETY: if_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.if_name) };
        out.push(name.to_string_lossy().into_owned());
        cur = cur.wrapping_add(1);
    }
    // SAFETY: `head` came from if_nameindex and is freed exactly once.
    unsafe { libc::if_freenameindex(head) };
    out.sort();
    out
}

/// An error for an interface name that does not exist, listing those that
/// do: "interface `eth9` does not exist (known: eth0, lo)".
pub fn unknown(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("interface `{name}` does not exist (known: {})", names().join(", ")),
    )
}

/// The index of interface `name`, or an error listing the known ones.
pub fn index_or_unknown(name: &str) -> io::Result<u32> {
    index(name).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) => unknown(name),
        _ => e,
    })
}

/// The name of the interface with index `index`.
pub fn name(index: u32) -> io::Result<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has IF_NAMESIZE bytes, the size if_indextoname writes at
    // most, including the terminating NUL.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return Err(io::Error::last_os_error());
    }
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_round_trips() {
        let i = index("lo").expect("lo exists");
        assert_eq!(name(i).expect("name"), "lo");
    }

    #[test]
    fn unknown_interface_is_an_error_that_lists_the_known() {
        assert!(index("no-such-if0").is_err());
        assert!(index("bad\0name").is_err());
        assert!(names().contains(&"lo".to_string()));
        let e = index_or_unknown("no-such-if0").expect_err("unknown").to_string();
        assert!(e.contains("`no-such-if0` does not exist") && e.contains("lo"), "{e}");
    }
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IF_NAMESIZE || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{name}` is not an interface name"),
        ));
    }
    // SAFETY: ifreq is plain data; all zeroes is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = libc::c_char::from_ne_bytes([*s]);
    }
    Ok(req)
}

/// Runs an interface ioctl that fills `req`, on a throwaway UDP socket.
fn ioctl(request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: `req` is a valid, writable ifreq; the SIOCGIF* requests used
    // here read its name and write one union member.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request, req as *mut libc::ifreq) };
    crate::check(rc).map(|_| ())
}

/// The hardware (MAC) address of interface `name`.
pub fn mac(name: &str) -> io::Result<[u8; 6]> {
    let mut req = ifreq(name)?;
    ioctl(libc::SIOCGIFHWADDR, &mut req)?;
    // SAFETY: SIOCGIFHWADDR filled the ifru_hwaddr member of the union.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = s.to_ne_bytes()[0];
    }
    Ok(m)
}

/// True if interface `name` is an Ethernet interface (`ARPHRD_ETHER`):
/// one MCR can read and write Ethernet frames on.
pub fn is_ethernet(name: &str) -> io::Result<bool> {
    let mut req = ifreq(name)?;
    ioctl(libc::SIOCGIFHWADDR, &mut req)?;
    // SAFETY: SIOCGIFHWADDR filled the ifru_hwaddr member of the union.
    let family = unsafe { req.ifr_ifru.ifru_hwaddr.sa_family };
    Ok(family == libc::ARPHRD_ETHER)
}

/// The link flags of an interface that say whether frames can pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkFlags {
    /// Set up (`IFF_UP`).
    pub up: bool,
    /// Operationally up: set up and with a carrier (`IFF_RUNNING`).
    pub running: bool,
}

/// The link flags of interface `name`.
pub fn flags(name: &str) -> io::Result<LinkFlags> {
    let mut req = ifreq(name)?;
    ioctl(libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled the ifru_flags member of the union.
    let flags = libc::c_int::from(unsafe { req.ifr_ifru.ifru_flags });
    Ok(LinkFlags {
        up: flags & libc::IFF_UP != 0,
        running: flags & libc::IFF_RUNNING != 0,
    })
}

/// True if interface `name` is up (`IFF_UP`).
pub fn is_up(name: &str) -> io::Result<bool> {
    flags(name).map(|f| f.up)
}

/// The MTU of interface `name`.
pub fn mtu(name: &str) -> io::Result<u32> {
    let mut req = ifreq(name)?;
    ioctl(libc::SIOCGIFMTU, &mut req)?;
    // SAFETY: SIOCGIFMTU filled the ifru_mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(u32::try_from(mtu).unwrap_or(0))
}

/// The IP addresses (both families) of interface `name`, IPv4 first.
pub fn addresses(name: &str) -> io::Result<Vec<std::net::IpAddr>> {
    Ok(all_addresses()?.remove(name).unwrap_or_default())
}

/// The IP addresses of every interface, by name, IPv4 first, from one
/// `getifaddrs` call.
pub fn all_addresses() -> io::Result<std::collections::HashMap<String, Vec<std::net::IpAddr>>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head that we free below.
    crate::check(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out: std::collections::HashMap<String, Vec<std::net::IpAddr>> = std::collections::HashMap::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let ifname = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of the family it names;
            // sockaddr_storage is large enough to copy any of them into, and
            // we copy only the size of the family's own type.
            let family = libc::c_int::from(unsafe { (*ifa.ifa_addr).sa_family });
            let len = match family {
                libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
                libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
                _ => 0,
            };
            if len > 0 {
                let mut storage = crate::sockaddr::zeroed_storage();
                // SAFETY: `len` bytes are readable at ifa_addr (a sockaddr of
                // that family) and writable in `storage`, which is larger.
                unsafe {
                    std::ptr::copy_nonoverlapping(ifa.ifa_addr.cast::<u8>(), (&raw mut storage).cast::<u8>(), len)
                };
                if let Some(a) = crate::sockaddr::from_storage(&storage, crate::conv::socklen(len)) {
                    out.entry(ifname.to_string_lossy().into_owned())
                        .or_default()
                        .push(a.ip());
                }
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    for v in out.values_mut() {
        v.sort_by_key(|a| a.is_ipv6());
    }
    Ok(out)
}

#[cfg(test)]
mod more_tests {
    use super::*;

    #[test]
    fn loopback_has_a_zero_mac_an_mtu_and_127_0_0_1() {
        assert_eq!(mac("lo").expect("mac"), [0; 6]);
        assert!(mtu("lo").expect("mtu") >= 1500);
        let addrs = addresses("lo").expect("addrs");
        assert!(addrs.contains(&"127.0.0.1".parse().expect("literal")), "{addrs:?}");
        assert!(mac("no-such-if0").is_err());
        assert!(!is_ethernet("lo").expect("lo"), "loopback is not Ethernet");
        assert!(is_up("lo").is_ok());
        assert!(mac("").is_err());
        assert!(addresses("no-such-if0").expect("empty list").is_empty());
    }
}

/// The bridge `name` is a port of, if any (a master that is not a bridge,
/// a bond or a VRF say, does not pass frames between its ports).
pub fn master(name: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/class/net/{name}/master")).ok()?;
    let master = link.file_name()?.to_string_lossy().into_owned();
    std::path::Path::new(&format!("/sys/class/net/{master}/bridge"))
        .exists()
        .then_some(master)
}
