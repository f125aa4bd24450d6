// Unit tests of ctx (lib/ctx.mjs) with a fake transport and a fake clock: the
// retry decisions and waits are asserted exactly, without real time passing.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FetchError, HttpError, SchemaError } from "../index.mjs";
import { createContext, nextLink, parseRetryAfter } from "../lib/ctx.mjs";

const RETRY = { maxAttempts: 4, baseDelayMs: 100, maxDelayMs: 1000, maxRetryAfterMs: 5000 };

const b64 = (text) => Buffer.from(text).toString("base64");
const answer = (status, body = "", headers = {}) => ({ t: "fetch_result", status, headers, body: b64(typeof body === "string" ? body : JSON.stringify(body)) });

/**
 * A ctx whose transport answers from `answers` (an array consumed in order,
 * or a function of the request) and whose clock records the waits asked for.
 */
function harness({ answers, retry = RETRY, random = () => 1, abortAt = 60_000, signal = new AbortController().signal } = {}) {
  const requests = [];
  const sleeps = [];
  const logged = [];
  let now = 0;
  const clock = {
    now: () => now,
    random,
    sleep: async (ms, s) => {
      s.throwIfAborted();
      sleeps.push(ms);
      now += ms;
    },
  };
  const transport = {
    fetch: async (request) => {
      requests.push(request);
      const next = typeof answers === "function" ? answers(request, requests.length) : answers.shift();
      if (!next) throw new Error(`no answer for request ${requests.length}`);
      return next;
    },
    log: async (level, message) => {
      logged.push({ level, message });
    },
  };
  const ctx = createContext({ config: Object.freeze({ a: 1 }), signal, abortAt, retry, transport, clock });
  return { ctx, requests, sleeps, logged, advance: (ms) => (now += ms) };
}

describe("ctx.fetch", () => {
  test("returns a WHATWG Response built from the broker's answer", async () => {
    const { ctx, requests } = harness({ answers: [answer(201, "hello", { "x-a": "1", "content-type": "text/plain" })] });
    const response = await ctx.fetch("/v1/x?y=1", { method: "post", headers: { "X-Custom": "v" }, body: "data" });
    assert.ok(response instanceof Response);
    assert.equal(response.status, 201);
    assert.equal(response.url, "/v1/x?y=1");
    assert.equal(response.headers.get("x-a"), "1");
    assert.equal(await response.text(), "hello");
    assert.deepEqual(requests, [{ method: "POST", url: "/v1/x?y=1", headers: { "x-custom": "v", "content-type": "text/plain;charset=UTF-8" }, body: b64("data") }]);
  });

  test("serialises URLSearchParams and bytes bodies", async () => {
    const { ctx, requests } = harness({ answers: [answer(200), answer(200)] });
    await ctx.fetch("/token", { method: "POST", body: new URLSearchParams({ a: "1", b: "x y" }) });
    await ctx.fetch("/bytes", { method: "PUT", body: new Uint8Array([1, 2, 3]) });
    assert.equal(requests[0].headers["content-type"], "application/x-www-form-urlencoded;charset=UTF-8");
    assert.equal(Buffer.from(requests[0].body, "base64").toString(), "a=1&b=x+y");
    assert.deepEqual([...Buffer.from(requests[1].body, "base64")], [1, 2, 3]);
  });

  test("a null-body status gives a Response with no body", async () => {
    const { ctx } = harness({ answers: [answer(204, "")] });
    const response = await ctx.fetch("/v1/x", { method: "DELETE" });
    assert.equal(response.status, 204);
    assert.equal(response.body, null);
  });

  test("accepts paths and https URLs only", async () => {
    const { ctx } = harness({ answers: [answer(200)] });
    await assert.rejects(ctx.fetch("v1/x"), TypeError);
    await assert.rejects(ctx.fetch("http://api.test/"), /only https/);
    await assert.rejects(ctx.fetch("//api.test/x"), TypeError);
    await ctx.fetch(new URL("https://api.test/x"));
  });

  test("a GET with a body is refused before anything is sent", async () => {
    const { ctx, requests } = harness({ answers: [] });
    await assert.rejects(ctx.fetch("/x", { body: "a" }), TypeError);
    assert.equal(requests.length, 0);
  });

  test("never calls the global fetch", async () => {
    const original = globalThis.fetch;
    globalThis.fetch = () => assert.fail("global fetch used");
    try {
      const { ctx } = harness({ answers: [answer(200, { ok: true })] });
      assert.deepEqual(await ctx.json("/x"), { ok: true });
    } finally {
      globalThis.fetch = original;
    }
  });
});

