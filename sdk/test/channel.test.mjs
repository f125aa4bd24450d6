// The channel's framing and backpressure, with an in-process socket pair.

import assert from "node:assert/strict";
import net from "node:net";
import { test } from "node:test";
import { Channel, LineTooLong, MAX_LINE_BYTES, openChannel, stringifyWellFormed } from "../lib/channel.mjs";

/** A proxy that accepts CONNECT and hands the test the host's end of the channel. */
async function proxyPair({ extra = "" } = {}) {
  let onHost;
  const gotHost = new Promise((resolve) => (onHost = resolve));
  const server = net.createServer((socket) => {
    let head = "";
    socket.on("data", function onData(chunk) {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      socket.off("data", onData);
      socket.write(`HTTP/1.1 200 Connection established\r\nX-Whatever: 1\r\n\r\n${extra}`);
      onHost({ server, socket, head });
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const channel = await openChannel(`127.0.0.1:${server.address().port}`, "sbx-job.internal:1");
  return { channel, host: await gotHost };
}

test("bytes right after the CONNECT answer belong to the channel", async () => {
  const { channel, host } = await proxyPair({ extra: '{"t":"job","kind":"describe"}\n' });
  assert.equal(host.head, "CONNECT sbx-job.internal:1 HTTP/1.1\r\nHost: sbx-job.internal:1\r\n\r\n");
  const message = await new Promise((resolve) => channel.listen({ message: resolve, error: () => {} }));
  assert.deepEqual(message, { t: "job", kind: "describe" });
  host.socket.destroy();
  host.server.close();
});

test("messages split across chunks and several per chunk are framed by newlines", async () => {
  const { channel, host } = await proxyPair();
  const received = [];
  const three = new Promise((resolve) => channel.listen({ message: (m) => received.push(m) === 3 && resolve(), error: () => {} }));
  // Two writes, the second once the first is flushed: usually two chunks,
  // and the multi-byte "é" is split from its closing quote either way.
  const bytes = Buffer.from('{"t":"a","x":"é"}\n{"t":"b"}\n{"t":"c"}\n');
  host.socket.write(bytes.subarray(0, 15), () => host.socket.write(bytes.subarray(15)));
  await three;
  assert.deepEqual(received, [{ t: "a", x: "é" }, { t: "b" }, { t: "c" }]);
  host.socket.destroy();
  host.server.close();
});

test("a line that is not a JSON object with t is a protocol error", async () => {
  const { channel, host } = await proxyPair();
  const error = new Promise((resolve) => channel.listen({ message: () => {}, error: resolve }));
  host.socket.write("[1,2]\n");
  assert.equal(await error, "protocol");
  host.socket.destroy();
  host.server.close();
});

test("write() waits for drain when the socket buffer is full", async () => {
  const { channel, host } = await proxyPair();
  channel.listen({ message: () => {}, error: () => {} });
  host.socket.pause(); // the host stops reading
  const line = Channel.encode({ t: "records", records: [{ pad: "x".repeat(1024 * 1024) }] });
  let pending = null;
  for (let i = 0; i < 64; i++) {
    const write = channel.write(line);
    let settled = false;
    write.then(() => (settled = true));
    await new Promise((r) => setImmediate(r));
    if (!settled) {
      pending = write;
      break;
    }
  }
  assert.ok(pending, "a write stayed pending while the host did not read");
  host.socket.resume();
  await pending; // resolves once the host reads again
  host.socket.destroy();
  host.server.close();
});

test("encode refuses lines over 16 MiB", () => {
  assert.throws(() => Channel.encode({ t: "log", message: "x".repeat(MAX_LINE_BYTES) }), LineTooLong);
  assert.ok(Channel.encode({ t: "log", message: "x".repeat(1024) }).endsWith("\n"));
});

test("lone surrogates leave as U+FFFD, in values and keys; pairs and escaped text are untouched", () => {
  const lone = "\ud83d";
  assert.equal(stringifyWellFormed({ a: `x${lone}`, [`k${lone}`]: [lone] }), '{"a":"x\ufffd","k\ufffd":["\ufffd"]}');
  assert.equal(stringifyWellFormed({ a: "😀" }), '{"a":"😀"}');
  assert.equal(stringifyWellFormed({ a: "\\ud800" }), JSON.stringify({ a: "\\ud800" }));
  assert.equal(stringifyWellFormed(undefined), undefined);
  assert.ok(!/\\ud[89a-f]/i.test(Channel.encode({ t: "log", message: `cut ${lone}` })));
});
