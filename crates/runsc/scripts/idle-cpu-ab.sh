#!/usr/bin/env bash
# idle-cpu-ab.sh "NAME|FLAGS" ... : K idle containers per variant (PID 1
# `sleep infinity`, 1 vCPU quota, 1 GiB, cgroup /idle-ab/ID; OV in FLAGS becomes
# the container's own overlay dir), all started first, then ROUNDS windows of
# W seconds: host CPU (utime+stime of every process in the containers' cgroups)
# per container, in % of a core, and PSS per container. Root; NOTES.md section 9.
set -u
# The default image (scripts/lib/common.sh: its directory is named by its recipe's hash).
ROOTFS=${ROOTFS:-$(source "$(dirname "$0")/../../../scripts/lib/common.sh" && echo "$SBX_IMAGE_ROOTFS")}
K=${K:-5}; ROUNDS=${ROUNDS:-3}; W=${W:-10}
WORK=${WORK:-/var/tmp/idle-ab}; R=$WORK/root
mkdir -p $R
names=(); flagsets=()
for v in "$@"; do names+=("${v%%|*}"); flagsets+=("${v#*|}"); done
for i in "${!names[@]}"; do
  for k in $(seq 1 $K); do
    id=idle-$i-$k; b=$WORK/b-$i-$k; rm -rf $b; mkdir -p $b/ov
    cat > $b/config.json <<JSON
{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/sleep","infinity"],"env":["PATH=/usr/local/bin:/usr/bin:/bin"],"cwd":"/"},
 "root":{"path":"$ROOTFS","readonly":false},"hostname":"idle",
 "mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"},{"destination":"/tmp","type":"tmpfs","source":"tmpfs"}],
 "linux":{"cgroupsPath":"/idle-ab/$id","resources":{"memory":{"limit":1073741824},"cpu":{"quota":100000,"period":100000}},
 "namespaces":[{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}]}}
JSON
    runsc --root=$R --network=none ${flagsets[$i]//OV/$b/ov} run --detach --bundle $b $id >/dev/null 2>$b/err </dev/null || echo "run failed ${names[$i]}: $(cat $b/err)"
  done
done
ticks() { # ticks VARIANT-INDEX: utime+stime of every task in its containers' cgroups
  local t=0 p
  for p in $(cat /sys/fs/cgroup/cpuacct/idle-ab/idle-$1-*/cgroup.procs 2>/dev/null); do
    t=$((t + $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0)))
  done
  echo $t
}
hz=$(getconf CLK_TCK)
sleep 5 # let the boots settle before the first window
for r in $(seq $ROUNDS); do
  line="round $r ($(date +%H:%M:%S)):"
  for i in "${!names[@]}"; do
    a=$(ticks $i); sleep $W; b=$(ticks $i)
    line="$line  ${names[$i]} $(awk -v d=$((b-a)) -v hz=$hz -v w=$W -v k=$K 'BEGIN{printf "%.2f%%", 100*d/hz/w/k}')"
  done
  echo "$line"
done
for i in "${!names[@]}"; do
  kib=0
  for p in $(cat /sys/fs/cgroup/memory/idle-ab/idle-$i-*/cgroup.procs 2>/dev/null); do
    kib=$((kib + $(awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup 2>/dev/null || echo 0)))
  done
  echo "${names[$i]}: PSS $(awk -v k=$kib -v n=$K 'BEGIN{printf "%.1f", k/1024/n}') MiB per container"
done
for i in "${!names[@]}"; do for k in $(seq 1 $K); do runsc --root=$R delete --force idle-$i-$k >/dev/null 2>&1; done; done