describe("retries", () => {
  test("5xx on GET: retried with full-jitter exponential backoff up to maxAttempts", async () => {
    const draws = [0.5, 0.25, 1];
    const { ctx, requests, sleeps } = harness({ answers: () => answer(500), random: () => draws.shift() });
    const response = await ctx.fetch("/x");
    assert.equal(response.status, 500, "the last response is returned");
    assert.equal(requests.length, 4);
    // attempt 1: 0.5·min(1000, 100) ; attempt 2: 0.25·min(1000, 200) ; attempt 3: 1·min(1000, 400)
    assert.deepEqual(sleeps, [50, 50, 400]);
  });

  test("the backoff never exceeds maxDelayMs", async () => {
    const { ctx, sleeps } = harness({ answers: () => answer(502), retry: { ...RETRY, maxAttempts: 8, maxDelayMs: 300 } });
    await ctx.fetch("/x");
    assert.deepEqual(sleeps, [100, 200, 300, 300, 300, 300, 300]);
  });

  test("Retry-After in seconds is honoured, capped at maxRetryAfterMs", async () => {
    const { ctx, sleeps } = harness({ answers: [answer(429, "", { "retry-after": "2" }), answer(429, "", { "retry-after": "60" }), answer(200)] });
    const response = await ctx.fetch("/x");
    assert.equal(response.status, 200);
    assert.deepEqual(sleeps, [2000, 5000]);
  });

  test("Retry-After as an HTTP date", async () => {
    assert.equal(parseRetryAfter(new Date(Date.UTC(2030, 0, 1, 0, 0, 3)).toUTCString(), Date.UTC(2030, 0, 1)), 3000);
    assert.equal(parseRetryAfter("Thu, 01 Jan 1970 00:00:00 GMT", 5000), 0);
    assert.equal(parseRetryAfter("soon"), null);
    assert.equal(parseRetryAfter(" 7 "), 7000);
  });

  test("a wait that would pass the deadline is skipped and the last response returned", async () => {
    const { ctx, requests, sleeps } = harness({ answers: () => answer(429, "", { "retry-after": "3" }), abortAt: 2500 });
    const response = await ctx.fetch("/x");
    assert.equal(response.status, 429);
    assert.equal(requests.length, 1);
    assert.deepEqual(sleeps, []);
  });

  test("4xx other than 429 is not retried", async () => {
    const { ctx, requests } = harness({ answers: () => answer(404) });
    assert.equal((await ctx.fetch("/x")).status, 404);
    assert.equal(requests.length, 1);
  });

  test("POST and PATCH: 5xx is not retried; 429/503 only with Retry-After", async () => {
    for (const method of ["POST", "PATCH"]) {
      const plain = harness({ answers: () => answer(500) });
      await plain.ctx.fetch("/x", { method, body: "{}" });
      assert.equal(plain.requests.length, 1, `${method} 500`);

      const noHeader = harness({ answers: () => answer(503) });
      await noHeader.ctx.fetch("/x", { method, body: "{}" });
      assert.equal(noHeader.requests.length, 1, `${method} 503 without Retry-After`);

      const withHeader = harness({ answers: [answer(503, "", { "retry-after": "1" }), answer(429, "", { "retry-after": "1" }), answer(200)] });
      assert.equal((await withHeader.ctx.fetch("/x", { method, body: "{}" })).status, 200);
      assert.equal(withHeader.requests.length, 3);
      assert.deepEqual(withHeader.sleeps, [1000, 1000]);
    }
  });

  test("PUT and DELETE are idempotent: 5xx is retried", async () => {
    const { ctx, requests } = harness({ answers: [answer(500), answer(200)] });
    await ctx.fetch("/x", { method: "PUT", body: "{}" });
    assert.equal(requests.length, 2);
  });

  test("fetch errors: retryable ones are retried (POST too), others thrown at once", async () => {
    const flaky = harness({ answers: [{ t: "fetch_error", code: "network", retryable: true }, answer(200)] });
    assert.equal((await flaky.ctx.fetch("/x", { method: "POST", body: "{}" })).status, 200);
    assert.equal(flaky.requests.length, 2);

    const denied = harness({ answers: () => ({ t: "fetch_error", code: "denied", retryable: false }) });
    const error = await denied.ctx.fetch("https://other.example/").catch((e) => e);
    assert.ok(error instanceof FetchError);
    assert.equal(error.code, "denied");
    assert.equal(denied.requests.length, 1);

    const down = harness({ answers: () => ({ t: "fetch_error", code: "timeout", retryable: true }) });
    await assert.rejects(down.ctx.fetch("/x"), (e) => e instanceof FetchError && e.code === "timeout");
    assert.equal(down.requests.length, 4, "up to maxAttempts");
  });

  test("init.retry: false turns retries off", async () => {
    const { ctx, requests } = harness({ answers: () => answer(503) });
    await ctx.fetch("/x", { retry: false });
    assert.equal(requests.length, 1);
  });

  test("waits and pending requests end when ctx.signal aborts", async () => {
    const controller = new AbortController();
    const requests = [];
    const ctx = createContext({
      config: {},
      signal: controller.signal,
      abortAt: Infinity,
      retry: RETRY,
      transport: { fetch: (r) => (requests.push(r), new Promise(() => {})), log: async () => {} },
    });
    const pending = ctx.fetch("/x");
    controller.abort(new Error("stop"));
    await assert.rejects(pending, /stop/);
    await assert.rejects(ctx.fetch("/y"), /stop/);
    assert.equal(requests.length, 1, "nothing is sent once aborted");
  });

  test("the real clock's wait is cut short by the signal", async () => {
    const controller = new AbortController();
    const ctx = createContext({
      config: {},
      signal: controller.signal,
      abortAt: Infinity,
      retry: { ...RETRY, maxRetryAfterMs: 600_000 },
      transport: { fetch: async () => answer(429, "", { "retry-after": "600" }), log: async () => {} },
    });
    const started = performance.now();
    const pending = ctx.fetch("/x");
    setImmediate(() => controller.abort(new Error("stopped")));
    await assert.rejects(pending, /stopped/);
    assert.ok(performance.now() - started < 1000);
  });
});

