#!/usr/bin/env node
// A zero-dependency HTTPS API for the Connect integration tests: it is the
// "third-party service" that examples/connector-items talks to. Runs on
// Node 20 and 24.
//
//   node server.mjs --cert cert.pem --key key.pem [--port 0] [--host 127.0.0.1] [--state-file state.json]
//
// Prints one line `{"host":"127.0.0.1","port":N}` on stdout once listening
// (useful with --port 0). With --state-file, all state (counters, OAuth codes
// and tokens, the request log) is loaded at start and saved after every
// request, so the server can be restarted in the middle of a test.
//
// Authentication of /v1/*: `X-Api-Key: test-key-123`, or
// `Authorization: Bearer <access token issued by /oauth/token>`; else 401.
//
// Endpoints
//   GET  /v1/me                      → {id, name, auth: "apiKey"|"bearer"}
//   GET  /v1/items?cursor=&limit=    → {data: [{id, name, createdAt}], meta: {next_cursor}}
//        250 items, ids 1..250. limit 1..500 (default 100). A non-empty page's
//        next_cursor points after its last item; the page after the last item
//        is empty with next_cursor null (so a saved cursor resumes later). An
//        unknown cursor → 400.
//   GET  /v1/users[?version=N]       → {data: [{id, name, email, version}]}
//        Version N defaults to the number of /v1/users requests so far
//        (1 on the first). Ids 1..20 always; users whose id is a multiple of 5
//        carry name "User <id> v<N>"; from N = 2 on, user 21 exists too.
//   GET  /v1/catalog?page=N          → {data: [{sku, title}], page: N}
//        10 per page, 25 products (pages 1..3, page 4 is empty). Version is the
//        number of page=1 requests so far: from version 2 on, product sku-7 is
//        gone and sku-3 is renamed.
//   GET  /v1/ratelimited             → first request per credential: 429 with
//        `Retry-After: 1`, body {error: "rate_limited"}; after that 200 {ok: true}.
//   GET  /oauth/authorize?response_type=code&client_id=&redirect_uri=&state=&code_challenge=&code_challenge_method=S256
//        → 302 to redirect_uri?code=…&state=… (consent simulated, always granted).
//   GET|POST /oauth/test-issue-code?code_challenge=…[&code_challenge_method=S256]
//        → {code}: the same code issuing, without a browser.
//   POST /oauth/token (form or JSON body)
//        grant_type=authorization_code, code, code_verifier: checks
//          BASE64URL(SHA256(code_verifier)) == the code's challenge (or equality
//          for method "plain"); a code works once.
//          → {access_token, refresh_token, token_type: "Bearer", expires_in: 3600, scope}
//        grant_type=refresh_token, refresh_token: → a new access token (same
//          refresh token), or 400 {"error":"invalid_grant"} when it was revoked
//          or never issued.
//        Anything else → 400 {"error":"invalid_request"|"unsupported_grant_type"|"invalid_grant"}.
//        client_id / client_secret, if sent, are accepted and not checked.
//   GET  /echo/credentials?encoding=gzip|deflate|br|identity[&chunk=N]
//        → no authentication; answers {authorization, apiKey, forms: {base64,
//        upper, urlEncoded, hex}, encoding} where authorization and apiKey are
//        the request's Authorization and X-Api-Key headers (null when absent)
//        and forms are those encodings of whichever of the two is set, the
//        body compressed with `encoding` (Content-Encoding set, whatever the
//        request's Accept-Encoding says) and written in chunks of N bytes.
//        An origin that reflects credentials, for the credential-boundary tests.
//   POST /test/revoke [{"refresh_token": "…"}] → revokes that refresh token, or all of them.
//   POST /test/expire                → every access token issued so far stops working
//        (401 with `WWW-Authenticate: Bearer error="invalid_token"`), so a
//        client has to refresh.
//   GET  /test/requests              → [{method, path, headers}] every request
//        received except /test/*, in order, headers lower-cased as received.
//   POST /test/reset                 → forgets all state and the request log.

