//! Reading mcrd's Prometheus endpoint from inside a test bed's namespace.

use std::io::{Read, Write};
use std::time::Duration;

/// The whole HTTP answer (head and body) to `GET /metrics` on `addr`
/// (e.g. `127.0.0.1:9808`), asked from inside namespace `ns`.
pub fn scrape(ns: &str, addr: &str) -> String {
    let (ns, addr) = (ns.to_string(), addr.to_string());
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter the namespace");
        let mut s = std::net::TcpStream::connect(&addr).expect("connect to /metrics");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).expect("request");
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("response");
        answer
    })
    .join()
    .expect("scrape thread")
}

/// The value of the sample `series` (a name with its labels, as written)
/// in a scrape; panics if there is none.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no `{series}` in\n{text}"))
        .parse()
        .expect("a number")
}
