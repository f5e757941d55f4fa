#!/usr/bin/env bash
# Installs MCR from a release build: run `cargo build --release` first, then
# this script (as root) from anywhere in the repository.
#
# Installs mcrd, mcrctl and mcrgen, the systemd unit, the sysusers.d and
# tmpfiles.d files, the example configuration (only if there is none), the
# notify script and example configuration of keepalived for a hot-standby
# pair, man pages, mcrctl's and mcrgen's shell completions and the
# documentation. With DESTDIR set, installs into that staging directory and
# touches nothing else (packaging/deb/build stages the Debian package this
# way); without it, on a system running systemd, also creates the user mcr
# and /etc/mcr and reloads systemd.
set -euo pipefail
cd "$(dirname "$0")/.."

DESTDIR="${DESTDIR:-}"
# Where cargo put the release build (CARGO_TARGET_DIR moves it).
bin="${CARGO_TARGET_DIR:-target}/release"

if [ -z "$DESTDIR" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: installing into / needs root (or set DESTDIR=/staging/dir)" >&2
  exit 1
fi
programs=(mcrd mcrctl mcrgen)
for b in "${programs[@]}"; do
  if [ ! -x "$bin/$b" ]; then
    echo "install.sh: $bin/$b is missing: run \`cargo build --release\` first" >&2
    exit 1
  fi
done

tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT

# Binaries, unit, sysusers.d and tmpfiles.d.
for b in "${programs[@]}"; do
  install -D -m 0755 "$bin/$b" "$DESTDIR/usr/bin/$b"
done
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

# keepalived (VRRP) for a hot-standby pair: the notify fifo script that
# keepalived runs (from a path only root may change, as keepalived's script
# security demands) and the example configuration to copy.
install -D -m 0755 packaging/keepalived/mcr-vrrp-notify "$DESTDIR/usr/libexec/mcr/mcr-vrrp-notify"
install -D -m 0644 packaging/keepalived/keepalived.conf.example \
  "$DESTDIR/usr/share/mcr/keepalived/keepalived.conf.example"

# Man pages: mcrd writes mcrd.8; mcrctl and mcrgen write NAME.1 and one
# NAME-SUBCOMMAND.1 per subcommand.
mkdir "$tmp/man"
"$bin/mcrd" man --dir "$tmp/man" >/dev/null
"$bin/mcrctl" man --dir "$tmp/man"
"$bin/mcrgen" man --dir "$tmp/man"
shopt -s nullglob
pages8=("$tmp"/man/*.8)
pages1=("$tmp"/man/*.1)
shopt -u nullglob
if [ ${#pages8[@]} -eq 0 ] || [ ${#pages1[@]} -eq 0 ]; then
  echo "install.sh: \`mcrd man\` / \`mcrctl man\` / \`mcrgen man\` wrote no man pages into $tmp/man" >&2
  exit 1
fi
install -d -m 0755 "$DESTDIR/usr/share/man/man8" "$DESTDIR/usr/share/man/man1"
install -m 0644 "${pages8[@]}" "$DESTDIR/usr/share/man/man8/"
install -m 0644 "${pages1[@]}" "$DESTDIR/usr/share/man/man1/"

# Shell completions for mcrctl and mcrgen.
for b in mcrctl mcrgen; do
  "$bin/$b" completions bash >"$tmp/$b.bash"
  "$bin/$b" completions zsh >"$tmp/$b.zsh"
  "$bin/$b" completions fish >"$tmp/$b.fish"
  install -D -m 0644 "$tmp/$b.bash" "$DESTDIR/usr/share/bash-completion/completions/$b"
  install -D -m 0644 "$tmp/$b.zsh" "$DESTDIR/usr/share/zsh/vendor-completions/_$b"
  install -D -m 0644 "$tmp/$b.fish" "$DESTDIR/usr/share/fish/vendor_completions.d/$b.fish"
done

# The documentation, side by side in one directory (the unit's
# Documentation= points at OPERATIONS.md there; the guides link to each
# other by file name).
install -d -m 0755 "$DESTDIR/usr/share/doc/mcr"
install -m 0644 README.md docs/*.md "$DESTDIR/usr/share/doc/mcr/"
# The screenshots the guides show (OPERATIONS.md links images/…).
install -d -m 0755 "$DESTDIR/usr/share/doc/mcr/images"
install -m 0644 docs/images/*.png "$DESTDIR/usr/share/doc/mcr/images/"

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