import { createHash, randomBytes } from "node:crypto";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { createServer } from "node:https";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { pathToFileURL } from "node:url";

export const API_KEY = "test-key-123";
const ITEM_COUNT = 250;
const USER_COUNT = 20;
const PRODUCT_COUNT = 25;
const PRODUCTS_PER_PAGE = 10;

function freshState() {
  return {
    usersRequests: 0,
    catalogFirstPages: 0,
    rateLimitedSeen: [], // credentials that already got their 429
    codes: {}, // code → {challenge, method}
    accessTokens: [], // valid access tokens
    expiredTokens: [], // issued, then expired by /test/expire
    refreshTokens: {}, // token → {revoked}
    requests: [],
  };
}

function json(status, value, headers = {}) {
  return { status, headers: { "content-type": "application/json", ...headers }, body: Buffer.from(JSON.stringify(value)) };
}

const COMPRESSORS = { gzip: gzipSync, deflate: deflateSync, br: brotliCompressSync, identity: (b) => b };

/** An origin reflecting the caller's credentials in a compressed body (see the header). */
function echoCredentials(query, headers) {
  const encoding = query.get("encoding") ?? "gzip";
  const compress = COMPRESSORS[encoding];
  if (!compress) return json(400, { error: "encoding must be gzip, deflate, br or identity" });
  const authorization = headers.authorization ?? null;
  const apiKey = headers["x-api-key"] ?? null;
  const value = authorization ?? apiKey ?? "";
  const forms = {
    base64: Buffer.from(value).toString("base64"),
    upper: value.toUpperCase(),
    urlEncoded: encodeURIComponent(value),
    hex: Buffer.from(value).toString("hex"),
  };
  const plain = Buffer.from(JSON.stringify({ authorization, apiKey, forms, encoding }));
  const chunk = Number(query.get("chunk") ?? 0);
  const answer = {
    status: 200,
    headers: { "content-type": "application/json", ...(encoding === "identity" ? {} : { "content-encoding": encoding }) },
    body: compress(plain),
  };
  if (Number.isInteger(chunk) && chunk > 0) answer.chunk = chunk;
  return answer;
}

function parseBody(headers, body) {
  const text = body.toString("utf8");
  if ((headers["content-type"] ?? "").includes("application/json")) {
    try {
      return JSON.parse(text || "{}");
    } catch {
      return {};
    }
  }
  return Object.fromEntries(new URLSearchParams(text));
}

const base64url = (buffer) => buffer.toString("base64").replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

/**
 * The API without the HTTP server around it, so JavaScript tests can answer a
 * fake broker with exactly what the HTTPS server would send.
 * handle({method, url: "/path?query", headers (lower-case), body: Buffer})
 *   → {status, headers, body: Buffer}
 */
