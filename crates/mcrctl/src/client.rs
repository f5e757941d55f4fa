//! One conversation with the daemon: the version handshake, then the
//! request.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use mcr_core::control::{PROTOCOL, Reply, Request, Response};

/// Asks the daemon at `socket` and returns its response.
pub fn ask(socket: &Path, request: &Request) -> anyhow::Result<Response> {
    let (mut conv, hello) = connect(socket)?;
    if matches!(request, Request::Version { .. }) {
        return Ok(hello);
    }
    conv.exchange(request)
}

/// Asks for a `watch` every `interval_ms` and hands each response to
/// `show` until it returns false or the daemon closes the connection.
pub fn watch(socket: &Path, interval_ms: u64, mut show: impl FnMut(&Response) -> bool) -> anyhow::Result<()> {
    let (mut conv, _) = connect(socket)?;
    // A reply is due every interval; allow for a busy daemon.
    conv.writer
        .set_read_timeout(Some(Duration::from_millis(interval_ms) + Duration::from_secs(30)))?;
    let mut response = conv.exchange(&Request::Watch {
        interval_ms: Some(interval_ms),
    })?;
    loop {
        if !show(&response) || !response.ok {
            return Ok(());
        }
        response = conv.receive()?;
    }
}

/// Connects and checks that the daemon speaks this protocol.
fn connect(socket: &Path) -> anyhow::Result<(Conversation, Response)> {
    let stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach mcrd at {}: is it running? (--socket gives another path)",
            socket.display()
        )
    })?;
    // Adding a rule waits until every worker runs it.
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut conv = Conversation {
        reader: BufReader::new(stream.try_clone()?),
        writer: stream,
    };
    let hello = conv.exchange(&Request::Version {
        protocol: Some(PROTOCOL),
    })?;
    if let Reply::Error { error } = &hello.reply {
        bail!("{}", error.message);
    }
    Ok((conv, hello))
}

struct Conversation {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Conversation {
    fn exchange(&mut self, request: &Request) -> anyhow::Result<Response> {
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        if let Err(e) = self.writer.write_all(&line) {
            // The daemon may have answered and hung up before reading (it
            // refuses a caller it may not serve): what it said is the
            // better error.
            return self
                .receive()
                .map_err(|_| anyhow::Error::new(e).context("send the request"));
        }
        self.receive()
    }

    fn receive(&mut self) -> anyhow::Result<Response> {
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).context("read the response")?;
        if n == 0 {
            bail!("mcrd closed the connection without answering");
        }
        serde_json::from_str(&answer).with_context(|| format!("unreadable response from mcrd: {}", answer.trim()))
    }
}
