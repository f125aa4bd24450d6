#!/usr/bin/env bash
# forkexec-ab.sh "NAME|FLAGS" ... : one container per variant (OV in FLAGS
# becomes its own overlay dir), then ROUNDS rounds of alternating in-guest
# fork+exec loops: dynamic /bin/true and a static true from BIN_DIR (build it
# with `echo 'int main(void){return 0;}' | gcc -static -O2 -x c -o $BIN_DIR/strue -`),
# bound at /fx. Prints µs per iteration. Root; see NOTES.md section 7.
set -u
# The default image (scripts/lib/common.sh: its directory is named by its recipe's hash).
ROOTFS=${ROOTFS:-$(source "$(dirname "$0")/../../../scripts/lib/common.sh" && echo "$SBX_IMAGE_ROOTFS")}
ROUNDS=${ROUNDS:-5}
N=${N:-200}
R=${STATE:-/var/tmp/fx/root}
mkdir -p $R
names=(); flagsets=()
for v in "$@"; do names+=("${v%%|*}"); flagsets+=("${v#*|}"); done
for i in "${!names[@]}"; do
  b=${WORK:-/var/tmp/fx}/b-$i; rm -rf $b; mkdir -p $b/ov
  cat > $b/config.json <<JSON
{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/sleep","infinity"],"env":["PATH=/usr/local/bin:/usr/bin:/bin"],"cwd":"/"},
 "root":{"path":"$ROOTFS","readonly":false},"hostname":"fx",
 "mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"},{"destination":"/tmp","type":"tmpfs","source":"tmpfs"},
 {"destination":"/fx","type":"bind","source":"${BIN_DIR:-/var/tmp/fx/bin}","options":["rbind","ro"]}],
 "linux":{"namespaces":[{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}]}}
JSON
  runsc --root=$R --network=none ${flagsets[$i]//OV/$b/ov} run --detach --bundle $b fx-$i >/dev/null 2>$b/err || { echo "run failed ${names[$i]}: $(cat $b/err)"; }
done
LOOP='i=0; s=$(date +%s%N); while [ $i -lt '$N' ]; do $BIN; i=$((i+1)); done; e=$(date +%s%N); echo $(( (e-s)/('$N'*1000) ))'
for r in $(seq $ROUNDS); do
  line="round $r:"
  for i in "${!names[@]}"; do
    d=$(runsc --root=$R exec fx-$i sh -c "BIN=/bin/true; $LOOP" 2>/dev/null)
    s=$(runsc --root=$R exec fx-$i sh -c "BIN=/fx/strue; $LOOP" 2>/dev/null)
    line="$line  ${names[$i]} dyn=${d}us static=${s}us"
  done
  echo "$line"
done
for i in "${!names[@]}"; do runsc --root=$R delete --force fx-$i >/dev/null 2>&1; done