export function createTestApi({ stateFile } = {}) {
  let state = freshState();
  if (stateFile) {
    try {
      state = { ...freshState(), ...JSON.parse(readFileSync(stateFile, "utf8")) };
    } catch {
      // No state yet.
    }
  }
  const save = () => {
    if (!stateFile) return;
    writeFileSync(`${stateFile}.tmp`, JSON.stringify(state));
    renameSync(`${stateFile}.tmp`, stateFile);
  };

  function credentialOf(headers) {
    if (headers["x-api-key"] === API_KEY) return { kind: "apiKey", id: `key:${API_KEY}` };
    const m = /^Bearer (\S+)$/.exec(headers.authorization ?? "");
    if (m && state.accessTokens.includes(m[1])) return { kind: "bearer", id: `token:${m[1]}` };
    return null;
  }

  function issueCode(challenge, method) {
    const code = `code_${base64url(randomBytes(12))}`;
    state.codes[code] = { challenge, method: method || "S256" };
    return code;
  }

  function token(params) {
    switch (params.grant_type) {
      case "authorization_code": {
        const issued = state.codes[params.code];
        if (!issued) return json(400, { error: "invalid_grant" });
        delete state.codes[params.code]; // single use, even when the verifier is wrong
        const verifier = params.code_verifier ?? "";
        const expected = issued.method === "plain" ? verifier : base64url(createHash("sha256").update(verifier).digest());
        if (!verifier || expected !== issued.challenge) return json(400, { error: "invalid_grant", error_description: "PKCE verification failed" });
        const access = `at_${base64url(randomBytes(16))}`;
        const refresh = `rt_${base64url(randomBytes(16))}`;
        state.accessTokens.push(access);
        state.refreshTokens[refresh] = { revoked: false };
        return json(200, { access_token: access, refresh_token: refresh, token_type: "Bearer", expires_in: 3600, scope: "read" });
      }
      case "refresh_token": {
        const entry = state.refreshTokens[params.refresh_token];
        if (!entry || entry.revoked) return json(400, { error: "invalid_grant" });
        const access = `at_${base64url(randomBytes(16))}`;
        state.accessTokens.push(access);
        return json(200, { access_token: access, refresh_token: params.refresh_token, token_type: "Bearer", expires_in: 3600, scope: "read" });
      }
      case undefined:
        return json(400, { error: "invalid_request" });
      default:
        return json(400, { error: "unsupported_grant_type" });
    }
  }

  function items(query) {
    const limit = query.has("limit") ? Number(query.get("limit")) : 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 500) return json(400, { error: "limit must be 1..500" });
    let after = 0;
    const cursor = query.get("cursor");
    if (cursor) {
      const m = /^c(\d+)$/.exec(cursor);
      if (!m || Number(m[1]) > ITEM_COUNT) return json(400, { error: "unknown cursor" });
      after = Number(m[1]);
    }
    const data = [];
    for (let id = after + 1; id <= Math.min(ITEM_COUNT, after + limit); id++) {
      data.push({ id, name: `Item ${id}`, createdAt: new Date(Date.UTC(2026, 0, 1) + id * 60_000).toISOString() });
    }
    const next = data.length > 0 ? `c${data[data.length - 1].id}` : null;
    return json(200, { data, meta: { next_cursor: next } });
  }

  function users(query) {
    state.usersRequests += 1;
    const version = query.has("version") ? Number(query.get("version")) : state.usersRequests;
    const count = version >= 2 ? USER_COUNT + 1 : USER_COUNT;
    const data = [];
    for (let id = 1; id <= count; id++) {
      const changed = id % 5 === 0;
      data.push({ id, name: changed ? `User ${id} v${version}` : `User ${id}`, email: `user${id}@example.test`, version: changed ? version : 1 });
    }
    return json(200, { data });
  }

  function catalog(query) {
    const page = query.has("page") ? Number(query.get("page")) : 1;
    if (!Number.isInteger(page) || page < 1) return json(400, { error: "page must be >= 1" });
    if (page === 1) state.catalogFirstPages += 1;
    const version = Math.max(1, state.catalogFirstPages);
    const products = [];
    for (let n = 1; n <= PRODUCT_COUNT; n++) {
      if (version >= 2 && n === 7) continue;
      products.push({ sku: `sku-${n}`, title: version >= 2 && n === 3 ? "Product 3 (renamed)" : `Product ${n}` });
    }
    const data = products.slice((page - 1) * PRODUCTS_PER_PAGE, page * PRODUCTS_PER_PAGE);
    return json(200, { data, page });
  }

  function handle({ method, url, headers, body = Buffer.alloc(0) }) {
    const parsed = new URL(url, "https://test-api.invalid");
    const path = parsed.pathname;
    const query = parsed.searchParams;
    if (!path.startsWith("/test/")) state.requests.push({ method, path: path + parsed.search, headers: { ...headers } });
    try {
      return route(method, path, query, headers, body);
    } finally {
      save();
    }
  }

  function route(method, path, query, headers, body) {
    if (path === "/test/requests" && method === "GET") return json(200, state.requests);
    if (path === "/test/reset" && method === "POST") {
      state = freshState();
      return json(200, { ok: true });
    }
    if (path === "/test/revoke" && method === "POST") {
      const target = parseBody(headers, body).refresh_token;
      for (const [refresh, entry] of Object.entries(state.refreshTokens)) {
        if (!target || refresh === target) entry.revoked = true;
      }
      return json(200, { ok: true });
    }
    if (path === "/test/expire" && method === "POST") {
      state.expiredTokens.push(...state.accessTokens);
      state.accessTokens = [];
      return json(200, { ok: true });
    }
    if (path === "/oauth/authorize" && method === "GET") {
      const redirect = query.get("redirect_uri");
      const challenge = query.get("code_challenge");
      if (!redirect || !challenge || query.get("response_type") !== "code") return json(400, { error: "invalid_request" });
      const target = new URL(redirect);
      target.searchParams.set("code", issueCode(challenge, query.get("code_challenge_method")));
      if (query.has("state")) target.searchParams.set("state", query.get("state"));
      return { status: 302, headers: { location: target.href }, body: Buffer.alloc(0) };
    }
    if (path === "/oauth/test-issue-code" && (method === "GET" || method === "POST")) {
      const challenge = query.get("code_challenge");
      if (!challenge) return json(400, { error: "invalid_request", error_description: "code_challenge is required" });
      return json(200, { code: issueCode(challenge, query.get("code_challenge_method")) });
    }
    if (path === "/oauth/token") {
      if (method !== "POST") return json(405, { error: "method_not_allowed" });
      return token(parseBody(headers, body));
    }

    if (path === "/echo/credentials" && method === "GET") return echoCredentials(query, headers);
    if (!path.startsWith("/v1/")) return json(404, { error: "not_found" });
    const credential = credentialOf(headers);
    if (!credential) {
      const bearer = /^Bearer (\S+)$/.exec(headers.authorization ?? "");
      if (bearer && state.expiredTokens.includes(bearer[1])) {
        return json(401, { error: "invalid_token" }, { "www-authenticate": 'Bearer error="invalid_token"' });
      }
      return json(401, { error: "unauthorized" });
    }
    if (method !== "GET") return json(405, { error: "method_not_allowed" });
    switch (path) {
      case "/v1/me":
        return json(200, { id: "acct_1", name: "Test Account", auth: credential.kind });
      case "/v1/items":
        return items(query);
      case "/v1/users":
        return users(query);
      case "/v1/catalog":
        return catalog(query);
      case "/v1/ratelimited":
        if (!state.rateLimitedSeen.includes(credential.id)) {
          state.rateLimitedSeen.push(credential.id);
          return json(429, { error: "rate_limited" }, { "retry-after": "1" });
        }
        return json(200, { ok: true });
      default:
        return json(404, { error: "not_found" });
    }
  }

  return { handle };
}

