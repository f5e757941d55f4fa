//! Another build of mcrd to upgrade to: the workspace's mcrd with an eBPF
//! program that differs from its own, for the tests of restarts to a new
//! build (`mcrctl restart --binary`, a package upgrade under systemd).
//!
//! The variant is mcrd's own C source with one constant changed (the
//! health sampling interval, 25 ms, made a nanosecond longer: the same
//! behaviour, other instructions, so another program tag), compiled as
//! mcr-bpf's build script compiles it, and put in place of the object
//! mcrd embeds. Nothing else of the binary changes. A full second build of
//! the workspace would take minutes; the program is what an upgrade's
//! handover must cope with.
//!
//! `MCR_UPGRADE_BUILD=/path/to/mcrd` names another build to use instead
//! (scripts/upgrade-check builds the previous commit for it).

use std::path::PathBuf;
use std::process::Command;

use crate::{Error, Result, TempDir};

/// The line of mcr-bpf's source that the variant changes, and what to.
const LINE: &str = "#define HEALTH_SAMPLE_NS 25000000";
const VARIANT: &str = "#define HEALTH_SAMPLE_NS 25000001";

fn failed(what: &str, why: impl Into<String>) -> Error {
    Error::Io {
        what: what.to_string(),
        source: std::io::Error::other(why.into()),
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.to_string(),
        source,
    }
}

/// The eBPF object of the variant, compiled in `dir` with the compiler and
/// flags mcr-bpf's build used (`mcr_bpf::COMPILER`), from a directory laid
/// out as the crate's (the object names its source file).
pub fn variant_object(dir: &TempDir) -> Result<Vec<u8>> {
    let what = "compile the variant eBPF program";
    if !mcr_bpf::SOURCE.contains(LINE) {
        return Err(failed(what, format!("mcr-bpf's source has no line `{LINE}` to change")));
    }
    let src_dir = dir.path().join("bpf");
    std::fs::create_dir_all(&src_dir).map_err(io(what))?;
    std::fs::write(src_dir.join("datapath.c"), mcr_bpf::SOURCE.replacen(LINE, VARIANT, 1)).map_err(io(what))?;
    let mut used = mcr_bpf::COMPILER.lines();
    let clang = used.next().ok_or_else(|| failed(what, "mcr-bpf kept no compiler"))?;
    crate::command::run(Command::new(clang).current_dir(dir.path()).args(used).args([
        "-c",
        "bpf/datapath.c",
        "-o",
        "datapath-variant.o",
    ]))?;
    std::fs::read(dir.path().join("datapath-variant.o")).map_err(io(what))
}

/// A copy of the workspace's mcrd, in `dir`, whose embedded eBPF object is
/// the variant's.
pub fn mcrd_with_another_program(dir: &TempDir) -> Result<PathBuf> {
    let what = "make an mcrd with another eBPF program";
    let object = variant_object(dir)?;
    let own = mcr_bpf::OBJECT;
    if object.len() != own.len() {
        return Err(failed(
            what,
            format!("the variant object has {} bytes, mcrd's {}", object.len(), own.len()),
        ));
    }
    if object == own {
        return Err(failed(what, "the variant object is mcrd's own"));
    }
    let mut binary = std::fs::read(crate::bin("mcrd")?).map_err(io(what))?;
    let at: Vec<usize> = binary
        .windows(own.len())
        .enumerate()
        .filter(|(_, w)| *w == own)
        .map(|(i, _)| i)
        .collect();
    let [at] = at[..] else {
        return Err(failed(
            what,
            format!(
                "mcrd holds its eBPF object {} times, not once (is it the build this test was built with?)",
                at.len()
            ),
        ));
    };
    binary[at..at + own.len()].copy_from_slice(&object);
    let path = dir.path().join("mcrd-variant");
    std::fs::write(&path, &binary).map_err(io(what))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io(what))?;
    Ok(path)
}

/// True when the build to upgrade to is one named by `MCR_UPGRADE_BUILD`
/// (an older build may not hand over everything this one does, such as
/// its counters).
pub fn other_is_named() -> bool {
    std::env::var_os("MCR_UPGRADE_BUILD").is_some()
}

/// The build to upgrade to: `MCR_UPGRADE_BUILD` if set, else
/// [`mcrd_with_another_program`]; and whether its eBPF program differs from
/// this build's (it does unless it embeds this build's object).
pub fn other_build(dir: &TempDir) -> Result<(PathBuf, bool)> {
    match std::env::var_os("MCR_UPGRADE_BUILD") {
        Some(p) => {
            let path = PathBuf::from(p);
            let binary = std::fs::read(&path).map_err(io(&format!("MCR_UPGRADE_BUILD={}", path.display())))?;
            let own = mcr_bpf::OBJECT;
            let same = binary.windows(own.len()).any(|w| w == own);
            Ok((path, !same))
        }
        None => Ok((mcrd_with_another_program(dir)?, true)),
    }
}