describe("ctx.json", () => {
  test("GETs with Accept: application/json and parses", async () => {
    const { ctx, requests } = harness({ answers: [answer(200, { a: [1] })] });
    assert.deepEqual(await ctx.json("/x"), { a: [1] });
    assert.equal(requests[0].headers.accept, "application/json");
    assert.equal(requests[0].method, "GET");
  });

  test("init.method and body are passed on", async () => {
    const { ctx, requests } = harness({ answers: [answer(200, { id: 1 })] });
    await ctx.json("/x", undefined, { method: "POST", body: JSON.stringify({ a: 1 }), headers: { "content-type": "application/json" } });
    assert.equal(requests[0].method, "POST");
    assert.equal(requests[0].headers["content-type"], "application/json");
  });

  test("non-2xx throws HttpError with status, without the body", async () => {
    const { ctx } = harness({ answers: [answer(403, { secret: "body-secret" })] });
    const error = await ctx.json("/x").catch((e) => e);
    assert.ok(error instanceof HttpError);
    assert.equal(error.status, 403);
    assert.equal(error.message, "GET /x answered HTTP 403");
    assert.ok(!JSON.stringify({ ...error, m: error.message }).includes("body-secret"));
  });

  test("invalid JSON throws SchemaError", async () => {
    const { ctx } = harness({ answers: [answer(200, "<html>")] });
    await assert.rejects(ctx.json("/x"), (e) => e instanceof SchemaError && /not valid JSON/.test(e.message));
  });

  test("validates with the JSON Schema subset and says where it failed", async () => {
    const schema = { type: "object", required: ["data"], properties: { data: { type: "array", items: { type: "object", properties: { id: { type: "integer" } } } } } };
    const good = harness({ answers: [answer(200, { data: [{ id: 1 }] })] });
    assert.deepEqual(await good.ctx.json("/x", schema), { data: [{ id: 1 }] });
    const bad = harness({ answers: [answer(200, { data: [{ id: 1 }, { id: "2" }] })] });
    const error = await bad.ctx.json("/x", schema).catch((e) => e);
    assert.ok(error instanceof SchemaError);
    assert.deepEqual(error.issues, ["$.data[1].id: expected integer, got string"]);
    assert.match(error.message, /GET \/x: response does not match the schema: \$\.data\[1\]\.id/);
  });

  test("an invalid schema is a TypeError, not a response problem", async () => {
    const { ctx } = harness({ answers: [answer(200, {})] });
    await assert.rejects(ctx.json("/x", { type: "object", oneOf: [] }), /unsupported keyword "oneOf"/);
  });

  test("accepts a zod-style schema (an object with parse) and returns what parse returns", async () => {
    const schema = { parse: (v) => ({ ...v, parsed: true }) };
    const { ctx } = harness({ answers: [answer(200, { a: 1 }), answer(200, { a: 1 })] });
    assert.deepEqual(await ctx.json("/x", schema), { a: 1, parsed: true });
    const failing = { parse: () => { throw new Error("Expected string at a"); } };
    const error = await ctx.json("/x", failing).catch((e) => e);
    assert.ok(error instanceof SchemaError);
    assert.match(error.message, /Expected string at a/);
  });
});

