// End-to-end tests of runner.mjs: the real runner as a child process, a fake
// host (helpers.mjs) speaking docs/connect/job-protocol.md, and the example
// connector (examples/connector-items) or the fixtures in ./fixtures.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { describe, test } from "node:test";
import { createTestApi } from "../../examples/test-api/server.mjs";
import { API_KEY, DEFAULT_LIMITS, DEFAULT_RETRY, FIXTURES, NODE, RUNNER, last, logs, ofType, records, runJob, summary, testApiBroker } from "./helpers.mjs";

const MISC = `${FIXTURES}misc/index.mjs`;
const expectDone = (run) => assert.deepEqual(withoutAt(last(run.messages)), { t: "done", result: null }, summary(run.messages));
const withoutAt = ({ at, ...rest }) => rest;
const failOf = (run) => withoutAt(last(run.messages));

describe("channel and job kinds", () => {
  test("opens the channel with CONNECT, says hello first, exits 0 after done", async () => {
    const run = await runJob({ job: { kind: "describe" } });
    assert.equal(run.connectRequest, "CONNECT sbx-job.internal:1 HTTP/1.1\r\nHost: sbx-job.internal:1");
    assert.deepEqual(withoutAt(run.messages[0]), { t: "hello", v: 1 });
    assert.equal(run.exitCode, 0);
    assert.equal(run.stdout, "");
  });

  test("describe returns the static definition", async () => {
    const run = await runJob({ job: { kind: "describe", config: {} } });
    const done = last(run.messages);
    assert.equal(done.t, "done");
    assert.deepEqual(done.result.auth, { type: "apiKey", header: "X-Api-Key" });
    assert.equal(done.result.config.properties.pageSize.default, 100);
    assert.equal(done.result.hasVerify, true);
    assert.deepEqual(done.result.oauth, []);
    assert.deepEqual(done.result.syncs.slice(0, 3), [
      { name: "items", mode: "append", primaryKey: null },
      { name: "users", mode: "merge", primaryKey: "id" },
      { name: "catalog", mode: "replace", primaryKey: null },
    ]);
  });

  test("describe of an OAuth package lists its hooks and OAuth endpoints", async () => {
    const run = await runJob({ job: { kind: "describe", entry: MISC } });
    const { result } = last(run.messages);
    assert.deepEqual(result.auth, {
      type: "oauth2",
      authorizeUrl: "https://api.test/oauth/authorize",
      tokenUrl: "https://api.test/oauth/token",
      scopes: ["read"],
      pkce: true,
    });
    assert.deepEqual(result.oauth, ["afterAuthorize"]);
  });

  test("verify succeeds with one authenticated request", async () => {
    const run = await runJob({ job: { kind: "verify", sync: null } });
    const fetches = ofType(run.messages, "fetch");
    assert.equal(fetches.length, 1);
    assert.equal(fetches[0].url, "/v1/me");
    assert.equal(fetches[0].method, "GET");
    assert.equal(fetches[0].body, null);
    expectDone(run);
  });

  test("verify fails (package, http_401) when the API rejects the credentials: the status, never the message", async () => {
    const broker = async () => ({ t: "fetch_result", status: 401, headers: { "content-type": "application/json" }, body: Buffer.from('{"error":"unauthorized"}').toString("base64") });
    const run = await runJob({ job: { kind: "verify" }, broker });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "http_401" });
    assert.equal(run.exitCode, 0);
  });

  test("an OAuth step returns its JSON result, with config defaults applied", async () => {
    const run = await runJob({ job: { kind: "oauth", entry: MISC, oauthStep: "afterAuthorize", config: {} } });
    assert.deepEqual(withoutAt(last(run.messages)), { t: "done", result: { accountId: "acct_1", mode: "plain" } });
  });

  test("an unknown OAuth step fails as no_such_hook", async () => {
    const run = await runJob({ job: { kind: "oauth", entry: MISC, oauthStep: "beforeEverything" } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "no_such_hook" });
  });

  test("an unknown sync fails as no_such_sync", async () => {
    const run = await runJob({ job: { sync: "nope" } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "no_such_sync" });
  });

  test("an entry without a definition fails as bad_definition and logs why", async () => {
    const run = await runJob({ job: { kind: "describe", entry: `${FIXTURES}no-default/index.mjs` } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "bad_definition" });
    assert.match(logs(run.messages)[0], /^Invalid connector definition: /);
  });

  test("an entry that throws while loading fails as import_failed, the message in the log only", async () => {
    const run = await runJob({ job: { kind: "describe", entry: `${FIXTURES}throws-on-import/index.mjs` } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "import_failed" });
    assert.match(logs(run.messages)[0], /^Importing the package entry .*throws-on-import\/index\.mjs failed: Error: top-level failure with a secret message$/);
    assert.ok(!JSON.stringify(failOf(run)).includes("secret message"));
  });

  test("a missing dependency fails as import_failed and the log names it", async () => {
    const run = await runJob({ job: { kind: "describe", entry: `${FIXTURES}missing-import/index.mjs` } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "import_failed" });
    assert.equal(logs(run.messages).length, 1);
    assert.match(logs(run.messages)[0], /not-installed-anywhere/);
  });

  test("defineConnector's error while the entry loads fails as bad_definition with the message in the log", async () => {
    const run = await runJob({ job: { kind: "describe", entry: `${FIXTURES}bad-schema/index.mjs` } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "bad_definition" });
    assert.deepEqual(logs(run.messages), ['Invalid connector definition: defineConnector: config.properties.pageSize: unsupported keyword "format"']);
  });

  test("an unknown message type from the host fails the run as platform/protocol", async () => {
    const run = await runJob({
      job: { sync: "slow" },
      onMessage: (m, host) => m.t === "log" && host.send({ t: "surprise" }),
    });
    assert.deepEqual(failOf(run), { t: "fail", category: "platform", kind: "protocol" });
  });

  test("a job message missing required fields fails as platform/protocol", async () => {
    const run = await runJob({ job: { limits: undefined } });
    assert.deepEqual(failOf(run), { t: "fail", category: "platform", kind: "protocol" });
  });

  test("the runner exits with an error when the proxy refuses CONNECT", async () => {
    const server = net.createServer((s) => s.end("HTTP/1.1 403 Forbidden\r\n\r\n"));
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    const child = spawn(NODE, [RUNNER, "--proxy", `127.0.0.1:${server.address().port}`, "--target", "sbx-job.internal:1"], { stdio: "ignore" });
    const [code] = await new Promise((r) => child.on("exit", (...a) => r(a)));
    server.close();
    assert.equal(code, 3);
  });
});

