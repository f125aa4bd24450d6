#!/bin/sh
# Entry point of the sbxd image (deploy/docker/Dockerfile). Settings come from
# the environment (SBX_* variables, from the DaemonSet's ConfigMap and Secret);
# this turns the few that are flags only into flags, then exec's sbxd, so that
# sbxd is PID 1 and gets the stop signal itself. Arguments are passed on.
#
# --cluster-token-file, --snapshot-store, --s3-endpoint and --s3-region come
# with later parts of issue 15: each is passed only when this sbxd has it, and
# a setting for a flag it lacks is reported and left out (so the image starts
# with today's sbxd too).
set -eu

sbxd=${SBXD_BIN:-/usr/local/bin/sbxd}
help=$("$sbxd" --help 2>/dev/null || true)

# flag VAR --flag: adds "--flag $VAR" to the arguments when VAR is set.
flag() {
  eval "value=\${$1:-}"
  [ -n "$value" ] || return 0
  case "$help" in
    *"$2 "*|*"$2="*|*"$2
"*) extra="$extra $2 $(quote "$value")" ;;
    *) echo "sbxd-entrypoint: this sbxd has no $2 flag: $1 is ignored" >&2 ;;
  esac
}
# quote VALUE: VALUE as one single-quoted shell word.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

extra=""
flag SBX_CLUSTER_TOKEN_FILE --cluster-token-file
flag SBX_SNAPSHOT_STORE --snapshot-store
flag SBX_S3_ENDPOINT --s3-endpoint
flag SBX_S3_REGION --s3-region
eval "set -- $extra \"\$@\""
exec "$sbxd" "$@"