describe("ctx.paginate", () => {
  const collect = async (iterable) => {
    const pages = [];
    for await (const page of iterable) pages.push(page);
    return pages;
  };

  test("cursor: follows the cursor at a dot path, exposes page.next, ends on null", async () => {
    const pages = { "": { data: [1, 2], meta: { next_cursor: "b" } }, b: { data: [3], meta: { next_cursor: null } } };
    const { ctx, requests } = harness({ answers: (r) => answer(200, pages[new URL(r.url, "https://x").searchParams.get("cursor") ?? ""]) });
    const got = await collect(ctx.paginate("/items?limit=2", { items: "data", next: { type: "cursor", param: "cursor", from: "meta.next_cursor" } }));
    assert.deepEqual(got, [[1, 2], [3]]);
    assert.deepEqual(got.map((p) => p.next), ["b", null]);
    assert.deepEqual(requests.map((r) => r.url), ["/items?limit=2", "/items?limit=2&cursor=b"]);
  });

  test("cursor: starts from next.start, and an empty page ends the listing", async () => {
    const { ctx, requests } = harness({ answers: [answer(200, { data: [5], meta: { next_cursor: "c5" } }), answer(200, { data: [], meta: { next_cursor: null } })] });
    const got = await collect(ctx.paginate("/items", { items: "data", next: { type: "cursor", param: "cursor", from: "meta.next_cursor", start: "c4" } }));
    assert.deepEqual(got, [[5]]);
    assert.equal(got[0].next, "c5");
    assert.equal(requests[0].url, "/items?cursor=c4");
  });

  test("cursor: a repeated cursor is an error, not an endless loop", async () => {
    const { ctx } = harness({ answers: () => answer(200, { data: [1], meta: { next_cursor: "same" } }) });
    await assert.rejects(collect(ctx.paginate("/items", { items: "data", next: { type: "cursor", param: "cursor", from: "meta.next_cursor", start: "same" } })), /same cursor/);
  });

  test("link: follows rel=next (relative and absolute), stops without one", async () => {
    const { ctx, requests } = harness({
      answers: [
        answer(200, [1], { link: '</v1/items?page=2>; rel="next", </v1/items?page=9>; rel="last"' }),
        answer(200, [2], { link: '<https://api.test/v1/items?page=3>; rel="prev next"' }),
        answer(200, [3], { link: '</v1/items?page=1>; rel="first"' }),
      ],
    });
    const got = await collect(ctx.paginate("/v1/items", { next: { type: "link" } }));
    assert.deepEqual(got, [[1], [2], [3]]);
    assert.deepEqual(requests.map((r) => r.url), ["/v1/items", "/v1/items?page=2", "https://api.test/v1/items?page=3"]);
    assert.equal(got[2].next, null);
  });

  test("nextLink parses RFC 8288 headers", () => {
    assert.equal(nextLink('<a?x=1,2>; rel=next'), "a?x=1,2");
    assert.equal(nextLink('<a>; title="x"; rel="prev", <b>; rel="NEXT"'), "b");
    assert.equal(nextLink('<a>; rel="prev"'), null);
    assert.equal(nextLink(null), null);
  });

  test("page: counts from start until an empty page", async () => {
    const { ctx, requests } = harness({ answers: [answer(200, { items: [1] }), answer(200, { items: [2] }), answer(200, { items: [] })] });
    const got = await collect(ctx.paginate("/list?sort=asc", { items: "items", next: { type: "page", param: "p", start: 0 } }));
    assert.deepEqual(got, [[1], [2]]);
    assert.deepEqual(requests.map((r) => r.url), ["/list?sort=asc&p=0", "/list?sort=asc&p=1", "/list?sort=asc&p=2"]);
    assert.deepEqual(got.map((p) => p.next), [1, 2]);
  });

  test("offset: advances by the items received, with the limit parameter", async () => {
    const { ctx, requests } = harness({ answers: [answer(200, { r: [1, 2] }), answer(200, { r: [3] }), answer(200, { r: [] })] });
    const got = await collect(ctx.paginate("/list", { items: "r", next: { type: "offset", param: "offset", limitParam: "limit", limit: 2 } }));
    assert.deepEqual(got, [[1, 2], [3]]);
    assert.deepEqual(requests.map((r) => r.url), ["/list?offset=0&limit=2", "/list?offset=2&limit=2", "/list?offset=3&limit=2"]);
  });

  test("pagination parameters replace their own kind and leave other parameters as written", async () => {
    const { ctx, requests } = harness({ answers: [answer(200, { d: [1] }), answer(200, { d: [] })] });
    await collect(ctx.paginate("/x?q=a%20b&page=7&tag=c+d", { items: "d", next: { type: "page" } }));
    assert.deepEqual(requests.map((r) => r.url), ["/x?q=a%20b&tag=c+d&page=1", "/x?q=a%20b&tag=c+d&page=2"]);
    const cursor = harness({ answers: [answer(200, { d: [1], c: "n/1 +" }), answer(200, { d: [], c: null })] });
    await collect(cursor.ctx.paginate("https://api.test/x", { items: "d", next: { type: "cursor", param: "after", from: "c" } }));
    assert.equal(cursor.requests[1].url, "https://api.test/x?after=n%2F1%20%2B");
  });

  test("maxPages bounds the number of requests", async () => {
    const { ctx, requests } = harness({ answers: () => answer(200, { data: [1] }) });
    const got = await collect(ctx.paginate("/list", { items: "data", next: { type: "page" }, maxPages: 3 }));
    assert.equal(got.length, 3);
    assert.equal(requests.length, 3);
  });

  test("a non-2xx page throws HttpError; a missing array throws SchemaError", async () => {
    const failing = harness({ answers: [answer(200, { data: [1] }), answer(500)], retry: { ...RETRY, maxAttempts: 1 } });
    await assert.rejects(collect(failing.ctx.paginate("/l", { items: "data", next: { type: "page" } })), (e) => e instanceof HttpError && e.status === 500);
    const shapeless = harness({ answers: [answer(200, { data: { not: "array" } })] });
    await assert.rejects(collect(shapeless.ctx.paginate("/l", { items: "data", next: { type: "page" } })), (e) => e instanceof SchemaError && /expected an array at "data"/.test(e.message));
  });

  test("wrong options throw when paginate is called", () => {
    const { ctx } = harness({ answers: [] });
    assert.throws(() => ctx.paginate("/l", {}), /next must describe/);
    assert.throws(() => ctx.paginate("/l", { next: { type: "seek" } }), /next.type/);
    assert.throws(() => ctx.paginate("/l", { next: { type: "page", stopWhenEmpty: false } }), /needs maxPages/);
    assert.throws(() => ctx.paginate("/l", { next: { type: "page" }, maxPages: 0 }), /maxPages/);
  });
});

describe("ctx.log and ctx itself", () => {
  test("sends String(message) at each level and drops fields; returns a promise", async () => {
    const { ctx, logged } = harness({ answers: [] });
    const result = ctx.log.info("hello", { token: "t" });
    assert.ok(result instanceof Promise);
    await result;
    await ctx.log.debug(1);
    await ctx.log.warn(null);
    await ctx.log.error({ toString() { throw new Error("no"); } });
    assert.deepEqual(logged, [
      { level: "info", message: "hello" },
      { level: "debug", message: "1" },
      { level: "warn", message: "null" },
      { level: "error", message: "[message could not be converted to text]" },
    ]);
  });

  test("ctx and ctx.log are frozen", () => {
    const { ctx } = harness({ answers: [] });
    assert.ok(Object.isFrozen(ctx));
    assert.ok(Object.isFrozen(ctx.log));
    assert.deepEqual(Object.keys(ctx), ["config", "signal", "fetch", "json", "paginate", "log"]);
  });
});
