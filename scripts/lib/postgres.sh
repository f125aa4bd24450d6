# A throwaway PostgreSQL cluster for the tests. Source it, then call
# sbx_postgres_start: it initialises a cluster in a new temporary directory,
# starts it listening on a Unix socket in that directory only (no TCP), exports
# SBX_TEST_DATABASE_URL and stops and removes it when the shell exits.
#
# Every role connects without a password (trust) except one, `sbx_pw`, which
# must give its password (scram-sha-256), so that tests can show what sbxd does
# with a wrong one: SBX_TEST_PASSWORD_DATABASE_URL is a URL for that role with
# its (random, per-cluster) password.
#
# SBX_PG_FSYNC=on keeps fsync on (the benchmark wants a durable server like a
# real deployment's); the tests leave it off, durability is not wanted from a
# cluster that lives for one run.
#
# Idempotent: clusters left by earlier runs that were killed (their owner
# process is gone) are stopped and removed first; clusters of runs still going
# are left alone, so that two runs on one machine do not disturb each other.

SBX_PG_BIN=${SBX_PG_BIN:-$( (ls -d /usr/lib/postgresql/*/bin 2>/dev/null || true) | sort -V | tail -1)}

# Runs a command as the `postgres` user (Debian's package creates it); PostgreSQL
# refuses to run as root.
sbx_as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

sbx_postgres_reap_stale() {
  local dir owner
  for dir in "${TMPDIR:-/tmp}"/sbx-pg.*; do
    [ -d "$dir" ] || continue
    owner=$(cat "$dir/owner.pid" 2>/dev/null || true)
    if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then
      continue
    fi
    if [ -f "$dir/data/postmaster.pid" ]; then
      sbx_as_postgres "$SBX_PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
  done
}

sbx_postgres_start() {
  if [ -z "$SBX_PG_BIN" ] || [ ! -x "$SBX_PG_BIN/initdb" ]; then
    echo "PostgreSQL server binaries not found under /usr/lib/postgresql (run scripts/install-deps)" >&2
    return 1
  fi
  sbx_postgres_reap_stale
  SBX_PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sbx-pg.XXXXXX")
  echo $$ >"$SBX_PG_DIR/owner.pid"
  chmod 755 "$SBX_PG_DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$SBX_PG_DIR"
  trap sbx_postgres_stop EXIT
  sbx_as_postgres "$SBX_PG_BIN/initdb" -D "$SBX_PG_DIR/data" -U postgres --auth=trust \
    --no-locale -E UTF8 >"$SBX_PG_DIR/initdb.log" 2>&1 || {
    cat "$SBX_PG_DIR/initdb.log" >&2
    return 1
  }
  sbx_postgres_write_hba "$SBX_PG_DIR/data/pg_hba.conf"
  # No TCP at all.
  local fsync=off
  [ "${SBX_PG_FSYNC:-off}" = on ] && fsync=on
  sbx_as_postgres "$SBX_PG_BIN/pg_ctl" -D "$SBX_PG_DIR/data" -l "$SBX_PG_DIR/server.log" -w \
    -o "-c listen_addresses='' -c unix_socket_directories='$SBX_PG_DIR' -c fsync=$fsync -c max_connections=200" \
    start >/dev/null || {
    cat "$SBX_PG_DIR/server.log" >&2
    return 1
  }
  # The socket directory as the URL's host, percent-encoded.
  local host=${SBX_PG_DIR//\//%2F}
  SBX_TEST_DATABASE_URL="postgres://postgres@$host/postgres"
  local password
  password=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  sbx_postgres_password_role "$password" || return 1
  SBX_TEST_PASSWORD_DATABASE_URL="postgres://sbx_pw:$password@$host/postgres"
  export SBX_PG_DIR SBX_TEST_DATABASE_URL SBX_TEST_PASSWORD_DATABASE_URL
  echo "PostgreSQL $("$SBX_PG_BIN/postgres" --version | awk '{print $3}') on $SBX_PG_DIR"
}

# Writes the cluster's pg_hba.conf: `sbx_pw` needs its password on the socket,
# everyone else is trusted. The whole file is written (not appended to), so
# writing it again gives the same file. Only local (socket) lines: no TCP.
sbx_postgres_write_hba() {
  local hba=$1
  sbx_as_postgres tee "$hba" >/dev/null <<'HBA'
# Written by scripts/lib/postgres.sh. First match wins.
# TYPE  DATABASE  USER    METHOD
local   all       sbx_pw  scram-sha-256
local   all       all     trust
HBA
}

# Creates the role `sbx_pw` with password $1 (scram-sha-256), or sets its
# password when it exists already.
sbx_postgres_password_role() {
  local password=$1
  sbx_as_postgres "$SBX_PG_BIN/psql" -h "$SBX_PG_DIR" -U postgres -d postgres -qAt \
    -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET password_encryption = 'scram-sha-256';
DO \$\$BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sbx_pw') THEN
    ALTER ROLE sbx_pw LOGIN PASSWORD '$password';
  ELSE
    CREATE ROLE sbx_pw LOGIN PASSWORD '$password';
  END IF;
END\$\$;
SQL
}

sbx_postgres_stop() {
  [ -n "${SBX_PG_DIR:-}" ] && [ -d "$SBX_PG_DIR" ] || return 0
  sbx_as_postgres "$SBX_PG_BIN/pg_ctl" -D "$SBX_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$SBX_PG_DIR"
}
