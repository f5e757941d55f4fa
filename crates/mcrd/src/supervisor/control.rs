//! The control socket: a Unix stream socket, one JSON request per line,
//! one JSON response per request, several requests per connection.
//!
//! Each client is served by a task of its own, so a slow or silent client
//! holds up no one else; requests go to the supervisor's loop one at a
//! time. A line longer than [`MAX_REQUEST_BYTES`] is answered with an error
//! and the connection closed (there is no telling where the next request
//! would start); bad JSON, an unknown command or an unknown field is
//! answered with an error that says so, and the connection stays open.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcr_core::control::{ControlError, ErrorKind, MAX_REQUEST_BYTES, Reply, Request, Response, WATCH_INTERVAL_MS};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// A request on its way to the supervisor, with where the answer goes.
pub type Call = (Request, oneshot::Sender<Response>);

/// The most clients served at once; one more is told so and disconnected.
/// With [`MAX_REQUEST_BYTES`] per client this bounds what clients can make
/// the daemon hold.
pub const MAX_CLIENTS: usize = 256;

/// Who may use the control socket, checked with the peer's credentials
/// (the socket's mode, 0660, already keeps others out; this holds even if
/// the mode is changed): root, the daemon's own user, and members of its
/// group.
#[derive(Debug, Clone)]
pub struct Access {
    /// The daemon's user id.
    pub uid: u32,
    /// The group whose members may connect, and its name.
    pub gid: u32,
    /// Its name, for messages.
    pub group_name: String,
}

impl Access {
    fn admits(&self, stream: &UnixStream) -> bool {
        let Ok(c) = stream.peer_cred() else {
            return false;
        };
        if c.uid() == 0 || c.uid() == self.uid || c.gid() == self.gid {
            return true;
        }
        // Supplementary groups, as the kernel recorded them at connect
        // time (no /proc read, which a hardened unit may not allow).
        use std::os::fd::AsFd;
        mcr_sys::privilege::peer_groups(stream.as_fd()).is_ok_and(|g| g.contains(&self.gid))
    }

    fn rule(&self) -> String {
        format!(
            "only root, uid {} and members of group `{}` may",
            self.uid, self.group_name
        )
    }
}

/// Why the control socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Another daemon answers on the path.
    #[error("another mcrd is listening on {0}; stop it, or give --control-socket another path")]
    InUse(PathBuf),
    /// The OS refused.
    #[error("control socket {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Binds the control socket at `path` (mode 0660), replacing a stale socket
/// file left by a daemon that died, but never one that still answers.
pub fn listen(path: &Path) -> Result<UnixListener, ListenError> {
    let io = |source| ListenError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ListenError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let l = UnixListener::bind(path).map_err(io)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
    Ok(l)
}

/// Serves on the control socket the mcrd before listened on (handed
/// over by `mcrctl restart`): clients that connected meanwhile wait in its
/// backlog.
pub fn adopt(fd: std::os::fd::OwnedFd) -> Result<UnixListener, ListenError> {
    let io = |source| ListenError::Io {
        path: PathBuf::from("(the control socket handed over)"),
        source,
    };
    let l = std::os::unix::net::UnixListener::from(fd);
    l.set_nonblocking(true).map_err(io)?;
    UnixListener::from_std(l).map_err(io)
}

/// Accepts clients forever, each in its own task. A client that sends no
/// complete request, or does not read a response, for `timeout` is
/// disconnected.
pub async fn serve(listener: UnixListener, calls: mpsc::Sender<Call>, timeout: Duration, access: Access) {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) if !access.admits(&stream) => {
                let rule = access.rule();
                let who = stream.peer_cred().map_or("an unknown peer".to_string(), |c| {
                    format!("uid {} gid {}", c.uid(), c.gid())
                });
                tracing::warn!("control socket: refused {who}: {rule}");
                tokio::spawn(async move {
                    let (_, mut wr) = stream.into_split();
                    let r = error(ErrorKind::Permission, format!("{who} may not use mcrd: {rule}"));
                    let _ = write(&mut wr, &r, timeout).await;
                });
            }
            Ok((stream, _)) => match slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let calls = calls.clone();
                    tokio::spawn(async move {
                        client(stream, calls, timeout).await;
                        drop(permit);
                    });
                }
                Err(_) => {
                    tokio::spawn(async move {
                        let (_, mut wr) = stream.into_split();
                        let r = error(
                            ErrorKind::Busy,
                            format!("{MAX_CLIENTS} clients are connected already; try again later"),
                        );
                        let _ = write(&mut wr, &r, timeout).await;
                    });
                }
            },
            Err(e) => {
                tracing::warn!("control socket: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
    Reply::Error {
        error: ControlError::new(kind, message),
    }
    .into()
}

/// What one line turned out to be.
enum Line {
    Request(Request),
    Bad(Response),
    Empty,
}

fn decode(line: &[u8]) -> Line {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Line::Empty;
    }
    match serde_json::from_slice::<Request>(trimmed) {
        Ok(r) => Line::Request(r),
        Err(e) => Line::Bad(error(
            ErrorKind::BadRequest,
            format!(
                "not a request: {e}; send one JSON object per line, e.g. {{\"cmd\":\"list\"}} (commands: version, add, remove, switch, list, stats, workers, events, history, reload, save, config, watch)"
            ),
        )),
    }
}