describe("sync modes and checkpoints", () => {
  test("append: bounded by maxPages, checkpoints, and resumes from the checkpoint", async () => {
    const api = createTestApi();
    const first = await runJob({ job: { sync: "items", config: { pageSize: 100, maxPages: 2 } }, broker: testApiBroker(api) });
    expectDone(first);
    assert.deepEqual(records(first.messages).map((r) => r.id), Array.from({ length: 200 }, (_, i) => i + 1));
    assert.equal(ofType(first.messages, "records").length, 2, "one batch per page");
    assert.deepEqual(ofType(first.messages, "checkpoint").map((m) => m.checkpoint), [{ cursor: "c200" }]);

    const second = await runJob({ job: { sync: "items", config: { pageSize: 100, maxPages: 2 }, checkpoint: { cursor: "c200" } }, broker: testApiBroker(api) });
    expectDone(second);
    assert.deepEqual(records(second.messages).map((r) => r.id), Array.from({ length: 50 }, (_, i) => i + 201));
    assert.deepEqual(ofType(second.messages, "checkpoint").map((m) => m.checkpoint), [{ cursor: "c250" }]);
    assert.equal(ofType(second.messages, "fetch")[0].url, "/v1/items?limit=100&cursor=c200");

    const third = await runJob({ job: { sync: "items", config: { maxPages: 2 }, checkpoint: { cursor: "c250" } }, broker: testApiBroker(api) });
    expectDone(third);
    assert.equal(records(third.messages).length, 0);
    assert.deepEqual(ofType(third.messages, "checkpoint").map((m) => m.checkpoint), [{ cursor: "c250" }]);
  });

  test("the checkpoint given to run() is the job's committed checkpoint", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "echoCheckpoint", checkpoint: { n: 41 } } });
    assert.deepEqual(logs(run.messages), ['checkpoint: {"n":41}']);
    assert.deepEqual(ofType(run.messages, "checkpoint").map((m) => m.checkpoint), [{ n: 42 }]);
    expectDone(run);
  });

  test("merge: records carry the primary key; a second run sees changed rows", async () => {
    const api = createTestApi();
    const first = await runJob({ job: { sync: "users" }, broker: testApiBroker(api) });
    expectDone(first);
    const second = await runJob({ job: { sync: "users" }, broker: testApiBroker(api) });
    expectDone(second);
    const a = records(first.messages);
    const b = records(second.messages);
    assert.equal(a.length, 20);
    assert.equal(b.length, 21);
    assert.equal(a.find((u) => u.id === 5).name, "User 5 v1");
    assert.equal(b.find((u) => u.id === 5).name, "User 5 v2");
  });

  test("merge: a record without its primary key fails the run as bad_batch", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "mergeNoKey" } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "bad_batch" });
    assert.equal(ofType(run.messages, "records").length, 0);
  });

  test("merge with a composite key: every key field is required", async () => {
    const good = await runJob({ job: { entry: MISC, sync: "composite" } });
    expectDone(good);
    assert.equal(records(good.messages).length, 2);
    const bad = await runJob({ job: { entry: MISC, sync: "composite", config: { mode: "broken" } } });
    assert.deepEqual(failOf(bad), { t: "fail", category: "package", kind: "bad_batch" });
  });

  test("replace: reads every page by page number", async () => {
    const run = await runJob({ job: { sync: "catalog" } });
    expectDone(run);
    assert.equal(records(run.messages).length, 25);
    assert.deepEqual(ofType(run.messages, "fetch").map((m) => m.url), ["/v1/catalog?page=1", "/v1/catalog?page=2", "/v1/catalog?page=3", "/v1/catalog?page=4"]);
  });

  test("lone surrogates are sent as U+FFFD, never as escapes a strict host parser rejects", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "loneSurrogates" } });
    expectDone(run);
    assert.ok(run.rawLines.every((line) => !/\\ud[89a-f]/i.test(line)), run.rawLines.join("\n"));
    assert.deepEqual(logs(run.messages), ["log \ufffd"]);
    assert.deepEqual(records(run.messages), [{ name: "record \ufffd", "key \ufffd": 1 }]);
    assert.deepEqual(ofType(run.messages, "checkpoint")[0].checkpoint, { at: "\ufffd" });
  });

  test("a yielded value that is not {records}/{checkpoint} fails as bad_batch", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "badBatch" } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "bad_batch" });
  });
});

