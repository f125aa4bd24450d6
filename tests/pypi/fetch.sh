#!/usr/bin/env bash
# A one-package index for the Dockerfile build test (image_build.rs): PyPI's
# wheel of six 1.17.0, hash-pinned, in simple/six/. Served by python's
# http.server, that directory's listing is the PEP 503 project page pip reads,
# so a build's `pip install --index-url http://<test host>/simple/ six` installs
# a real registry package while the test's traffic stays on this machine.
# Run by ./scripts/test; needs PyPI the first time, then a no-op.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
wheel=six-1.17.0-py2.py3-none-any.whl
sha256=4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274
dir=$here/simple/six
if [ "$(sha256sum "$dir/$wheel" 2>/dev/null | cut -d' ' -f1)" = "$sha256" ]; then
  exit 0
fi
# The E2B Python SDK's venv (tests/e2b/python/install.sh, run before this) has
# a pip whatever python3 the machine has.
pip=("$here/../e2b/python/.venv/bin/python" -m pip)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'six==1.17.0 --hash=sha256:%s\n' "$sha256" >"$tmp/req.txt"
"${pip[@]}" download --quiet --disable-pip-version-check --no-input --no-deps \
  --only-binary=:all: --require-hashes -r "$tmp/req.txt" -d "$tmp/dl"
mkdir -p "$dir"
mv "$tmp/dl/$wheel" "$dir/$wheel"
