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

# cgroup v2: a container starts at the root of its own cgroup namespace, its
# processes in that (non-root) cgroup. runsc puts each sandbox in
# /sys/fs/cgroup/sbx/<id> and must enable the memory, cpu and pids
# controllers above it, which the kernel refuses for a cgroup that holds
# processes ("no internal processes"). So, as Docker's dind does, move this
# container's processes into a child cgroup and delegate the controllers.
# Only as PID 1, that is at the container's start (never when run by hand or
# by the test suite). cgroup v1 needs none of this.
if [ "$$" = 1 ] && [ -f /sys/fs/cgroup/cgroup.controllers ] && [ "$(cat /proc/self/cgroup)" = "0::/" ]; then
  if mkdir -p /sys/fs/cgroup/sbxd 2>/dev/null; then
    for pid in $(cat /sys/fs/cgroup/cgroup.procs); do
      echo "$pid" >/sys/fs/cgroup/sbxd/cgroup.procs 2>/dev/null || true
    done
  fi
  sed -e 's/ / +/g' -e 's/^/+/' </sys/fs/cgroup/cgroup.controllers 2>/dev/null >/sys/fs/cgroup/cgroup.subtree_control \
    || echo "sbxd-entrypoint: could not delegate the cgroup controllers (is the pod privileged?); sandboxes may fail to start" >&2
fi

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
