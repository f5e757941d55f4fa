//! Least privilege: once the control socket, the HTTP listener (with its
//! token and TLS key read) and the statistics memory are open, the daemon can become an unprivileged user
//! (`--user`) keeping only CAP_NET_RAW (AF_PACKET sockets) and
//! CAP_NET_ADMIN (forced socket buffers, multicast options); the workers
//! it starts inherit just those. The control socket is made 0660, owned by
//! that user and the control group (`--control-group`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use mcr_sys::privilege::{self, Cap};

use super::control::Access;

/// What the daemon keeps when it drops root.
pub const KEPT: [Cap; 2] = [Cap::NetRaw, Cap::NetAdmin];

/// Gives the control socket its owner and the `--control-group` and, with
/// `--user`, drops to that user; returns who may use the control socket.
pub fn settle(socket: &Path, user: Option<&str>, control_group: Option<&str>) -> anyhow::Result<Access> {
    let account = match user {
        Some(name) => Some(
            privilege::user(name)
                .with_context(|| format!("look up user `{name}`"))?
                .with_context(|| format!("--user: there is no user `{name}`"))?,
        ),
        None => None,
    };
    let (gid, group_name) = match control_group {
        Some(name) => (
            privilege::group(name)
                .with_context(|| format!("look up group `{name}`"))?
                .with_context(|| format!("--control-group: there is no group `{name}`"))?,
            name.to_string(),
        ),
        None => {
            let gid = account.as_ref().map_or_else(mcr_sys::process::effective_gid, |a| a.gid);
            (gid, format!("gid {gid}"))
        }
    };
    let uid = account.as_ref().map_or_else(mcr_sys::process::effective_uid, |a| a.uid);
    std::os::unix::fs::chown(socket, Some(uid), Some(gid))
        .with_context(|| format!("give the control socket {} to uid {uid} gid {gid}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("chmod 0660 {}", socket.display()))?;
    if let Some(a) = &account {
        privilege::become_user(a, &KEPT).with_context(|| {
            format!(
                "become user `{}` (uid {}) keeping CAP_NET_RAW and CAP_NET_ADMIN: --user needs mcrd started as root (or start it as that user, with just those capabilities, and without --user)",
                a.name, a.uid
            )
        })?;
        let (eff, prm, bnd, amb) = privilege::caps_of(std::process::id()).context("read the capabilities kept")?;
        let want = privilege::mask(&KEPT);
        anyhow::ensure!(
            [eff, prm, bnd, amb] == [want; 4],
            "after becoming `{}` the capabilities are effective {eff:#x}, permitted {prm:#x}, bounding {bnd:#x}, \
             ambient {amb:#x}: not CAP_NET_RAW and CAP_NET_ADMIN alone",
            a.name
        );
        tracing::info!(
            "running as user `{}` (uid {}) with CAP_NET_RAW and CAP_NET_ADMIN only",
            a.name,
            a.uid
        );
    }
    Ok(Access { uid, gid, group_name })
}
