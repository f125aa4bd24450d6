// The HTTPS test API (examples/test-api/server.mjs) that the daemon's
// integration tests run: started as a real process, on the Node.js running
// the tests and, when present, on the host's `node` (it must work on 20 too).

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const SERVER = fileURLToPath(new URL("../../examples/test-api/server.mjs", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "sbx-test-api-"));
const cert = join(dir, "cert.pem");
const key = join(dir, "key.pem");

before(() => {
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost"], { stdio: "ignore" });
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Starts the server and resolves once it printed its port. */
function start(node, extra = []) {
  const child = spawn(node, [SERVER, "--cert", cert, "--key", key, "--port", "0", "--host", "127.0.0.1", ...extra], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) resolve({ child, port: JSON.parse(out).port });
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

function stop(child) {
  return new Promise((resolve) => {
    child.removeAllListeners("exit");
    child.on("exit", resolve);
    child.kill("SIGTERM");
  });
}

function call(port, method, path, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method, path, headers, rejectUnauthorized: false }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString();
        resolve({ status: res.statusCode, headers: res.headers, json: text ? JSON.parse(text) : null });
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

const KEY = { "x-api-key": "test-key-123" };
const form = (fields) => ({ headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(fields).toString() });
const challengeOf = (verifier) => createHash("sha256").update(verifier).digest("base64url");

const hostNode = (() => {
  try {
    return execFileSync("sh", ["-c", "command -v node"]).toString().trim() || null;
  } catch {
    return null;
  }
})();
const nodes = [...new Set([process.execPath, hostNode].filter(Boolean))];

for (const node of nodes) {
  describe(`test API on ${node}`, () => {
    let server;
    before(async () => {
      server = await start(node);
    });
    after(() => stop(server.child));

    test("/v1/* needs the API key", async () => {
      assert.equal((await call(server.port, "GET", "/v1/me")).status, 401);
      assert.equal((await call(server.port, "GET", "/v1/me", { headers: { "x-api-key": "wrong" } })).status, 401);
      const me = await call(server.port, "GET", "/v1/me", { headers: KEY });
      assert.deepEqual(me.json, { id: "acct_1", name: "Test Account", auth: "apiKey" });
    });

    test("items: 250 by cursor, then an empty page with a null cursor", async () => {
      const ids = [];
      let cursor = "";
      for (;;) {
        const page = await call(server.port, "GET", `/v1/items?limit=100&cursor=${cursor}`, { headers: KEY });
        assert.equal(page.status, 200);
        ids.push(...page.json.data.map((i) => i.id));
        if (page.json.meta.next_cursor === null) break;
        cursor = page.json.meta.next_cursor;
      }
      assert.deepEqual(ids, Array.from({ length: 250 }, (_, i) => i + 1));
      assert.equal((await call(server.port, "GET", "/v1/items?cursor=bogus", { headers: KEY })).status, 400);
    });

    test("users change between requests; catalog pages by number", async () => {
      const first = await call(server.port, "GET", "/v1/users", { headers: KEY });
      const second = await call(server.port, "GET", "/v1/users", { headers: KEY });
      assert.equal(first.json.data.length, 20);
      assert.equal(second.json.data.length, 21);
      assert.notEqual(first.json.data[4].name, second.json.data[4].name);
      const pinned = await call(server.port, "GET", "/v1/users?version=1", { headers: KEY });
      assert.equal(pinned.json.data.length, 20);
      const pages = [];
      for (let page = 1; page <= 4; page++) pages.push((await call(server.port, "GET", `/v1/catalog?page=${page}`, { headers: KEY })).json.data.length);
      assert.deepEqual(pages, [10, 10, 5, 0]);
    });

    test("ratelimited: 429 with Retry-After: 1 once per credential, then 200", async () => {
      const first = await call(server.port, "GET", "/v1/ratelimited", { headers: KEY });
      assert.equal(first.status, 429);
      assert.equal(first.headers["retry-after"], "1");
      assert.equal((await call(server.port, "GET", "/v1/ratelimited", { headers: KEY })).status, 200);
    });

    test("OAuth: PKCE code exchange, bearer access, refresh, revocation", async () => {
      const verifier = randomBytes(32).toString("base64url");
      const { json: issued } = await call(server.port, "GET", `/oauth/test-issue-code?code_challenge=${challengeOf(verifier)}&code_challenge_method=S256`);

      const wrong = await call(server.port, "POST", "/oauth/token", form({ grant_type: "authorization_code", code: issued.code, code_verifier: "not-it" }));
      assert.deepEqual([wrong.status, wrong.json.error], [400, "invalid_grant"]);
      const reused = await call(server.port, "POST", "/oauth/token", form({ grant_type: "authorization_code", code: issued.code, code_verifier: verifier }));
      assert.equal(reused.status, 400, "a code works once, even after a failed attempt");

      const redirect = await call(server.port, "GET", `/oauth/authorize?response_type=code&client_id=c&redirect_uri=${encodeURIComponent("https://app.test/cb")}&state=s1&code_challenge=${challengeOf(verifier)}&code_challenge_method=S256`);
      assert.equal(redirect.status, 302);
      const location = new URL(redirect.headers.location);
      assert.equal(location.origin + location.pathname, "https://app.test/cb");
      assert.equal(location.searchParams.get("state"), "s1");

      const tokens = await call(server.port, "POST", "/oauth/token", form({ grant_type: "authorization_code", code: location.searchParams.get("code"), code_verifier: verifier }));
      assert.equal(tokens.status, 200);
      assert.equal(tokens.json.token_type, "Bearer");
      const me = await call(server.port, "GET", "/v1/me", { headers: { authorization: `Bearer ${tokens.json.access_token}` } });
      assert.equal(me.json.auth, "bearer");

      await call(server.port, "POST", "/test/expire");
      const expired = await call(server.port, "GET", "/v1/me", { headers: { authorization: `Bearer ${tokens.json.access_token}` } });
      assert.deepEqual([expired.status, expired.headers["www-authenticate"]], [401, 'Bearer error="invalid_token"']);

      const refreshed = await call(server.port, "POST", "/oauth/token", form({ grant_type: "refresh_token", refresh_token: tokens.json.refresh_token }));
      assert.equal(refreshed.status, 200);
      assert.notEqual(refreshed.json.access_token, tokens.json.access_token);
      const again = await call(server.port, "GET", "/v1/me", { headers: { authorization: `Bearer ${refreshed.json.access_token}` } });
      assert.equal(again.status, 200);

      await call(server.port, "POST", "/test/revoke", { headers: { "content-type": "application/json" }, body: JSON.stringify({ refresh_token: tokens.json.refresh_token }) });
      const revoked = await call(server.port, "POST", "/oauth/token", form({ grant_type: "refresh_token", refresh_token: tokens.json.refresh_token }));
      assert.deepEqual([revoked.status, revoked.json], [400, { error: "invalid_grant" }]);
    });

    test("/test/requests logs method, path and headers as received", async () => {
      await call(server.port, "POST", "/test/reset");
      await call(server.port, "GET", "/v1/me?x=1", { headers: KEY });
      const { json } = await call(server.port, "GET", "/test/requests");
      assert.equal(json.length, 1);
      assert.equal(json[0].method, "GET");
      assert.equal(json[0].path, "/v1/me?x=1");
      assert.equal(json[0].headers["x-api-key"], "test-key-123");
    });
  });
}

test("--state-file keeps state across a restart", async () => {
  const stateFile = join(dir, "state.json");
  const a = await start(process.execPath, ["--state-file", stateFile]);
  await call(a.port, "GET", "/v1/ratelimited", { headers: KEY });
  await stop(a.child);
  const b = await start(process.execPath, ["--state-file", stateFile]);
  try {
    assert.equal((await call(b.port, "GET", "/v1/ratelimited", { headers: KEY })).status, 200);
    assert.equal((await call(b.port, "GET", "/test/requests")).json.length, 2);
  } finally {
    await stop(b.child);
  }
});
