//! Network interface lookups by name and index.

use std::ffi::CString;
use std::io;

/// The index of the interface called `name` in this network namespace.
pub fn index(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
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
        .map(|&c| c as u8)
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
    fn unknown_interface_is_an_error() {
        assert!(index("no-such-if0").is_err());
        assert!(index("bad\0name").is_err());
    }
}