async fn client(stream: UnixStream, calls: mpsc::Sender<Call>, timeout: Duration) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = tokio::time::timeout(timeout, read_line(&mut rd, &mut buf, MAX_REQUEST_BYTES)).await;
        let response = match read {
            Err(_) | Ok(Err(_)) | Ok(Ok(LineEnd::Eof)) => return,
            Ok(Ok(LineEnd::TooLong)) => {
                let r = error(
                    ErrorKind::TooLarge,
                    format!("request longer than {MAX_REQUEST_BYTES} bytes; the connection is closed"),
                );
                let _ = write(&mut wr, &r, timeout).await;
                return;
            }
            Ok(Ok(LineEnd::Newline)) => match decode(&buf) {
                Line::Empty => continue,
                Line::Bad(r) => r,
                Line::Request(Request::Watch { interval_ms }) => {
                    watch(&mut rd, &mut wr, &calls, interval_ms, timeout).await;
                    return;
                }
                Line::Request(req) => {
                    let (tx, rx) = oneshot::channel();
                    if calls.send((req, tx)).await.is_err() {
                        return;
                    }
                    match rx.await {
                        Ok(r) => r,
                        Err(_) => error(ErrorKind::Internal, "the daemon is shutting down"),
                    }
                }
            },
        };
        if write(&mut wr, &response, timeout).await.is_err() {
            return;
        }
    }
}

/// Streams a `stats` reply every interval until the client sends anything,
/// closes, or stops reading; then the connection ends.
async fn watch(
    rd: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    calls: &mpsc::Sender<Call>,
    interval_ms: Option<u64>,
    timeout: Duration,
) {
    let ms = interval_ms.unwrap_or(1000);
    if !WATCH_INTERVAL_MS.contains(&ms) {
        let r = error(
            ErrorKind::BadRequest,
            format!(
                "watch interval_ms {ms} is outside {}-{}",
                WATCH_INTERVAL_MS.start(),
                WATCH_INTERVAL_MS.end()
            ),
        );
        let _ = write(wr, &r, timeout).await;
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(ms));
    // After a stall, carry on at the interval rather than catch up in a burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // The first reply goes out even to a client that closed its
            // sending side right after the request.
            biased;
            _ = tick.tick() => {
                let (tx, rx) = oneshot::channel();
                if calls.send((Request::Stats {}, tx)).await.is_err() {
                    return;
                }
                let Ok(r) = rx.await else { return };
                if write(wr, &r, timeout).await.is_err() {
                    return;
                }
            }
            // Anything from the client (or its leaving) ends the watch.
            _ = rd.fill_buf() => return,
        }
    }
}

async fn write(wr: &mut tokio::net::unix::OwnedWriteHalf, r: &Response, timeout: Duration) -> Result<(), ()> {
    let mut line = serde_json::to_vec(r).map_err(|_| ())?;
    line.push(b'\n');
    match tokio::time::timeout(timeout, wr.write_all(&line)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// How [`read_line`] ended.
pub(super) enum LineEnd {
    Newline,
    Eof,
    TooLong,
}

/// Reads up to and including a newline into `buf`, never holding more than
/// `max` bytes of it: the bound on what a peer (a client, a worker) can
/// make the supervisor hold.
pub(super) async fn read_line<R: AsyncBufRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineEnd> {
    loop {
        let available = rd.fill_buf().await?;
        if available.is_empty() {
            // A last line without a newline is still a request.
            return Ok(if buf.is_empty() { LineEnd::Eof } else { LineEnd::Newline });
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if buf.len() + take > max + 1 {
            return Ok(LineEnd::TooLong);
        }
        buf.extend_from_slice(&available[..take]);
        rd.consume(take);
        if done {
            return Ok(LineEnd::Newline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_is_read_whole_up_to_its_bound_and_never_held_beyond() {
        let mut rd: &[u8] = b"fits\nabcdefgh\nlast";
        let mut buf = Vec::new();
        assert!(matches!(read_line(&mut rd, &mut buf, 5).await, Ok(LineEnd::Newline)));
        assert_eq!(buf, b"fits\n");
        buf.clear();
        assert!(matches!(read_line(&mut rd, &mut buf, 5).await, Ok(LineEnd::TooLong)));
        assert!(buf.len() <= 6, "held {} bytes", buf.len());
        // A last line without a newline still counts; then the end.
        let mut rd: &[u8] = b"last";
        buf.clear();
        assert!(matches!(read_line(&mut rd, &mut buf, 5).await, Ok(LineEnd::Newline)));
        assert_eq!(buf, b"last");
        buf.clear();
        assert!(matches!(read_line(&mut rd, &mut buf, 5).await, Ok(LineEnd::Eof)));
    }
}
