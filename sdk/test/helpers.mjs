// A fake host for runner tests: a TCP server that plays the in-sandbox proxy
// (answers CONNECT) and then sbxd's side of the job protocol, with a fake
// broker that answers `fetch` messages from the test API's handler in memory.

import { spawn } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { createTestApi, API_KEY } from "../../examples/test-api/server.mjs";

export const SDK_DIR = fileURLToPath(new URL("..", import.meta.url));
export const RUNNER = fileURLToPath(new URL("../runner.mjs", import.meta.url));
export const ITEMS_ENTRY = fileURLToPath(new URL("../../examples/connector-items/index.mjs", import.meta.url));
export const FIXTURES = fileURLToPath(new URL("./fixtures/", import.meta.url));
export { API_KEY };

// The runner needs Node 24 (module.registerHooks); run.sh passes its path.
export const NODE = process.env.SBX_TEST_NODE || process.execPath;

export const DEFAULT_LIMITS = {
  maxBatches: 1000,
  maxRecordsPerBatch: 1000,
  maxRecordBytes: 64 * 1024,
  maxOutputBytes: 64 * 1024 * 1024,
  maxCheckpointBytes: 64 * 1024,
};
export const DEFAULT_RETRY = { maxAttempts: 4, baseDelayMs: 10, maxDelayMs: 50, maxRetryAfterMs: 5000 };

/**
 * A broker like sbxd's: resolves paths against the connection's origin,
 * refuses other origins, adds the API key, and answers from the test API.
 * `api` lets a test share state between runs (e.g. a checkpoint resume).
 */
export function testApiBroker(api = createTestApi(), origin = "https://api.test") {
  return async (message) => {
    const url = new URL(message.url, origin);
    if (url.origin !== origin) return { t: "fetch_error", code: "denied", retryable: false };
    const answer = api.handle({
      method: message.method,
      url: url.pathname + url.search,
      headers: { ...lowerCase(message.headers), "x-api-key": API_KEY },
      body: message.body ? Buffer.from(message.body, "base64") : Buffer.alloc(0),
    });
    return { t: "fetch_result", status: answer.status, headers: answer.headers, body: answer.body.toString("base64") };
  };
}

function lowerCase(headers) {
  return Object.fromEntries(Object.entries(headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
}

/**
 * Runs the real runner.mjs against a fake host and resolves once the runner
 * process exited:
 *   { messages: [{...msg, at}], rawLines, exitCode, signal, connectRequest, stdout, stderr }
 * job: fields merged over a default sync job of the items connector.
 * broker(message) → fetch_result / fetch_error (async allowed).
 * onMessage(message, host) is called for every runner message; host.send(obj)
 *   writes to the runner, host.messages is the log so far.
 * timeoutMs: the runner is killed (and the promise rejects) after this.
 */
export function runJob({ job = {}, broker = testApiBroker(), onMessage, timeoutMs = 20_000, nodeArgs = [], env } = {}) {
  return new Promise((resolve, reject) => {
    const messages = [];
    const rawLines = [];
    let connectRequest = null;
    let connections = 0;
    const server = net.createServer((socket) => {
      connections += 1;
      if (connections > 1) {
        socket.end("HTTP/1.1 403 Forbidden\r\n\r\n");
        return;
      }
      let buffer = Buffer.alloc(0);
      let connected = false;
      const host = {
        messages,
        send: (obj) => socket.write(`${JSON.stringify(obj)}\n`),
        socket,
      };
      socket.on("error", () => {});
      socket.on("data", async (chunk) => {
        buffer = Buffer.concat([buffer, chunk]);
        if (!connected) {
          const end = buffer.indexOf("\r\n\r\n");
          if (end === -1) return;
          connectRequest = buffer.subarray(0, end).toString("latin1");
          buffer = buffer.subarray(end + 4);
          connected = true;
          socket.write("HTTP/1.1 200 Connection established\r\n\r\n");
        }
        let newline;
        while ((newline = buffer.indexOf(10)) !== -1) {
          const line = buffer.subarray(0, newline).toString("utf8");
          buffer = buffer.subarray(newline + 1);
          const message = { ...JSON.parse(line), at: performance.now() };
          messages.push(message);
          rawLines.push(line);
          if (message.t === "hello") {
            host.send({
              t: "job",
              kind: "sync",
              entry: ITEMS_ENTRY,
              config: {},
              sync: "items",
              checkpoint: null,
              oauthStep: null,
              deadlineMs: 30_000,
              limits: DEFAULT_LIMITS,
              retry: DEFAULT_RETRY,
              ...job,
            });
          }
          if (message.t === "fetch") {
            Promise.resolve(broker(message)).then((answer) => {
              if (answer) host.send({ id: message.id, ...answer });
            });
          }
          onMessage?.(message, host);
        }
      });
    });
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      const child = spawn(NODE, [...nodeArgs, RUNNER, "--proxy", `127.0.0.1:${port}`, "--target", "sbx-job.internal:1"], {
        stdio: ["ignore", "pipe", "pipe"],
        env: env ?? { PATH: process.env.PATH },
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error(`runner did not exit within ${timeoutMs} ms; messages: ${summary(messages)}; stderr: ${stderr.slice(0, 2000)}`));
      }, timeoutMs);
      child.on("exit", (exitCode, signal) => {
        clearTimeout(timer);
        server.close();
        // Messages still in flight on the socket arrive before 'close'; give
        // the server's sockets a moment by waiting for the server to close.
        resolve({ messages, rawLines, exitCode, signal, connectRequest, stdout, stderr, child, exitedAt: performance.now() });
      });
    });
  });
}

export function summary(messages) {
  return JSON.stringify(messages.map(({ at, ...m }) => (m.t === "records" ? { t: m.t, n: m.records.length } : m))).slice(0, 3000);
}

export const ofType = (messages, t) => messages.filter((m) => m.t === t);
export const last = (messages) => messages[messages.length - 1];
export const logs = (messages) => ofType(messages, "log").map((m) => m.message);
export const records = (messages) => ofType(messages, "records").flatMap((m) => m.records);
