//! Wireshark's dissectors, through `tshark`, as a decoder of what a relay
//! sent that is not MCR's own: a test captures the output and reads back
//! the fields tshark finds.

use std::path::Path;

use crate::{Error, Result};

/// Decodes the pcap file `pcap`, with the UDP port `port` taken as
/// `protocol` (tshark's `-d udp.port==PORT,PROTOCOL`), and returns for
/// each frame the values of `fields` (tshark's names, e.g.
/// `moldudp64.sequence`), each field's occurrences joined by commas.
pub fn fields(pcap: &Path, port: u16, protocol: &str, fields: &[&str]) -> Result<Vec<Vec<String>>> {
    let mut cmd = std::process::Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(pcap).args([
        "-d",
        &format!("udp.port=={port},{protocol}"),
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: "tshark".into(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("{cmd:?}"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect())
}

/// Whether tshark is installed (a test that needs it says so when not).
pub fn available() -> bool {
    std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
