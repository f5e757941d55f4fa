//! The packaging in `packaging/`: the systemd unit passes `systemd-analyze
//! verify`, the sysusers.d and tmpfiles.d files create what the unit
//! expects, and the example config parses. Needs systemd's tools (v252 or
//! later) and root.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mcr_testbed::TempDir;

/// The repository's `packaging/` directory.
fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e} (these tests need systemd's tools installed)"))
}

/// What a command printed, for failure messages.
fn printed(cmd: &Command, out: &Output) -> String {
    format!(
        "{cmd:?}: {}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Unit type suffixes, to recognise messages about a unit by their prefix.
const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".target",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".timer",
    ".path",
    ".slice",
    ".scope",
];

/// Whether `line` is about a unit other than ours: `verify` also loads the
/// units ours depends on (network-online.target, multi-user.target and what
/// they pull in) from the host, and reports the host's problems with them as
/// `other.unit: ...` or `/usr/lib/systemd/system/other.unit:LINE: ...`.
/// Those say nothing about our unit, so they are tolerated; every other line
/// is a failure. (On Debian 12's systemd 252, in a container without systemd
/// running, verify prints nothing at all for mcrd.service.)
fn about_another_unit(line: &str, ours: &str) -> bool {
    let Some((prefix, _)) = line.split_once(':') else {
        return false;
    };
    let name = prefix.rsplit('/').next().unwrap_or(prefix);
    name != ours && !name.contains(' ') && UNIT_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// Runs `systemd-analyze verify` on `unit` (the text of mcrd.service, with
/// ExecStart naming the built mcrd); returns whether it succeeded, the lines
/// it printed that may be about our unit, and all it printed.
fn verify(unit: &str, dir: &TempDir) -> (bool, Vec<String>, String) {
    let path = dir.path().join("mcrd.service");
    std::fs::write(&path, unit).expect("write the unit");
    let mut cmd = Command::new("systemd-analyze");
    // --man=no: verify runs `man` for each man: page in Documentation=, and
    // mcrd(8) and mcrctl(1) are installed only by packaging/install.sh, not
    // on a build machine. Everything else is checked.
    cmd.args(["verify", "--man=no"]).arg(&path).current_dir(dir.path());
    let out = run(&mut cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let problems = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !about_another_unit(l, "mcrd.service"))
        .map(str::to_string)
        .collect();
    (out.status.success(), problems, printed(&cmd, &out))
}

/// mcrd.service with ExecStart naming the built binary: `verify` checks
/// that the executable exists, and /usr/bin/mcrd need not.
fn unit_for_this_build() -> String {
    let unit = std::fs::read_to_string(packaging().join("mcrd.service")).expect("read packaging/mcrd.service");
    let exe = env!("CARGO_BIN_EXE_mcrd").replace('%', "%%");
    let mut replaced = 0;
    let lines: Vec<String> = unit
        .lines()
        .map(|l| match l.strip_prefix("ExecStart=/usr/bin/mcrd ") {
            Some(args) => {
                replaced += 1;
                format!("ExecStart=\"{exe}\" {args}")
            }
            None => l.to_string(),
        })
        .collect();
    assert_eq!(
        replaced, 1,
        "mcrd.service should have one `ExecStart=/usr/bin/mcrd ...` line"
    );
    lines.join("\n") + "\n"
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = TempDir::new("packaging-verify").expect("temp dir");
    let unit = unit_for_this_build();
    // The user mcr need not exist: verify does not resolve User=/Group=.
    let (ok, problems, printed) = verify(&unit, &dir);
    assert!(ok, "systemd-analyze verify failed:\n{printed}");
    assert!(
        problems.is_empty(),
        "systemd-analyze verify reported problems: {problems:#?}\n{printed}"
    );
}

#[test]
fn verify_catches_a_mistake_in_the_unit() {
    // The check above must not pass merely because systemd words its
    // warnings in a way the filter does not expect.
    let dir = TempDir::new("packaging-verify-bad").expect("temp dir");
    let unit = unit_for_this_build().replace("ProtectHome=yes", "ProtectHome=yes\nProtectHomeTypo=yes");
    let (_, problems, printed) = verify(&unit, &dir);
    assert!(
        problems.iter().any(|l| l.contains("ProtectHomeTypo")),
        "an unknown key went unreported:\n{printed}"
    );
}

#[test]
fn sysusers_and_tmpfiles_parse() {
    let root = TempDir::new("packaging-root").expect("temp dir");
    std::fs::create_dir(root.path().join("etc")).expect("create etc in the temporary root");
    let root_arg = format!("--root={}", root.path().display());
    // With --root, both tools read the configuration files named on the
    // command line inside the root unless the path is absolute.
    let sysusers = packaging()
        .join("sysusers.d/mcr.conf")
        .canonicalize()
        .expect("sysusers.d/mcr.conf");
    let tmpfiles = packaging()
        .join("tmpfiles.d/mcr.conf")
        .canonicalize()
        .expect("tmpfiles.d/mcr.conf");

    // Any message naming the file is a parse warning (the tools log what
    // they create, e.g. "Creating group 'mcr'", without it).
    let check = |cmd: &mut Command| {
        let out = run(cmd);
        let printed = printed(cmd, &out);
        assert!(out.status.success(), "failed:\n{printed}");
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("mcr.conf"),
            "warned about the file:\n{printed}"
        );
    };
    check(Command::new("systemd-sysusers").arg(&root_arg).arg(&sysusers));
    let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).expect("read the new etc/passwd");
    let user: Vec<&str> = passwd
        .lines()
        .find(|l| l.starts_with("mcr:"))
        .unwrap_or_else(|| panic!("no user mcr in:\n{passwd}"))
        .split(':')
        .collect();
    assert_eq!(user.len(), 7, "{user:?}");
    assert_eq!(user[5], "/", "mcr's home: {user:?}");
    assert!(user[6].ends_with("/nologin"), "mcr's shell: {user:?}");
    let group = std::fs::read_to_string(root.path().join("etc/group")).expect("read the new etc/group");
    assert!(
        group.lines().any(|l| l.starts_with(&format!("mcr:x:{}:", user[3]))),
        "no group mcr with mcr's GID in:\n{group}"
    );

    // tmpfiles resolves mcr in the root's etc/passwd, made just above.
    check(
        Command::new("systemd-tmpfiles")
            .arg(&root_arg)
            .arg("--create")
            .arg(&tmpfiles),
    );
    let etc_mcr = std::fs::metadata(root.path().join("etc/mcr")).expect("etc/mcr was not created");
    assert!(etc_mcr.is_dir());
    assert_eq!(etc_mcr.mode() & 0o7777, 0o750, "etc/mcr's mode");
    assert_eq!(etc_mcr.uid().to_string(), user[2], "etc/mcr's owner");
    assert_eq!(etc_mcr.gid().to_string(), user[3], "etc/mcr's group");
}

