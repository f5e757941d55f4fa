//! A headless Chromium inside a test bed's namespace, driven over the
//! Chrome DevTools Protocol: load a page, run JavaScript in it, wait for
//! what it shows, take screenshots.
//!
//! ```no_run
//! # fn demo(ns: &mcr_testbed::Ns) -> Result<(), mcr_testbed::browser::Error> {
//! use std::time::Duration;
//! use mcr_testbed::browser::Browser;
//!
//! let mut b = Browser::open(ns, "http://127.0.0.1:9808/")?;
//! b.wait_for("document.querySelectorAll('[data-rule]').length > 0", Duration::from_secs(30))?;
//! let title = b.eval("document.title")?;
//! b.screenshot(std::path::Path::new("target/screenshots/page.png"))?;
//! # Ok(()) }
//! ```
//!
//! Chromium is Debian's `chromium` (scripts/deps installs it), run as root
//! with a fresh profile directory and the network features that would
//! reach out of the test bed turned off. Its DevTools listen on a free port
//! of the namespace's loopback; the connection to them is made from a
//! thread that entered the namespace.

mod cdp;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Ns, Proc, TempDir};

/// How long chromium may take to start and to answer one command: the
/// tests share two cores with builds and other tests.
const PATIENCE: Duration = Duration::from_secs(60);
/// The window (and so the viewport) chromium starts with, in CSS pixels.
const WINDOW: (u32, u32) = (1280, 900);
/// The tallest screenshot taken, in CSS pixels (a full page is cut there).
const MAX_SCREENSHOT_HEIGHT: f64 = 16_384.0;

static NEXT_PROFILE: AtomicU32 = AtomicU32::new(0);

