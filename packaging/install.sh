#!/usr/bin/env bash
# Installs MCR from a release build: run `cargo build --release` first, then
# this script (as root) from anywhere in the repository.
#
# Installs mcrd and mcrctl, the systemd unit, the sysusers.d and tmpfiles.d
# files, the example configuration (only if there is none), man pages and
# mcrctl's shell completions. With DESTDIR set, installs into that staging
# directory and touches nothing else; without it, on a system running
# systemd, also creates the user mcr and /etc/mcr and reloads systemd.
set -euo pipefail
cd "$(dirname "$0")/.."

DESTDIR="${DESTDIR:-}"
bin=target/release

if [ -z "$DESTDIR" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: installing into / needs root (or set DESTDIR=/staging/dir)" >&2
  exit 1
fi
for b in mcrd mcrctl; do
  if [ ! -x "$bin/$b" ]; then
    echo "install.sh: $bin/$b is missing: run \`cargo build --release\` first" >&2
    exit 1
  fi
done

tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT

# Binaries, unit, sysusers.d and tmpfiles.d.
install -D -m 0755 "$bin/mcrd" "$DESTDIR/usr/bin/mcrd"
install -D -m 0755 "$bin/mcrctl" "$DESTDIR/usr/bin/mcrctl"
install -D -m 0644 packaging/mcrd.service "$DESTDIR/usr/lib/systemd/system/mcrd.service"
install -D -m 0644 packaging/sysusers.d/mcr.conf "$DESTDIR/usr/lib/sysusers.d/mcr.conf"
install -D -m 0644 packaging/tmpfiles.d/mcr.conf "$DESTDIR/usr/lib/tmpfiles.d/mcr.conf"

# The example configuration, unless one is there already (it may hold the
# rules `mcrctl save` wrote). /etc/mcr itself is 0750 mcr:mcr (tmpfiles.d),
# so the file need not hide from others.
if [ -e "$DESTDIR/etc/mcr/mcrd.toml" ]; then
  echo "keeping the existing $DESTDIR/etc/mcr/mcrd.toml"
else
  install -d -m 0750 "$DESTDIR/etc/mcr"
  install -m 0644 packaging/mcrd.toml "$DESTDIR/etc/mcr/mcrd.toml"
fi

# Man pages: mcrd writes mcrd.8, mcrctl writes mcrctl.1 and one
# mcrctl-SUBCOMMAND.1 per subcommand.
mkdir "$tmp/man"
"$bin/mcrd" man --dir "$tmp/man"
"$bin/mcrctl" man --dir "$tmp/man"
shopt -s nullglob
pages8=("$tmp"/man/*.8)
pages1=("$tmp"/man/*.1)
shopt -u nullglob
if [ ${#pages8[@]} -eq 0 ] || [ ${#pages1[@]} -eq 0 ]; then
  echo "install.sh: \`mcrd man\` / \`mcrctl man\` wrote no man pages into $tmp/man" >&2
  exit 1
fi
install -d -m 0755 "$DESTDIR/usr/share/man/man8" "$DESTDIR/usr/share/man/man1"
install -m 0644 "${pages8[@]}" "$DESTDIR/usr/share/man/man8/"
install -m 0644 "${pages1[@]}" "$DESTDIR/usr/share/man/man1/"

# Shell completions for mcrctl.
"$bin/mcrctl" completions bash >"$tmp/mcrctl.bash"
"$bin/mcrctl" completions zsh >"$tmp/mcrctl.zsh"
"$bin/mcrctl" completions fish >"$tmp/mcrctl.fish"
install -D -m 0644 "$tmp/mcrctl.bash" "$DESTDIR/usr/share/bash-completion/completions/mcrctl"
install -D -m 0644 "$tmp/mcrctl.zsh" "$DESTDIR/usr/share/zsh/vendor-completions/_mcrctl"
install -D -m 0644 "$tmp/mcrctl.fish" "$DESTDIR/usr/share/fish/vendor_completions.d/mcrctl.fish"

# The operations guide the unit's Documentation= points at.
if [ -f docs/OPERATIONS.md ]; then
  install -D -m 0644 docs/OPERATIONS.md "$DESTDIR/usr/share/doc/mcr/OPERATIONS.md"
fi

if [ -n "$DESTDIR" ]; then
  echo "installed into $DESTDIR"
  exit 0
fi

if [ -d /run/systemd/system ]; then
  systemd-sysusers /usr/lib/sysusers.d/mcr.conf
  systemd-tmpfiles --create /usr/lib/tmpfiles.d/mcr.conf
  systemctl daemon-reload
  cat <<'EOF'
MCR is installed. Next:
  edit /etc/mcr/mcrd.toml               (see mcrd(8))
  systemctl enable --now mcrd           (start now and at every boot)
  usermod -aG mcr USER                  (let USER run mcrctl; log in again)
After an upgrade: systemctl restart mcrd
EOF
else
  cat <<'EOF'
MCR is installed, but systemd is not running here. Once it is:
  systemd-sysusers /usr/lib/sysusers.d/mcr.conf
  systemd-tmpfiles --create /usr/lib/tmpfiles.d/mcr.conf
  systemctl daemon-reload
  systemctl enable --now mcrd
EOF
fi
