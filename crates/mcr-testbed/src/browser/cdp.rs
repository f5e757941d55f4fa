//! The DevTools connection: the page's WebSocket, found through the
//! browser's `/json/list`, and commands sent over it one at a time.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use super::Error;

/// The largest DevTools message taken: a full-page screenshot of a long
/// page, base64-encoded, is the largest there is.
const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// The page target's DevTools session.
pub(super) struct Session {
    port: u16,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Exceptions the page threw and errors it logged, in order.
    pub(super) page_errors: Vec<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Connects to the first page target of the browser whose DevTools
    /// listen on 127.0.0.1:`port`. Call it from a thread inside the
    /// browser's network namespace: the socket stays there once made.
    pub(super) fn connect(port: u16, timeout: Duration) -> Result<Session, Error> {
        let fail = |what: String| Error::DevTools { port, what };
        let start = Instant::now();
        // The page target may appear a moment after the browser listens.
        let url = loop {
            let listed = http_get(port, "/json/list").map_err(|e| fail(format!("GET /json/list: {e}")))?;
            let targets: Vec<Value> = serde_json::from_str(&listed)
                .map_err(|e| fail(format!("/json/list is not a JSON list ({e}): {listed}")))?;
            let page = targets.iter().find(|t| t["type"] == "page");
            if let Some(url) = page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
                break url.to_string();
            }
            if start.elapsed() > timeout {
                return Err(fail(format!("no page target in /json/list: {listed}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| fail(format!("connect: {e}")))?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| fail(format!("socket timeouts: {e}")))?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_MESSAGE_BYTES));
        let (ws, _) = tungstenite::client::client_with_config(url.as_str(), stream, Some(config))
            .map_err(|e| fail(format!("WebSocket handshake with {url}: {e}")))?;
        Ok(Session {
            port,
            ws,
            next_id: 1,
            page_errors: Vec::new(),
        })
    }

    /// Sends `method` with `params` and returns its result, noting the
    /// events that arrive meanwhile. An error reply is an error.
    pub(super) fn call(&mut self, method: &str, params: Value, timeout: Duration) -> Result<Value, Error> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"id": id, "method": method, "params": params});
        let port = self.port;
        let fail = |what: String| Error::DevTools { port, what };
        self.ws
            .send(Message::text(request.to_string()))
            .map_err(|e| fail(format!("send {method}: {e}")))?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(fail(format!(
                    "no answer to {method} within {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            self.ws
                .get_mut()
                .set_read_timeout(Some(left))
                .map_err(|e| fail(format!("socket timeout: {e}")))?;
            let text = match self.ws.read() {
                Ok(Message::Text(t)) => t,
                Ok(Message::Close(_)) => {
                    return Err(fail(format!("the browser closed the connection during {method}")));
                }
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
                {
                    continue;
                }
                Err(e) => return Err(fail(format!("{method}: {e}"))),
            };
            let msg: Value = serde_json::from_str(text.as_str())
                .map_err(|e| fail(format!("{method}: a message that is not JSON ({e}): {}", text.as_str())))?;
            if msg["id"] == id {
                if let Some(err) = msg.get("error") {
                    return Err(Error::Protocol {
                        method: method.to_string(),
                        message: err["message"].as_str().unwrap_or("?").to_string()
                            + err["data"].as_str().map(|d| format!(" ({d})")).as_deref().unwrap_or(""),
                    });
                }
                return Ok(msg["result"].clone());
            }
            self.note_event(&msg);
        }
    }

    /// Keeps what the page reported as an error: uncaught exceptions,
    /// `console.error`, and the browser's own error log (a resource that
    /// failed to load, a Content-Security-Policy violation).
    fn note_event(&mut self, msg: &Value) {
        let params = &msg["params"];
        let error = match msg["method"].as_str() {
            Some("Runtime.exceptionThrown") => Some(exception_text(&params["exceptionDetails"])),
            Some("Runtime.consoleAPICalled") if params["type"] == "error" => Some(
                params["args"]
                    .as_array()
                    .map(|args| {
                        args.iter()
                            .map(|a| match &a["value"] {
                                Value::String(s) => s.clone(),
                                Value::Null => a["description"].as_str().unwrap_or("?").to_string(),
                                v => v.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default(),
            ),
            Some("Log.entryAdded") if params["entry"]["level"] == "error" => {
                let e = &params["entry"];
                let url = e["url"].as_str().map(|u| format!(" ({u})")).unwrap_or_default();
                Some(format!("{}{url}", e["text"].as_str().unwrap_or("?")))
            }
            _ => None,
        };
        self.page_errors.extend(error);
    }
}

/// What a thrown exception says: its description (message and stack), or
/// the text DevTools gives when there is none.
pub(super) fn exception_text(details: &Value) -> String {
    details["exception"]["description"]
        .as_str()
        .or_else(|| details["exception"]["value"].as_str())
        .or_else(|| details["text"].as_str())
        .unwrap_or("an exception")
        .to_string()
}

/// A plain HTTP/1.1 GET of the DevTools server at 127.0.0.1:`port`,
/// returning the body (read by its Content-Length).
fn http_get(port: u16, path: &str) -> io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n");
        if let Some(end) = head_end {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            if !head.starts_with("HTTP/1.1 200") {
                return Err(io::Error::other(format!(
                    "answered {}",
                    head.lines().next().unwrap_or("")
                )));
            }
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .ok_or_else(|| io::Error::other("an answer without Content-Length"))?;
            if buf.len() >= end + 4 + len {
                return Ok(String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned());
            }
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the answer ended early"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