/// What can go wrong while driving the browser.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// There is no `chromium` to run.
    #[error("no `chromium` in PATH ({path}): install chromium (scripts/deps)")]
    NotInstalled {
        /// The PATH searched.
        path: String,
    },
    /// Chromium could not be started, or did not open its DevTools.
    #[error("chromium did not start: {0}")]
    Start(#[source] crate::Error),
    /// Chromium ended while it was being used.
    #[error("chromium exited ({status}); its stderr:\n{stderr}")]
    Exited {
        /// How it ended.
        status: String,
        /// What it printed.
        stderr: String,
    },
    /// The DevTools connection failed.
    #[error("chromium's DevTools on 127.0.0.1:{port}: {what}")]
    DevTools {
        /// Their port in the namespace.
        port: u16,
        /// What failed.
        what: String,
    },
    /// A DevTools command was refused.
    #[error("DevTools {method} failed: {message}")]
    Protocol {
        /// The command.
        method: String,
        /// The browser's reason.
        message: String,
    },
    /// The page could not be loaded.
    #[error("could not load {url}: {why}")]
    Navigate {
        /// The address.
        url: String,
        /// The browser's reason (`net::ERR_CONNECTION_REFUSED`, say).
        why: String,
    },
    /// JavaScript run with [`Browser::eval`] threw.
    #[error("the page threw: {message}")]
    Script {
        /// The exception's message and stack.
        message: String,
    },
    /// What [`Browser::wait_for`] waited for did not come.
    #[error("`{js}` was not true within {seconds:.1} s; it was last {last}")]
    Timeout {
        /// The expression.
        js: String,
        /// How long it was polled.
        seconds: f64,
        /// Its last value, or the exception it last threw.
        last: String,
    },
    /// A file could not be written, or a thread not started.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The browser's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A headless Chromium with one page, in a network namespace. Dropping it
/// kills chromium and every process it started, and removes its profile.
#[derive(Debug)]
pub struct Browser {
    // Dropped in this order: the connection closes, then chromium (its
    // whole process group is killed first, in `drop`) is reaped, then its
    // profile directory is removed, once nothing writes there any more.
    session: cdp::Session,
    proc: Proc,
    _profile: TempDir,
}

impl Browser {
    /// Starts chromium inside `ns` and loads `url` (an address as seen from
    /// inside the namespace), returning once the page has loaded.
    pub fn open(ns: &Ns, url: &str) -> Result<Browser> {
        let program = find_chromium()?;
        let seq = NEXT_PROFILE.fetch_add(1, Ordering::Relaxed);
        let profile = TempDir::new(&format!("chromium-{seq}")).map_err(|source| Error::Io {
            what: "create chromium's profile directory".into(),
            source,
        })?;
        let mut cmd = ns.command(&program);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--password-store=basic",
            "--hide-scrollbars",
            "--mute-audio",
            "--force-color-profile=srgb",
            "--lang=en-US",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank");
        // Its own process group, so that its helpers (zygote, renderers,
        // GPU and network services) can be ended with it.
        cmd.process_group(0);
        let mut proc = ns.spawn(cmd).map_err(Error::Start)?;
        let port = devtools_port(&mut proc)?;
        let name = ns.name().to_string();
        let session = std::thread::spawn(move || {
            mcr_sys::netns::enter(&name).map_err(|source| Error::Io {
                what: format!("enter namespace {name}"),
                source,
            })?;
            cdp::Session::connect(port, PATIENCE)
        })
        .join()
        .map_err(|_| Error::Io {
            what: "connect to chromium's DevTools".into(),
            source: std::io::Error::other("the connecting thread panicked"),
        })?;
        let session = match session {
            Ok(s) => s,
            Err(e) => return Err(exited(&mut proc).unwrap_or(e)),
        };
        let mut b = Browser {
            session,
            proc,
            _profile: profile,
        };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            b.call(domain, json!({}))?;
        }
        b.navigate(url)?;
        Ok(b)
    }

    /// Loads `url` in the page and waits until it has loaded.
    pub fn navigate(&mut self, url: &str) -> Result<()> {
        let r = self.call("Page.navigate", json!({ "url": url }))?;
        if let Some(why) = r["errorText"].as_str().filter(|w| !w.is_empty()) {
            return Err(Error::Navigate {
                url: url.to_string(),
                why: why.to_string(),
            });
        }
        self.wait_for(
            "location.href !== 'about:blank' && document.readyState === 'complete'",
            PATIENCE,
        )
        .map(|_| ())
    }

    /// Evaluates `js` in the page (awaiting it if it is a promise) and
    /// returns its value as JSON (`null` for `undefined` and for what JSON
    /// cannot hold). An exception is [`Error::Script`] with its message.
    pub fn eval(&mut self, js: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": js, "returnByValue": true, "awaitPromise": true, "userGesture": true }),
        )?;
        if let Some(details) = r.get("exceptionDetails") {
            return Err(Error::Script {
                message: cdp::exception_text(details),
            });
        }
        Ok(r["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Evaluates `js` every 100 ms until its value is truthy (as in
    /// JavaScript) and returns that value. An exception counts as not yet
    /// (the element may not exist yet). After `timeout`, the error says the
    /// last value or exception.
    pub fn wait_for(&mut self, js: &str, timeout: Duration) -> Result<Value> {
        let start = Instant::now();
        loop {
            let last = match self.eval(js) {
                Ok(v) if truthy(&v) => return Ok(v),
                Ok(v) => v.to_string(),
                Err(Error::Script { message }) => format!("an exception: {message}"),
                Err(e) => return Err(e),
            };
            if start.elapsed() >= timeout {
                return Err(Error::Timeout {
                    js: js.to_string(),
                    seconds: start.elapsed().as_secs_f64(),
                    last,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Writes a PNG of the whole page (up to 16,384 CSS pixels tall) to
    /// `path`, creating its directory.
    pub fn screenshot(&mut self, path: &Path) -> Result<()> {
        use base64::Engine as _;
        let metrics = self.call("Page.getLayoutMetrics", json!({}))?;
        let size = &metrics["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(f64::from(WINDOW.0)).ceil().max(1.0);
        let height = size["height"]
            .as_f64()
            .unwrap_or(f64::from(WINDOW.1))
            .ceil()
            .clamp(1.0, MAX_SCREENSHOT_HEIGHT);
        let shot = self.call(
            "Page.captureScreenshot",
            json!({
                "format": "png",
                "captureBeyondViewport": true,
                "clip": { "x": 0, "y": 0, "width": width, "height": height, "scale": 1 },
            }),
        )?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or(""))
            .map_err(|e| Error::Protocol {
                method: "Page.captureScreenshot".into(),
                message: format!("its data is not base64: {e}"),
            })?;
        let io = |what: String| move |source| Error::Io { what, source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        }
        std::fs::write(path, png).map_err(io(format!("write {}", path.display())))
    }

    /// Makes the page `width` × `height` CSS pixels, as a phone (`mobile`:
    /// the meta viewport applies, scrollbars overlay) or a desktop window.
    pub fn set_viewport(&mut self, width: u32, height: u32, mobile: bool) -> Result<()> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        )
        .map(|_| ())
    }

    /// Makes the page see `prefers-color-scheme: SCHEME` (`light` or
    /// `dark`).
    pub fn prefer_color_scheme(&mut self, scheme: &str) -> Result<()> {
        self.call(
            "Emulation.setEmulatedMedia",
            json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] }),
        )
        .map(|_| ())
    }

    /// What the page reported as errors so far: uncaught exceptions,
    /// `console.error`, and the browser's error log (a resource that did
    /// not load, a Content-Security-Policy violation), in order.
    pub fn page_errors(&self) -> &[String] {
        &self.session.page_errors
    }

    /// Chromium's process id, which is also its process group's.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// What chromium has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.proc.stderr_so_far()
    }

    /// Sends one DevTools command; a failure while chromium is gone is
    /// reported as its exit, with its stderr.
    fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.session
            .call(method, params, PATIENCE)
            .map_err(|e| exited(&mut self.proc).unwrap_or(e))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Only while chromium is unreaped is its pid sure to still name its
        // group. (If it has exited, its helpers end with their pipes to it,
        // and the test bed ends whatever remains in the namespace.)
        if matches!(self.proc.try_status(), Ok(None)) {
            let _ = mcr_sys::process::send_signal_to_group(self.proc.pid(), crate::Signal::Kill);
        }
    }
}