/// `text` with every commented-out setting and rule line (`# key = ...`,
/// `# [[rule]]`) turned on.
fn uncommented(text: &str) -> String {
    let setting = |l: &str| {
        l.split_once(" = ")
            .is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    };
    let lines: Vec<&str> = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if rest == "[[rule]]" || setting(rest) => rest,
            _ => l,
        })
        .collect();
    lines.join("\n") + "\n"
}

#[test]
fn the_example_config_parses_as_is_and_with_every_example_turned_on() {
    let text = std::fs::read_to_string(packaging().join("mcrd.toml")).expect("read packaging/mcrd.toml");
    let config = mcr_core::config::Config::parse(&text).unwrap_or_else(|e| panic!("packaging/mcrd.toml: {e}"));
    assert!(config.rules.is_empty(), "the example should start with no rules");
    // The socket must be in the directory the unit's RuntimeDirectory= makes.
    let socket = config.settings.control_socket.expect("control_socket");
    assert_eq!(socket.parent(), Some(Path::new("/run/mcr")), "control_socket");

    let all = uncommented(&text);
    let config = mcr_core::config::Config::parse(&all)
        .unwrap_or_else(|e| panic!("packaging/mcrd.toml with its examples turned on: {e}\n{all}"));
    assert_eq!(config.rules.len(), 1, "the example rule:\n{all}");
    let s = &config.settings;
    assert!(
        s.cpus.is_some() && s.http_listen.is_some() && s.log_format.is_some(),
        "{s:?}"
    );
}