describe("failures", () => {
  test("a throw mid-run fails as package/threw and never carries the message", async () => {
    const run = await runJob({ job: { sync: "explode" } });
    assert.equal(ofType(run.messages, "records").length, 1, "the batch before the throw was sent");
    assert.deepEqual(logs(run.messages), ["explode: about to throw"]);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "threw" });
    assert.ok(!JSON.stringify(run.messages).includes("secret detail"));
    assert.equal(run.exitCode, 0);
  });

  test("an unhandled rejection in package code fails as package/threw", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "unhandled" } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "threw" });
  });

  test("process.exit() in package code fails as package/exited instead of vanishing", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "exits" } });
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "exited" });
    assert.equal(run.exitCode, 0);
  });

  test("running out of heap kills the run without done", async () => {
    const run = await runJob({ job: { sync: "hog" }, nodeArgs: ["--max-old-space-size=48"], timeoutMs: 60_000 });
    assert.notEqual(run.exitCode, 0);
    assert.equal(ofType(run.messages, "done").length, 0);
  });
});

describe("limits", () => {
  const flood = (limits) => runJob({ job: { sync: "flood", limits: { ...DEFAULT_LIMITS, ...limits } } });

  test("maxBatches: fails on the batch over the limit", async () => {
    const run = await flood({ maxBatches: 3 });
    assert.equal(ofType(run.messages, "records").length, 3);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "max_batches" });
  });

  test("maxRecordsPerBatch", async () => {
    const run = await flood({ maxRecordsPerBatch: 499 });
    assert.equal(ofType(run.messages, "records").length, 0);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "max_records_per_batch" });
  });

  test("maxRecordBytes counts a record as JSON", async () => {
    const size = JSON.stringify({ id: 0, padding: "f".repeat(200) }).length;
    const exact = await runJob({ job: { sync: "flood", limits: { ...DEFAULT_LIMITS, maxRecordBytes: size + 4, maxBatches: 1 } } });
    assert.equal(ofType(exact.messages, "records").length, 1, "records of the limit's size pass");
    const run = await flood({ maxRecordBytes: size - 1 });
    assert.equal(ofType(run.messages, "records").length, 0);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "max_record_bytes" });
  });

  test("maxOutputBytes", async () => {
    const run = await flood({ maxOutputBytes: 250_000 });
    // 500 records of about 220 bytes per batch: the third batch crosses 250 kB.
    assert.equal(ofType(run.messages, "records").length, 2);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "max_output_bytes" });
  });

  test("maxCheckpointBytes", async () => {
    const run = await flood({ maxCheckpointBytes: 1000 });
    assert.equal(ofType(run.messages, "checkpoint").length, 0);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "max_checkpoint_bytes" });
  });
});