/// JavaScript's truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// `chromium` in PATH.
fn find_chromium() -> Result<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .ok_or(Error::NotInstalled { path })
}

/// The DevTools port chromium prints once it listens ("DevTools listening
/// on ws://127.0.0.1:PORT/devtools/browser/…").
fn devtools_port(proc: &mut Proc) -> Result<u16> {
    const LINE: &str = "DevTools listening on ws://";
    proc.wait_for_stderr(LINE, PATIENCE)
        .map_err(|e| exited(proc).unwrap_or(Error::Start(e)))?;
    let start = Instant::now();
    loop {
        let stderr = proc.stderr_so_far();
        let rest = stderr.split_once(LINE).map_or("", |(_, r)| r);
        // The line is whole once its end has been read.
        if let Some((line, _)) = rest.split_once('\n') {
            let port = line
                .split('/')
                .next()
                .and_then(|host_port| host_port.rsplit_once(':'))
                .and_then(|(_, p)| p.trim().parse().ok());
            return port.ok_or_else(|| Error::DevTools {
                port: 0,
                what: format!("no port in {LINE}{line}"),
            });
        }
        if start.elapsed() > PATIENCE {
            return Err(Error::DevTools {
                port: 0,
                what: format!("the line {LINE}… never ended: {stderr}"),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`Error::Exited`] if chromium has ended.
fn exited(proc: &mut Proc) -> Option<Error> {
    match proc.try_status() {
        Ok(Some(status)) => Some(Error::Exited {
            status: status.to_string(),
            stderr: proc.stderr_so_far(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthiness_is_javascripts() {
        for falsy in [json!(null), json!(false), json!(0), json!(0.0), json!("")] {
            assert!(!truthy(&falsy), "{falsy}");
        }
        for true_ in [json!(true), json!(1), json!(-0.5), json!("0"), json!([]), json!({})] {
            assert!(truthy(&true_), "{true_}");
        }
    }
}
