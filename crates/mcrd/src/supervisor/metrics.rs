//! `/metrics` over HTTP for Prometheus: a small HTTP/1.x server that
//! answers `GET /metrics` (and `HEAD`) with the text format, one request
//! per connection. The numbers come from the same `stats`, `list` and
//! `workers` requests `mcrctl` sends, so the two always agree.
//!
//! A client gets [`REQUEST_TIMEOUT`] to send its request head (at most
//! [`MAX_HEAD_BYTES`]) and [`WRITE_TIMEOUT`] to take the answer; at most
//! [`MAX_CLIENTS`] are served at once, others wait in the listen backlog.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mcr_core::control::{Reply, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::control::Call;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HEAD_BYTES: usize = 8192;
const MAX_CLIENTS: usize = 16;

/// Opens the metrics listener; an address in use is an error at start.
pub async fn listen(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("metrics: cannot listen on {addr}: {e} (see --metrics-listen)"))
}

/// Serves scrapes forever.
pub async fn serve(listener: TcpListener, calls: mpsc::Sender<Call>) {
    if let Ok(a) = listener.local_addr() {
        tracing::info!("metrics on http://{a}/metrics");
    }
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let calls = calls.clone();
                tokio::spawn(async move {
                    let _ = client(stream, calls).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("metrics: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics { head_only: bool },
    Index,
    NotFound,
    BadMethod,
    Bad,
}

/// Routes a request head (`GET /metrics HTTP/1.1\r\n...`).
fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Bad;
    }
    let path = target.split('?').next().unwrap_or_default();
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::BadMethod,
    };
    match path {
        "/metrics" => Route::Metrics { head_only },
        "/" => Route::Index,
        _ => Route::NotFound,
    }
}

async fn ask(calls: &mpsc::Sender<Call>, req: Request) -> Option<Reply> {
    let (tx, rx) = oneshot::channel();
    calls.send((req, tx)).await.ok()?;
    Some(rx.await.ok()?.reply)
}

/// The text format, from the supervisor's answers.
async fn scrape(calls: &mpsc::Sender<Call>) -> Option<String> {
    let Reply::Stats(stats) = ask(calls, Request::Stats {}).await? else {
        return None;
    };
    let Reply::Rules { rules } = ask(calls, Request::List {}).await? else {
        return None;
    };
    let Reply::Workers { workers } = ask(calls, Request::Workers {}).await? else {
        return None;
    };
    Some(mcr_core::metrics::render(
        env!("CARGO_PKG_VERSION"),
        &stats,
        &rules,
        &workers,
    ))
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD_BYTES {
            break;
        }
    }
    Ok(head)
}

async fn client(mut stream: TcpStream, calls: mpsc::Sender<Call>) -> std::io::Result<()> {
    let head = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await {
        Ok(h) => h?,
        Err(_) => return Ok(()),
    };
    let (status, content_type, body, head_only) = if head.len() > MAX_HEAD_BYTES {
        (
            "431 Request Header Fields Too Large",
            "text/plain",
            "request head too large\n".to_string(),
            false,
        )
    } else {
        match route(&head) {
            Route::Metrics { head_only } => match scrape(&calls).await {
                Some(text) => ("200 OK", mcr_core::metrics::CONTENT_TYPE, text, head_only),
                None => (
                    "503 Service Unavailable",
                    "text/plain",
                    "mcrd is shutting down\n".to_string(),
                    head_only,
                ),
            },
            Route::Index => (
                "200 OK",
                "text/plain",
                "mcrd: metrics are at /metrics\n".to_string(),
                false,
            ),
            Route::NotFound => (
                "404 Not Found",
                "text/plain",
                "not found: try /metrics\n".to_string(),
                false,
            ),
            Route::BadMethod => (
                "405 Method Not Allowed",
                "text/plain",
                "only GET and HEAD\n".to_string(),
                false,
            ),
            Route::Bad => (
                "400 Bad Request",
                "text/plain",
                "not an HTTP/1 request\n".to_string(),
                false,
            ),
        }
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    )
    .into_bytes();
    if !head_only {
        response.extend_from_slice(body.as_bytes());
    }
    match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&response)).await {
        Ok(r) => r?,
        Err(_) => return Ok(()),
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head_only: false }
        );
        assert_eq!(
            route(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Route::Metrics { head_only: true }
        );
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::Index);
        assert_eq!(route(b"GET /other HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(b"garbage\r\n\r\n"), Route::Bad);
        assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n"), Route::Bad);
        assert_eq!(route(b""), Route::Bad);
    }
}
