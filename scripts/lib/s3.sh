# A throwaway S3-compatible server for the tests: s3s-fs (crates.io), a small
# server that keeps objects as files under one directory. Source this file,
# then call sbx_s3_install (once; idempotent) and sbx_s3_start: it starts the
# server on a free loopback port with a fresh data dir in a new temporary
# directory and random credentials, creates a bucket, exports
#   SBX_TEST_S3_ENDPOINT, SBX_TEST_S3_BUCKET,
#   SBX_TEST_S3_ACCESS_KEY, SBX_TEST_S3_SECRET_KEY, SBX_S3_DIR
# and stops and removes it when the shell exits.
#
# Why s3s-fs rather than Garage: one `cargo install` from crates.io (Garage is
# a distributed store that needs a layout and a cluster set-up before the first
# bucket), no configuration file, and it speaks path-style requests over plain
# HTTP on loopback, which is what the tests need.
#
# Idempotent: servers left by earlier runs that were killed (their owner
# process is gone) are stopped and removed first; servers of runs still going
# are left alone.

SBX_S3FS_VERSION=0.14.1
SBX_TOOLS_DIR=${SBX_TOOLS_DIR:-/var/lib/sbx/tools}
SBX_S3FS_BIN=$SBX_TOOLS_DIR/s3s-fs-$SBX_S3FS_VERSION/bin/s3s-fs

# Installs the pinned s3s-fs unless it is there already. The binary needs the
# crate's `binary` feature (clap, the tokio runtime and the HTTP server).
sbx_s3_install() {
  if [ -x "$SBX_S3FS_BIN" ] && "$SBX_S3FS_BIN" --version 2>/dev/null | grep -q " $SBX_S3FS_VERSION\$"; then
    return 0
  fi
  echo "installing s3s-fs $SBX_S3FS_VERSION into $SBX_TOOLS_DIR (a few minutes, once)"
  mkdir -p "$SBX_TOOLS_DIR"
  cargo install s3s-fs --locked --version "$SBX_S3FS_VERSION" --features binary \
    --root "$SBX_TOOLS_DIR/s3s-fs-$SBX_S3FS_VERSION" --quiet
}

sbx_s3_reap_stale() {
  local dir owner pid
  for dir in "${TMPDIR:-/tmp}"/sbx-s3.*; do
    [ -d "$dir" ] || continue
    owner=$(cat "$dir/owner.pid" 2>/dev/null || true)
    if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then
      continue
    fi
    pid=$(cat "$dir/server.pid" 2>/dev/null || true)
    # Only if that pid is still our s3s-fs (pids are reused).
    if [ -n "$pid" ] && grep -q "s3s-fs" "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
  done
}

sbx_s3_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

sbx_s3_start() {
  if [ ! -x "$SBX_S3FS_BIN" ]; then
    echo "s3s-fs not found at $SBX_S3FS_BIN (run sbx_s3_install or scripts/install-deps)" >&2
    return 1
  fi
  sbx_s3_reap_stale
  SBX_S3_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sbx-s3.XXXXXX")
  echo $$ >"$SBX_S3_DIR/owner.pid"
  mkdir -p "$SBX_S3_DIR/data"
  SBX_TEST_S3_BUCKET=sbx-test
  # s3s-fs serves each directory under its root as a bucket.
  mkdir -p "$SBX_S3_DIR/data/$SBX_TEST_S3_BUCKET"
  SBX_TEST_S3_ACCESS_KEY=$(od -An -tx1 -N10 /dev/urandom | tr -d ' \n')
  SBX_TEST_S3_SECRET_KEY=$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')
  local port attempt
  for attempt in 1 2 3; do
    port=$(sbx_s3_free_port)
    "$SBX_S3FS_BIN" --host 127.0.0.1 --port "$port" \
      --access-key "$SBX_TEST_S3_ACCESS_KEY" --secret-key "$SBX_TEST_S3_SECRET_KEY" \
      "$SBX_S3_DIR/data" >"$SBX_S3_DIR/server.log" 2>&1 &
    echo $! >"$SBX_S3_DIR/server.pid"
    # Ready when the port answers HTTP (any status); a lost port race ends the process.
    local i
    for i in $(seq 1 200); do
      if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
        break 2
      fi
      kill -0 "$(cat "$SBX_S3_DIR/server.pid")" 2>/dev/null || break
      sleep 0.05
    done
    kill "$(cat "$SBX_S3_DIR/server.pid")" 2>/dev/null || true
    port=""
  done
  if [ -z "$port" ]; then
    cat "$SBX_S3_DIR/server.log" >&2
    return 1
  fi
  trap 'sbx_s3_stop; sbx_postgres_stop 2>/dev/null || true' EXIT
  SBX_TEST_S3_ENDPOINT=http://127.0.0.1:$port
  export SBX_S3_DIR SBX_TEST_S3_ENDPOINT SBX_TEST_S3_BUCKET SBX_TEST_S3_ACCESS_KEY SBX_TEST_S3_SECRET_KEY
  echo "s3s-fs $SBX_S3FS_VERSION on $SBX_TEST_S3_ENDPOINT (bucket $SBX_TEST_S3_BUCKET, data $SBX_S3_DIR)"
}

sbx_s3_stop() {
  [ -n "${SBX_S3_DIR:-}" ] && [ -d "$SBX_S3_DIR" ] || return 0
  local pid
  pid=$(cat "$SBX_S3_DIR/server.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$SBX_S3_DIR"
}
