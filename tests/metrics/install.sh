#!/usr/bin/env bash
# Installs the Prometheus project's Python client (PyPI prometheus-client, pinned in
# requirements.txt; no dependencies) into tests/metrics/.venv, a venv of Debian's
# python3: its text parsers check sbxd's /metrics in crates/daemon/tests/metrics.rs.
# Idempotent: a venv whose stamp (python version + hash of requirements.txt) matches
# is kept; otherwise it is rebuilt from scratch. Run by ./scripts/test; needs PyPI
# the first time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$here/.venv
python=/usr/bin/python3
[ -x "$python" ] || python=python3
stamp="$("$python" --version 2>&1) $(sha256sum "$here/requirements.txt" | cut -c1-16)"
if [ "$(cat "$venv/.sbx-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
if ! "$python" -c 'import ensurepip' 2>/dev/null; then
  "$here/../../scripts/install-deps" >/dev/null
fi
echo "creating the prometheus-client venv in $venv"
# The stamp is written last: an interrupted install is rebuilt next time.
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --no-deps -r "$here/requirements.txt"
"$venv/bin/python" -m pip check >/dev/null
echo "$stamp" >"$venv/.sbx-stamp"