function parseArgs(list) {
  const args = { host: "127.0.0.1", port: 0 };
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i].replace(/^--/, "");
    const value = list[i + 1];
    if (value === undefined) throw new Error(`--${name} needs a value`);
    if (name === "cert" || name === "key" || name === "host") args[name] = value;
    else if (name === "port") args.port = Number(value);
    else if (name === "state-file") args.stateFile = value;
    else throw new Error(`unknown argument --${name}`);
  }
  if (!args.cert || !args.key) throw new Error("--cert and --key are required");
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const api = createTestApi({ stateFile: args.stateFile });
  const server = createServer({ cert: readFileSync(args.cert), key: readFileSync(args.key) }, (req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      // Node lower-cases incoming header names; repeated ones are joined.
      const answer = api.handle({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks) });
      if (answer.chunk) {
        // Chunked transfer, one write per slice: an echoed secret is split across chunks.
        res.writeHead(answer.status, answer.headers);
        for (let at = 0; at < answer.body.length; at += answer.chunk) res.write(answer.body.subarray(at, at + answer.chunk));
        res.end();
        return;
      }
      res.writeHead(answer.status, { ...answer.headers, "content-length": answer.body.length });
      res.end(answer.body);
    });
  });
  server.listen(args.port, args.host, () => {
    const { port } = server.address();
    process.stdout.write(`${JSON.stringify({ host: args.host, port })}\n`);
  });
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.close(() => process.exit(0)));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
