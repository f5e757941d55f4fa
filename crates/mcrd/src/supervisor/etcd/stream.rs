//! The watch: `POST /v3/watch` on a connection of its own, whose answer
//! streams one JSON object a line for as long as the watch lasts.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::http::StatusCode;

use super::client::{CallError, connect, post, refusal};
use super::endpoint::Endpoint;
use super::tls::Tls;
use super::wire::{self, WatchLine, WatchRequest, WatchResponse};

/// An open watch.
#[derive(Debug)]
pub struct WatchStream {
    endpoint: String,
    body: Incoming,
    lines: Lines,
    /// Holds the connection (it closes when this drops).
    _sender: SendRequest<Full<Bytes>>,
}

impl WatchStream {
    /// Connects, sends `request` (with the user's `token`, if any) and
    /// reads the answer's head (not bounded in time here: the caller wraps
    /// it in its timeout).
    pub async fn open(
        endpoint: &Endpoint,
        tls: Option<&Tls>,
        token: Option<&str>,
        request: &WatchRequest<'_>,
    ) -> Result<WatchStream, CallError> {
        let what = "watch";
        let body = serde_json::to_vec(request).map_err(|source| CallError::Json {
            endpoint: endpoint.url.clone(),
            what,
            source,
        })?;
        let mut sender = connect(endpoint, tls, what).await?;
        let response = sender
            .send_request(post(endpoint, "/v3/watch", body, token, what)?)
            .await
            .map_err(CallError::http(&endpoint.url, what))?;
        let status = response.status();
        if status != StatusCode::OK {
            // A refusal is short and complete; the caller's timeout bounds it.
            let bytes = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(refusal(endpoint, what, status, &bytes));
        }
        Ok(WatchStream {
            endpoint: endpoint.url.clone(),
            body: response.into_body(),
            lines: Lines::default(),
            _sender: sender,
        })
    }

    /// The next response. Cancel-safe: dropping the future loses nothing,
    /// so it can be raced against a timer.
    pub async fn next(&mut self) -> Result<WatchResponse, CallError> {
        loop {
            while let Some(line) = self.lines.next() {
                if let Some(r) = read_line(&self.endpoint, &line)? {
                    return Ok(r);
                }
            }
            let closed = || CallError::Closed {
                endpoint: self.endpoint.clone(),
            };
            match self.body.frame().await {
                None => {
                    // The gateway ends a failed stream with an error that
                    // has no newline after it.
                    if let Some(line) = self.lines.finish()
                        && let Some(r) = read_line(&self.endpoint, &line)?
                    {
                        return Ok(r);
                    }
                    return Err(closed());
                }
                // etcd went away mid-stream.
                Some(Err(e)) if e.is_incomplete_message() => return Err(closed()),
                Some(Err(source)) => return Err(CallError::http(&self.endpoint, "watch")(source)),
                Some(Ok(frame)) => {
                    // Trailers (`Grpc-Trailer-Content-Type`) are not data.
                    if let Ok(data) = frame.into_data() {
                        self.lines.push(&data);
                    }
                }
            }
        }
    }
}

/// One line of the stream: a response, an error, or nothing to act on.
fn read_line(endpoint: &str, line: &[u8]) -> Result<Option<WatchResponse>, CallError> {
    let line: WatchLine = serde_json::from_slice(line).map_err(|source| CallError::Json {
        endpoint: endpoint.to_string(),
        what: "watch",
        source,
    })?;
    match line.error {
        Some(e) => Err(CallError::Stream {
            endpoint: endpoint.to_string(),
            message: wire::stream_error_message(&e),
        }),
        None => Ok(line.result),
    }
}

/// Splits a body that arrives in pieces into its lines.
#[derive(Debug, Default)]
struct Lines {
    /// Bytes past the last newline.
    pending: Vec<u8>,
}

impl Lines {
    fn push(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
    }

    /// The next whole line that is not blank, without its newline.
    fn next(&mut self) -> Option<Vec<u8>> {
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=end).collect();
            line.pop();
            if !is_blank(&line) {
                return Some(line);
            }
        }
        None
    }

    /// At the end of the body: what is left, unless blank.
    fn finish(&mut self) -> Option<Vec<u8>> {
        let rest = std::mem::take(&mut self.pending);
        (!is_blank(&rest)).then_some(rest)
    }
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_whatever_the_pieces() {
        let mut l = Lines::default();
        l.push(b"{\"a\"");
        assert_eq!(l.next(), None);
        l.push(b":1}\n\r\n{\"b\":2}\n{\"c\"");
        assert_eq!(l.next().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(l.next().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(l.next(), None);
        l.push(b":3}");
        assert_eq!(l.finish().as_deref(), Some(&b"{\"c\":3}"[..]));
        assert_eq!(l.finish(), None);
        l.push(b" \n");
        assert_eq!(l.next(), None);
        assert_eq!(l.finish(), None);
    }

    #[test]
    fn a_line_is_a_response_or_the_streams_error() {
        let e = "http://127.0.0.1:2379";
        let created = br#"{"result":{"header":{"revision":"8"},"created":true}}"#;
        assert!(read_line(e, created).expect("parse").expect("response").created);
        assert!(read_line(e, b"{}").expect("parse").is_none());
        // As etcd 3.4.23's gateway ends a watch on a member that lost its
        // leader (the request asked for `hasleader`).
        let no_leader = br#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}"#;
        let err = read_line(e, no_leader).expect_err("error");
        assert_eq!(
            err.to_string(),
            "http://127.0.0.1:2379: the watch failed: etcdserver: no leader"
        );
        let err = read_line(e, b"<html>").expect_err("not JSON");
        assert!(matches!(err, CallError::Json { .. }), "{err}");
    }
}
