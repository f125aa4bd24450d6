# Shared paths for the sbx scripts. Source it; do not run it.
SBX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SBX_DATA_DIR=${SBX_DATA_DIR:-/var/lib/sbx}
SBX_LISTEN=${SBX_LISTEN:-127.0.0.1:8731}
# The image is cached by a hash of its recipe: change the recipe, get a new image.
SBX_IMAGE_HASH=$(sha256sum "$SBX_ROOT/images/default/build.sh" | cut -c1-16)
SBX_IMAGE_DIR=${SBX_IMAGE_DIR:-$SBX_DATA_DIR/images/default-$SBX_IMAGE_HASH}
SBX_IMAGE_ROOTFS=$SBX_IMAGE_DIR/rootfs
SBX_AGENT_DIR=${SBX_AGENT_DIR:-$SBX_DATA_DIR/agent}
# The Connect SDK and runner, mounted read-only at /opt/sbx-connect in job sandboxes.
SBX_CONNECT_SDK_DIR=${SBX_CONNECT_SDK_DIR:-$SBX_DATA_DIR/connect-sdk}
# Where cargo puts release builds (CARGO_TARGET_DIR when set, as cargo does).
SBX_RELEASE_DIR=${CARGO_TARGET_DIR:-$SBX_ROOT/target}/release
export SBX_ROOT SBX_DATA_DIR SBX_LISTEN SBX_IMAGE_DIR SBX_IMAGE_ROOTFS SBX_AGENT_DIR SBX_CONNECT_SDK_DIR
