#!/usr/bin/env bash
# Validates the Kubernetes manifests of deploy/kubernetes/ against the
# Kubernetes API schemas, strictly (unknown fields are errors), and checks
# that the validation does fail: every manifest under tests/k8s/bad/ must be
# rejected. Idempotent; run by scripts/test, or alone:  tests/k8s/validate.sh
#
# * kubernetes-validate (PyPI, pinned with its dependencies in
#   requirements.txt) runs in a venv under $SBX_DATA_DIR/tools/k8s-venv,
#   created on first use (needs PyPI) and rebuilt when requirements.txt changes.
# * kubernetes-validate does not render kustomize, and no kustomize is
#   installable here: render.py renders the subset the manifests use. When a
#   `kubectl` with kustomize is on the PATH, its rendering must be identical.
# * Every document is validated against each version in K8S_VERSIONS; a
#   warning (such as a kind without a schema) counts as a failure.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib/common.sh"
cd "$SBX_ROOT"

K8S_VERSIONS=${SBX_K8S_VERSIONS:-"1.33.0 1.37.0"}
here=tests/k8s
venv=${SBX_K8S_VENV:-$SBX_DATA_DIR/tools/k8s-venv}
# Debian's python3, whose venv module scripts/install-deps provides
# (python3-venv), whatever other python3 comes first on the PATH.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
stamp="$("$python" --version 2>&1) $(sha256sum "$here/requirements.txt" | cut -c1-16)"

if [ "$(cat "$venv/.sbx-stamp" 2>/dev/null)" != "$stamp" ]; then
  if ! "$python" -c 'import ensurepip' 2>/dev/null; then
    # python3-venv (ensurepip) is installed by install-deps like every other package.
    "$SBX_ROOT/scripts/install-deps" >/dev/null
  fi
  echo "creating the validation venv in $venv"
  # Built aside and renamed: an interrupted install never passes for a complete one.
  # (Leftovers of an interrupted install go first.)
  tmp=$venv.tmp.$$
  rm -rf "$venv".tmp.*
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$tmp"
  "$tmp/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$here/requirements.txt"
  echo "$stamp" >"$tmp/.sbx-stamp"
  rm -rf "$venv"
  mv "$tmp" "$venv"
fi
# A venv remembers its own path in its scripts: call the tools through its python.
py=$venv/bin/python

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# validate FILE: strict validation against every version; fails on any error or warning.
validate() {
  local file=$1 version out rc
  for version in $K8S_VERSIONS; do
    rc=0
    out=$("$py" -m kubernetes_validate --strict --kubernetes-version "$version" "$file" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] || grep -q '^\(WARN\|ERROR\)' <<<"$out"; then
      printf '%s\n' "$out" | grep -v '^INFO' >&2
      return 1
    fi
  done
}

kustomize_ok=""
if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  kustomize_ok=1
fi

n=0
for dir in deploy/kubernetes/base deploy/kubernetes/overlays/*/; do
  dir=${dir%/}
  out=$work/$(echo "$dir" | tr / _).yaml
  if [ -n "$kustomize_ok" ]; then
    kubectl kustomize "$dir" >"$work/kustomize.yaml"
    "$py" "$here/render.py" "$dir" --same-as "$work/kustomize.yaml" >"$out"
  else
    "$py" "$here/render.py" "$dir" >"$out"
  fi
  if ! validate "$out"; then
    echo "FAILED: $dir does not validate (rendered: see above)" >&2
    exit 1
  fi
  docs=$(grep -c '^---$' "$out")
  echo "ok: $dir ($docs documents; Kubernetes $K8S_VERSIONS)"
  n=$((n + 1))
done
if [ -n "$kustomize_ok" ]; then
  echo "(renderings identical to kubectl kustomize's)"
else
  echo "(no kubectl kustomize here: rendered by $here/render.py only)"
fi

# The validation must be able to fail: each bad manifest must be rejected.
for bad in "$here"/bad/*; do
  if [ -d "$bad" ]; then
    if "$py" "$here/render.py" "$bad" >/dev/null 2>"$work/err"; then
      echo "FAILED: render.py accepted $bad, which it must refuse" >&2
      exit 1
    fi
  elif validate "$bad" 2>"$work/err"; then
    echo "FAILED: $bad passed validation, which it must not" >&2
    exit 1
  fi
  echo "ok: rejected $bad: $(grep -v '^$' "$work/err" | head -n1 | cut -c1-160)"
done
# The image's entrypoint (deploy/docker/sbxd-entrypoint.sh) with a fake sbxd
# that has one of the coming flags: it passes that one, quoted, and reports
# the one this sbxd lacks.
sh -n deploy/docker/sbxd-entrypoint.sh
cat >"$work/sbxd" <<'FAKE'
#!/bin/sh
if [ "$1" = --help ]; then printf '      --cluster-token-file <PATH>\n      --cluster\n'; exit 0; fi
for a in "$@"; do printf '[%s]' "$a"; done
FAKE
chmod +x "$work/sbxd"
got=$(SBXD_BIN=$work/sbxd SBX_CLUSTER_TOKEN_FILE="/etc/a b'c" SBX_SNAPSHOT_STORE=s3://b/p SBX_S3_REGION= \
  sh deploy/docker/sbxd-entrypoint.sh --listen x 2>"$work/err")
want="[--cluster-token-file][/etc/a b'c][--listen][x]"
if [ "$got" != "$want" ] || ! grep -q 'no --snapshot-store flag' "$work/err"; then
  echo "FAILED: sbxd-entrypoint.sh ran sbxd with $got (want $want); stderr: $(cat "$work/err")" >&2
  exit 1
fi
echo "ok: deploy/docker/sbxd-entrypoint.sh passes the flags sbxd has"

echo "Kubernetes manifests: $n renderings valid, $(ls "$here"/bad | wc -l) bad ones rejected"