describe("retries", () => {
  test("a 429 with Retry-After: 1 is retried after about a second", async () => {
    const run = await runJob({ job: { sync: "ratelimited" } });
    expectDone(run);
    const fetches = ofType(run.messages, "fetch");
    assert.equal(fetches.length, 2);
    const waited = fetches[1].at - fetches[0].at;
    assert.ok(waited >= 950 && waited < 3000, `waited ${waited} ms`);
    assert.deepEqual(logs(run.messages), ['ratelimited: {"ok":true}']);
  });

  test("Retry-After is capped at maxRetryAfterMs", async () => {
    const broker = testApiBroker();
    let calls = 0;
    const slowDown = async (m) => (++calls === 1 ? { t: "fetch_result", status: 429, headers: { "retry-after": "30" }, body: "" } : broker(m));
    const run = await runJob({ job: { sync: "ratelimited", retry: { ...DEFAULT_RETRY, maxRetryAfterMs: 300 } }, broker: slowDown });
    const fetches = ofType(run.messages, "fetch");
    const waited = fetches[1].at - fetches[0].at;
    assert.ok(waited >= 280 && waited < 2000, `waited ${waited} ms`);
    expectDone(run);
  });

  test("a wait that would pass the deadline is not made: the last answer stands", async () => {
    const always429 = async () => ({ t: "fetch_result", status: 429, headers: { "retry-after": "20" }, body: "" });
    const started = performance.now();
    const run = await runJob({ job: { sync: "ratelimited", deadlineMs: 5000, retry: { ...DEFAULT_RETRY, maxRetryAfterMs: 60_000 } }, broker: always429 });
    assert.equal(ofType(run.messages, "fetch").length, 1);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "http_429" });
    assert.ok(run.exitedAt - started < 4000, "gave up without waiting");
  });

  test("5xx answers are retried up to maxAttempts", async () => {
    const always503 = async () => ({ t: "fetch_result", status: 503, headers: {}, body: "" });
    const run = await runJob({ job: { kind: "verify", retry: { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 20, maxRetryAfterMs: 1000 } }, broker: always503 });
    assert.equal(ofType(run.messages, "fetch").length, 3);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "http_503" });
  });

  test("retryable fetch errors are retried, others are not", async () => {
    const broker = testApiBroker();
    let calls = 0;
    const flaky = async (m) => (++calls === 1 ? { t: "fetch_error", code: "network", retryable: true } : broker(m));
    const run = await runJob({ job: { kind: "verify" }, broker: flaky });
    assert.equal(ofType(run.messages, "fetch").length, 2);
    expectDone(run);

    const denied = async () => ({ t: "fetch_error", code: "reauthorization_required", retryable: false });
    const failed = await runJob({ job: { kind: "verify" }, broker: denied });
    assert.equal(ofType(failed.messages, "fetch").length, 1);
    assert.deepEqual(failOf(failed), { t: "fail", category: "package", kind: "threw" });
  });
});

describe("abort and the time limit", () => {
  test("host abort: ctx.signal aborts, the runner exits promptly without done", async () => {
    let abortSentAt = 0;
    const run = await runJob({
      job: { sync: "slow" },
      onMessage: (m, host) => {
        if (m.t === "log" && m.message === "slow: waiting") {
          abortSentAt = performance.now();
          host.send({ t: "abort", reason: "time_limit" });
        }
      },
    });
    assert.ok(logs(run.messages).includes("slow: signal aborted (AbortError)"), summary(run.messages));
    assert.equal(ofType(run.messages, "done").length + ofType(run.messages, "fail").length, 0);
    assert.equal(run.exitCode, 0);
    assert.ok(run.exitedAt - abortSentAt < 1500, `exited ${run.exitedAt - abortSentAt} ms after abort`);
  });

  test("ctx.signal aborts a little before the deadline", async () => {
    let jobAt = 0;
    const run = await runJob({
      job: { sync: "slow", deadlineMs: 10000 },
      onMessage: (m) => {
        if (m.t === "hello") jobAt = performance.now();
      },
    });
    const aborted = run.messages.find((m) => m.t === "log" && m.message === "slow: signal aborted (TimeoutError)");
    assert.ok(aborted, summary(run.messages));
    const after = aborted.at - jobAt;
    // deadlineMs 10000 → the signal aborts at 9000 ms (a 10 % margin): after
    // 8 s shows the margin is not much larger, before 10 s that it is there.
    assert.ok(after > 8000 && after < 10000, `aborted ${after} ms after the job`);
    assert.deepEqual(failOf(run), { t: "fail", category: "package", kind: "threw" });
  });
});

