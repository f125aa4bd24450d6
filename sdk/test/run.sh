#!/bin/sh
# Runs the SDK, runner and test-API tests with the given Node.js, which must
# be 24 or later like the sandbox image's (the runner uses module.registerHooks):
#   sdk/test/run.sh /var/lib/sbx/images/<image>/rootfs/usr/local/bin/node
# The test API is also started with the host's `node` when there is one, to
# check that it runs on Node 20 as well.
set -eu
NODE_BIN=${1:?usage: sdk/test/run.sh NODE_BIN (Node.js 24 or later)}
major=$("$NODE_BIN" -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 24 ]; then
  echo "sdk/test/run.sh: $NODE_BIN is Node.js $major; the runner needs 24 or later" >&2
  exit 1
fi
cd "$(dirname "$0")"
SBX_TEST_NODE=$NODE_BIN exec "$NODE_BIN" --test --test-concurrency=2 ./*.test.mjs
