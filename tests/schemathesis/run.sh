#!/usr/bin/env bash
# Property-based API testing: schemathesis drives docs/openapi.yaml against a
# real sbxd (dev mode, loopback only, its own data dir and runsc root) and
# checks that no request gets a 5xx and every response matches the spec.
#
#   tests/schemathesis/run.sh                  # defaults below
#   SBX_ST_MAX_EXAMPLES=50 tests/schemathesis/run.sh
#   tests/schemathesis/run.sh --include-operation-id exec   # extra args go to schemathesis
#
# Needs root, runsc, the default image and the agent (./scripts/build,
# ./scripts/build-image). Leaves nothing behind: every sandbox it created is
# destroyed, sbxd is stopped, runsc containers under its root are deleted and
# the data dir is removed. Reports go to target/schemathesis-report/.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib/common.sh"
cd "$SBX_ROOT"

VENV=${SBX_ST_VENV:-$SBX_ROOT/target/schemathesis-venv}
REQS=$SBX_ROOT/tests/schemathesis/requirements.txt
SBXD=${SBX_ST_SBXD:-$SBX_RELEASE_DIR/sbxd}
AGENT_DIR=${SBX_TEST_AGENT_DIR:-$SBX_AGENT_DIR}
ROOTFS=${SBX_TEST_IMAGE_ROOTFS:-$(ls -d "$SBX_DATA_DIR"/images/default-*/rootfs 2>/dev/null | head -1)}
MAX_EXAMPLES=${SBX_ST_MAX_EXAMPLES:-20}
SEED=${SBX_ST_SEED:-20240729}
REPORT_DIR=$SBX_ROOT/target/schemathesis-report
CHECKS=not_a_server_error,status_code_conformance,response_schema_conformance

[ -x "$SBXD" ] || { echo "no sbxd at $SBXD: run ./scripts/build" >&2; exit 2; }
[ -d "$ROOTFS" ] || { echo "no image rootfs: run ./scripts/build-image" >&2; exit 2; }

# A venv with the pinned packages, rebuilt when requirements.txt changes.
STAMP=$VENV/.requirements.sha256
WANT=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "== installing schemathesis into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQS"
    echo "$WANT" > "$STAMP"
fi

DATA=$(mktemp -d /var/tmp/sbx-schemathesis-XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
BASE=http://127.0.0.1:$PORT
SBXD_PID=

cleanup() {
    local rc=$?
    set +e
    if [ -n "$SBXD_PID" ] && kill -0 "$SBXD_PID" 2>/dev/null; then
        # Destroy every sandbox through the API (all pages), then stop sbxd.
        python3 - "$BASE" <<'PY'
import json, sys, time, urllib.request
base = sys.argv[1]
def call(method, path):
    req = urllib.request.Request(base + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
            return r.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        return e.code, None
ids, cursor = [], None
while True:
    st, page = call("GET", "/v2/sandboxes?limit=100" + (f"&cursor={cursor}" if cursor else ""))
    if st != 200:
        break
    ids += [s["id"] for s in page["data"] if s["status"] not in ("TERMINATED", "FAILED")]
    if not page["page"].get("hasMore"):
        break
    cursor = page["page"]["cursor"]
for i in ids:
    call("DELETE", f"/v2/sandboxes/{i}")
deadline = time.time() + 60
while ids and time.time() < deadline:
    ids = [i for i in ids if (call("GET", f"/v2/sandboxes/{i}")[1] or {"data": {"status": "FAILED"}})["data"]["status"] not in ("TERMINATED", "FAILED")]
    time.sleep(0.2)
print(f"== cleanup: {len(ids)} sandbox(es) still not ended" if ids else "== cleanup: all sandboxes destroyed")
PY
        kill "$SBXD_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$SBXD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SBXD_PID" 2>/dev/null
        wait "$SBXD_PID" 2>/dev/null
    fi
    if [ -d "$DATA/runsc" ]; then
        for id in $(runsc --root "$DATA/runsc" list -quiet 2>/dev/null); do
            runsc --root "$DATA/runsc" delete -force "$id" >/dev/null 2>&1
        done
    fi
    rm -rf "$DATA" "$DATA.log"
    exit $rc
}
trap cleanup EXIT INT TERM

echo "== sbxd on $BASE (data $DATA)"
SBX_LOG=${SBX_LOG:-warn} "$SBXD" --dev --listen "127.0.0.1:$PORT" --data-dir "$DATA" \
    --agent-dir "$AGENT_DIR" --image-rootfs "$ROOTFS" </dev/null >"$DATA.log" 2>&1 &
SBXD_PID=$!
for _ in $(seq 300); do
    curl -fsS "$BASE/healthz" >/dev/null 2>&1 && break
    kill -0 "$SBXD_PID" 2>/dev/null || { echo "sbxd exited:" >&2; cat "$DATA.log" >&2; exit 1; }
    sleep 0.1
done

# Live objects for the operations that schemathesis.toml pins: a RUNNING
# sandbox, a long-running process in it and a READY snapshot of it.
api() { curl -sS --max-time 60 -X "$1" -H 'content-type: application/json' ${3:+--data "$3"} "$BASE$2"; }
jget() { python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["'"$1"'"])'; }
export SBX_ST_SANDBOX SBX_ST_PROCESS SBX_ST_SNAPSHOT
SBX_ST_SANDBOX=$(api POST /v2/sandboxes '{"name":"schemathesis-target","vcpu":1,"memoryMb":1024}' | jget id)
SBX_ST_PROCESS=$(api POST "/v2/sandboxes/$SBX_ST_SANDBOX/processes" '{"command":["sh","-c","echo out; echo err >&2"]}' | jget id)
SBX_ST_SNAPSHOT=$(api POST "/v2/sandboxes/$SBX_ST_SANDBOX/snapshots" '{"name":"schemathesis-target"}' | jget id)
for _ in $(seq 300); do
    [ "$(api GET "/v2/snapshots/$SBX_ST_SNAPSHOT" | jget status)" = READY ] && break
    sleep 0.1
done
echo "== pinned: sandbox $SBX_ST_SANDBOX, process $SBX_ST_PROCESS, snapshot $SBX_ST_SNAPSHOT"

mkdir -p "$REPORT_DIR"
echo "== schemathesis ($CHECKS; $MAX_EXAMPLES examples per operation; seed $SEED)"
set +e
"$VENV/bin/schemathesis" --config-file "$SBX_ROOT/tests/schemathesis/schemathesis.toml" \
    run "$SBX_ROOT/docs/openapi.yaml" \
    --url "$BASE" \
    --checks "$CHECKS" \
    --phases examples,coverage,fuzzing \
    --max-examples "$MAX_EXAMPLES" \
    --seed "$SEED" \
    --generation-database none \
    --workers 1 \
    --request-timeout 60 \
    --no-color \
    --report junit,ndjson --report-dir "$REPORT_DIR" \
    "$@"
ST_RC=$?
set -e
if [ -s "$DATA.log" ] && grep -qiE "panick|ERROR" "$DATA.log"; then
    echo "== sbxd log (errors)"
    # -m, not `| head`: with pipefail a head that stops reading makes grep
    # die of SIGPIPE and this script exit 141 after a clean run.
    grep -m 50 -iE "panick|ERROR" "$DATA.log"
fi
rm -f "$DATA.log"
exit $ST_RC