describe("the package's view", () => {
  test("@sbx/connect resolves to the runner's own SDK instance (import and require)", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "identity" } });
    expectDone(run);
    assert.deepEqual(logs(run.messages), [
      "instanceof HttpError: true status 404",
      "require gives the same module: true",
      "exports: FetchError,HttpError,SchemaError,defineConnector",
    ]);
  });

  test("ctx.config is frozen", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "frozenConfig", config: { mode: "x" } } });
    assert.deepEqual(logs(run.messages), ["config is frozen: x"]);
  });

  test("logs carry only the message text, at their level", async () => {
    const run = await runJob({ job: { entry: MISC, sync: "logFields" } });
    expectDone(run);
    assert.deepEqual(ofType(run.messages, "log").map(withoutAt), [
      { t: "log", level: "debug", message: "plain message" },
      { t: "log", level: "info", message: "object message" },
      { t: "log", level: "warn", message: "42" },
      { t: "log", level: "error", message: "error level" },
    ]);
    assert.ok(!JSON.stringify(run.messages).includes("field-value"));
  });

  test("a large message is forwarded, a huge one is cut and ends forwarding", async () => {
    const run = await runJob({ job: { sync: "bigLog" } });
    expectDone(run);
    const sent = logs(run.messages);
    assert.equal(sent[0], "x".repeat(5 * 1024));
    assert.equal(sent[1], "bigLog: after the big message");
    assert.equal(sent[2], "y".repeat(16 * 1024));
    assert.equal(sent.length, 3);
  });

  test("no credential reaches the runner or leaves it", async () => {
    const run = await runJob({ job: { sync: "leak" }, env: { PATH: process.env.PATH } });
    expectDone(run);
    const everything = JSON.stringify(run.messages);
    assert.ok(!everything.includes(API_KEY));
    for (const fetch of ofType(run.messages, "fetch")) {
      const names = Object.keys(fetch.headers).map((h) => h.toLowerCase());
      assert.ok(!names.includes("x-api-key") && !names.includes("authorization"));
    }
    assert.ok(logs(run.messages).some((l) => l.startsWith("ctx keys: config,signal,fetch,json,paginate,log")));
  });

  test("ctx.fetch to a foreign origin goes to the broker, which refuses it", async () => {
    const run = await runJob({ job: { sync: "foreign" } });
    assert.equal(ofType(run.messages, "fetch")[0].url, "https://other.example/");
    assert.deepEqual(logs(run.messages), ["foreign: refused: denied"]);
  });

  test("the runner never uses the global fetch; a package's global fetch is not the channel", async () => {
    // A preload replaces the global fetch with a trap before the runner starts.
    const trap = "data:text/javascript,globalThis.fetch=async()=>{throw Object.assign(new Error('trap'),{code:'TRAPPED'})}";
    const items = await runJob({ job: { sync: "items", config: { maxPages: 1 } }, nodeArgs: ["--import", trap] });
    expectDone(items);
    assert.equal(records(items.messages).length, 100);

    const probe = await runJob({ job: { sync: "globalFetch" }, nodeArgs: ["--import", trap] });
    assert.deepEqual(logs(probe.messages), ["global fetch failed: TRAPPED"]);

    // Without the trap: a loopback port nobody serves. The fake host sees no
    // fetch message, i.e. the global fetch did not go through the channel.
    const closed = net.createServer();
    await new Promise((r) => closed.listen(0, "127.0.0.1", r));
    const port = closed.address().port;
    await new Promise((r) => closed.close(r));
    const loopback = await runJob({ job: { sync: "globalFetch", config: { probeUrl: `http://127.0.0.1:${port}/` } } });
    assert.equal(ofType(loopback.messages, "fetch").length, 0);
    assert.deepEqual(logs(loopback.messages), ["global fetch failed: ECONNREFUSED"]);
  });
});
