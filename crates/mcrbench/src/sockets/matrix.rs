//! The matrix of points: every combination of the dimensions given, less
//! those that mean nothing for a backend (a batch for a one-at-a-time
//! API, a connection for frames), each said with the reason.

use serde::{Deserialize, Serialize};

use super::backends::Backend;
use super::payload::HEADER;

macro_rules! words {
    ($(#[$m:meta])* $name:ident { $($v:ident = $w:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum $name { $($v),* }

        impl $name {
            /// Its word on the command line and in reports.
            pub fn word(self) -> &'static str {
                match self { $(Self::$v => $w),* }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($w => Ok(Self::$v),)*
                    _ => Err(format!("`{s}`: write one of {}", [$($w),*].join(", "))),
                }
            }
        }
    };
}

words!(
    /// Whether senders are connected.
    Conn { Unconnected = "unconnected", Connected = "connected" }
);
words!(
    /// The address family.
    Family { V4 = "v4", V6 = "v6" }
);
words!(
    /// How receiver sockets are shared.
    Reuse { None = "none", Addr = "addr", Port = "port" }
);
words!(
    /// Where the datagrams go.
    PathKind { Lo = "lo", LoMcast = "lo-mcast", Veth = "veth", VethMcast = "veth-mcast" }
);

impl PathKind {
    /// Multicast rather than unicast.
    pub fn multicast(self) -> bool {
        matches!(self, PathKind::LoMcast | PathKind::VethMcast)
    }
    /// Across a veth pair between two namespaces.
    pub fn veth(self) -> bool {
        matches!(self, PathKind::Veth | PathKind::VethMcast)
    }
}

/// One point of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// The backend's name.
    pub backend: String,
    pub conn: Conn,
    pub family: Family,
    /// Payload bytes.
    pub size: usize,
    /// Sender threads (and receiver threads).
    pub threads: usize,
    /// Datagrams per send call.
    pub batch: usize,
    pub reuse: Reuse,
    pub path: PathKind,
}

impl Point {
    /// `backend/conn/family/sizeB/tN/bN/reuse/path`.
    pub fn label(&self) -> String {
        format!(
            "{}/{}/{}/{}B/t{}/b{}/{}/{}",
            self.backend,
            self.conn.word(),
            self.family.word(),
            self.size,
            self.threads,
            self.batch,
            self.reuse.word(),
            self.path.word()
        )
    }

    /// True if every word of `filter` is one of the label's parts
    /// (`b1` is not `b16`).
    pub fn matches(&self, filter: &[String]) -> bool {
        let l = self.label();
        filter.iter().all(|w| l.split('/').any(|part| part == w))
    }
}

/// The lists a matrix is made of.
#[derive(Debug, Clone)]
pub struct Spec {
    pub backends: Vec<String>,
    pub conn: Vec<Conn>,
    pub family: Vec<Family>,
    pub sizes: Vec<usize>,
    pub threads: Vec<usize>,
    pub batch: Vec<usize>,
    pub reuse: Vec<Reuse>,
    pub path: Vec<PathKind>,
}

impl Spec {
    /// The `--quick` matrix: every backend, both families, loopback unicast
    /// and veth multicast, a batch where it means something. (Several
    /// senders and receivers are checked by a test of their own.)
    pub fn quick() -> Spec {
        Spec {
            backends: super::backends::all().iter().map(|b| b.name().to_string()).collect(),
            conn: vec![Conn::Unconnected, Conn::Connected],
            family: vec![Family::V4, Family::V6],
            sizes: vec![300],
            threads: vec![1],
            batch: vec![1, 8],
            reuse: vec![Reuse::None],
            path: vec![PathKind::Lo, PathKind::VethMcast],
        }
    }
}

/// A combination left out, by label, and why.
pub type LeftOut = (String, String);

/// The points of `spec`, and the combinations left out with why.
pub fn expand(spec: &Spec, all: &[Box<dyn Backend>]) -> anyhow::Result<(Vec<Point>, Vec<LeftOut>)> {
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    for name in &spec.backends {
        let Some(b) = all.iter().find(|b| b.name() == name) else {
            let known: Vec<&str> = all.iter().map(|b| b.name()).collect();
            anyhow::bail!("unknown backend `{name}` (known: {})", known.join(", "));
        };
        for &size in &spec.sizes {
            anyhow::ensure!(
                (HEADER..=65_000).contains(&size),
                "payload size {size}: give {HEADER} to 65000 bytes (each datagram carries a {HEADER}-byte header)"
            );
        }
        for &conn in &spec.conn {
            for &family in &spec.family {
                for &size in &spec.sizes {
                    for &threads in &spec.threads {
                        for &batch in &spec.batch {
                            for &reuse in &spec.reuse {
                                for &path in &spec.path {
                                    let p = Point {
                                        backend: name.clone(),
                                        conn,
                                        family,
                                        size,
                                        threads: threads.clamp(1, 64),
                                        batch: batch.clamp(1, 1024),
                                        reuse,
                                        path,
                                    };
                                    match why_not(b.as_ref(), &p) {
                                        None => points.push(p),
                                        Some(w) => skipped.push((p.label(), w)),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok((points, skipped))
}

/// Why `p` means nothing for `b`, if it does not.
fn why_not(b: &dyn Backend, p: &Point) -> Option<String> {
    if p.batch > b.max_batch() {
        return Some(format!("{} sends at most {} per call", b.name(), b.max_batch()));
    }
    if p.conn == Conn::Connected && !b.connects() {
        return Some(format!("{} sends frames: there is no connection", b.name()));
    }
    if p.reuse != Reuse::None && p.threads == 1 {
        return Some("socket reuse needs more than one receiver thread".into());
    }
    if b.name() == "gso" && p.size * p.batch > 65_000 {
        return Some("a GSO train is at most 64 KB".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_leaves_out_what_means_nothing_and_says_why() {
        let all = super::super::backends::all();
        let spec = Spec {
            backends: vec!["std".into(), "mmsg".into(), "packet".into()],
            conn: vec![Conn::Unconnected, Conn::Connected],
            family: vec![Family::V4],
            sizes: vec![64],
            threads: vec![1],
            batch: vec![1, 32],
            reuse: vec![Reuse::None],
            path: vec![PathKind::Lo],
        };
        let (points, skipped) = expand(&spec, &all).expect("expands");
        let labels: Vec<String> = points.iter().map(Point::label).collect();
        assert_eq!(
            labels,
            [
                "std/unconnected/v4/64B/t1/b1/none/lo",
                "std/connected/v4/64B/t1/b1/none/lo",
                "mmsg/unconnected/v4/64B/t1/b1/none/lo",
                "mmsg/unconnected/v4/64B/t1/b32/none/lo",
                "mmsg/connected/v4/64B/t1/b1/none/lo",
                "mmsg/connected/v4/64B/t1/b32/none/lo",
                "packet/unconnected/v4/64B/t1/b1/none/lo",
                "packet/unconnected/v4/64B/t1/b32/none/lo",
            ]
        );
        assert_eq!(skipped.len(), 4, "{skipped:?}");
        assert!(
            skipped
                .iter()
                .any(|(l, w)| l.starts_with("std/") && w.contains("at most 1"))
        );
        assert!(
            skipped
                .iter()
                .any(|(l, w)| l.starts_with("packet/connected") && w.contains("no connection"))
        );
        assert!(points[3].matches(&["mmsg".into(), "b32".into()]));
        assert!(!points[3].matches(&["v6".into()]));
        let e = expand(
            &Spec {
                backends: vec!["carrier-pigeon".into()],
                ..spec.clone()
            },
            &all,
        )
        .expect_err("unknown");
        assert!(e.to_string().contains("known: std, socket2"), "{e}");
        let e = expand(&Spec { sizes: vec![8], ..spec }, &all).expect_err("too small");
        assert!(e.to_string().contains("24-byte header"), "{e}");
    }
}
