// The `ctx` object handed to verify, OAuth hooks and sync runs.
//
// Every HTTP request goes to the host as a `fetch` message of the job
// protocol (docs/connect/job-protocol.md); the broker on the host adds the
// credentials and answers with `fetch_result` or `fetch_error`. Nothing here
// opens a socket.
//
// The globals used below are captured when this module is first evaluated,
// which the runner does before it imports any package code: a package that
// replaces globalThis.Response or setTimeout does not change how ctx works.

import { Buffer } from "node:buffer";
import { FetchError, HttpError, SchemaError } from "./errors.mjs";
import { checkSchema, validate } from "./schema.mjs";

const NativeResponse = globalThis.Response;
const NativeHeaders = globalThis.Headers;
const NativeURL = globalThis.URL;
const NativeAbortSignal = globalThis.AbortSignal;
const nativeSetTimeout = globalThis.setTimeout;
const nativeClearTimeout = globalThis.clearTimeout;
const jsonParse = JSON.parse;
const bufferFrom = Buffer.from.bind(Buffer);
const dateParse = Date.parse;
const dateNow = Date.now;
const mathRandom = Math.random;
const perfNow = performance.now.bind(performance);

// A line of the protocol may not exceed 16 MiB; base64 grows a body by 4/3.
const MAX_REQUEST_BODY_BYTES = 12 * 1024 * 1024;
// Methods whose repetition has no extra effect (RFC 9110 9.2.2).
const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"]);
// Statuses that cannot carry a body in a WHATWG Response.
const NULL_BODY = new Set([101, 103, 204, 205, 304]);
// A base that never leaves this module: it lets URL do the work of joining
// query parameters and relative links onto a path such as "/v1/items".
const PATH_BASE = "https://sbx-origin.invalid";

const LEVELS = ["debug", "info", "warn", "error"];

/** Real time, used unless a test injects its own clock. */
export const realClock = {
  now: perfNow,
  random: mathRandom,
  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const onAbort = () => {
        nativeClearTimeout(timer);
        reject(signal.reason);
      };
      const timer = nativeSetTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  },
};

/** Resolves like `promise`, or rejects with the signal's reason as soon as it aborts. */
function untilAborted(promise, signal) {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** Milliseconds asked for by a Retry-After value (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(value, nowMs = dateNow()) {
  if (typeof value !== "string") return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const date = dateParse(text);
  if (Number.isNaN(date)) return null;
  return Math.max(0, date - nowMs);
}

/**
 * Whether an HTTP answer should be retried, following the rule documented in
 * sdk/README.md: idempotent methods on 429 and 5xx; others (POST, PATCH) only
 * on 429 or 503 that carry a Retry-After, the server's explicit "try later".
 */
function retryableStatus(method, status, retryAfterMs) {
  if (IDEMPOTENT.has(method)) return status === 429 || (status >= 500 && status <= 599);
  return (status === 429 || status === 503) && retryAfterMs !== null;
}

/** "/v1/items" or "https://…" as given; anything else is a mistake worth a clear error. */
function checkTarget(input) {
  const text = input instanceof NativeURL ? input.href : input;
  if (typeof text !== "string") throw new TypeError("ctx.fetch: expected a path starting with / or an https:// URL");
  if (text.startsWith("/") && !text.startsWith("//")) return text;
  let url;
  try {
    url = new NativeURL(text);
  } catch {
    throw new TypeError(`ctx.fetch: "${text}" is neither a path starting with / nor an absolute URL`);
  }
  if (url.protocol !== "https:") throw new TypeError(`ctx.fetch: only https:// URLs can be reached, not ${url.protocol}`);
  return url.href;
}

/** Resolves `ref` (a link, or "" for the target itself) against a path or an absolute URL. */
function resolveAgainst(target, ref) {
  const url = new NativeURL(ref, new NativeURL(target, PATH_BASE));
  return url.origin === PATH_BASE ? url.pathname + url.search : url.href;
}

/**
 * Sets query parameters on a path or URL, replacing same-named ones. Other
 * parameters are kept byte for byte (URLSearchParams would re-encode them,
 * e.g. %20 as +, which some APIs read differently).
 */
function withQuery(target, params) {
  const [withoutHash] = target.split("#");
  const mark = withoutHash.indexOf("?");
  const base = mark === -1 ? withoutHash : withoutHash.slice(0, mark);
  const nameOf = (part) => {
    const raw = part.split("=")[0];
    try {
      return decodeURIComponent(raw.replace(/\+/g, " "));
    } catch {
      return raw;
    }
  };
  const parts = mark === -1 ? [] : withoutHash.slice(mark + 1).split("&").filter((part) => part !== "" && !Object.hasOwn(params, nameOf(part)));
  for (const [name, value] of Object.entries(params)) parts.push(`${encodeURIComponent(name)}=${encodeURIComponent(String(value))}`);
  return `${base}?${parts.join("&")}`;
}

function headersToObject(init) {
  const out = {};
  for (const [name, value] of new NativeHeaders(init)) out[name] = value;
  return out;
}

function toResponse(answer, target, method) {
  const headers = new NativeHeaders();
  for (const [name, value] of Object.entries(answer.headers ?? {})) {
    try {
      headers.append(name, String(value));
    } catch {
      // A header a WHATWG Response cannot hold; drop it rather than fail the request.
    }
  }
  const body = NULL_BODY.has(answer.status) ? null : bufferFrom(answer.body ?? "", "base64");
  let response;
  try {
    response = new NativeResponse(body, { status: answer.status, headers });
  } catch {
    // Status outside 200..599: not something a Response can represent.
    throw new FetchError("bad_response", false, method, target);
  }
  // Response#url is a read-only getter returning ""; an own property shadows
  // it so authors (and Link pagination) know what was requested.
  Object.defineProperty(response, "url", { value: target, enumerable: true });
  return response;
}

function getPath(value, path) {
  if (path === undefined || path === "") return value;
  let current = value;
  for (const part of path.split(".")) {
    if (current === null || typeof current !== "object" || !Object.hasOwn(current, part)) return undefined;
    current = current[part];
  }
  return current;
}

/** Parses an RFC 8288 Link header and returns the target of rel="next", if any. */
export function nextLink(header) {
  if (!header) return null;
  const linkPattern = /<([^>]*)>((?:\s*;\s*[^;,]+)*)/g;
  for (const [, target, params] of header.matchAll(linkPattern)) {
    for (const param of params.split(";")) {
      const m = /^\s*rel\s*=\s*(?:"([^"]*)"|([^\s"]+))\s*$/i.exec(param);
      if (m && (m[1] ?? m[2]).toLowerCase().split(/\s+/).includes("next")) return target;
    }
  }
  return null;
}

// Schemas are checked once; this remembers which ones already passed.
const checkedSchemas = new WeakSet();

function checkWithSchema(schema, value, what) {
  if (schema === undefined || schema === null) return value;
  if (typeof schema.parse === "function") {
    // zod, valibot wrappers, or anything with a parse(value) that throws.
    try {
      return schema.parse(value);
    } catch (error) {
      const detail = error instanceof Error ? error.message : String(error);
      throw new SchemaError(`${what}: response does not match the schema: ${detail}`, [detail], { cause: error });
    }
  }
  if (!checkedSchemas.has(schema)) {
    checkSchema(schema, "schema");
    checkedSchemas.add(schema);
  }
  const issues = validate(schema, value);
  if (issues.length > 0) throw new SchemaError(`${what}: response does not match the schema: ${issues.join("; ")}`, issues);
  return value;
}

/**
 * Builds a ctx.
 *
 * transport.fetch({method, url, headers, body}) resolves to the host's
 *   `fetch_result` or `fetch_error` message;
 * transport.log(level, message) resolves once the message is handed to the channel;
 * abortAt is the clock time at which `signal` aborts (retries never wait past it);
 * retry is the job's `{maxAttempts, baseDelayMs, maxDelayMs, maxRetryAfterMs}`.
 */
export function createContext({ config, signal, abortAt, retry, transport, clock = realClock }) {
  const maxAttempts = Math.max(1, Math.floor(retry?.maxAttempts ?? 1));
  const baseDelayMs = Math.max(0, retry?.baseDelayMs ?? 0);
  const maxDelayMs = Math.max(0, retry?.maxDelayMs ?? 0);
  const maxRetryAfterMs = Math.max(0, retry?.maxRetryAfterMs ?? 0);

  // Full jitter (uniform in [0, min(max, base·2^(attempt-1))]): spreads the
  // retries of many runs hitting the same API instead of synchronising them.
  const backoff = (attempt) => clock.random() * Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
  const fitsBeforeDeadline = (delayMs) => clock.now() + delayMs < abortAt;

  async function fetch(input, init = {}) {
    const target = checkTarget(input);
    const method = String(init.method ?? "GET").toUpperCase();
    const headers = headersToObject(init.headers);
    let body = null;
    if (init.body !== undefined && init.body !== null) {
      if (method === "GET" || method === "HEAD") throw new TypeError(`ctx.fetch: a ${method} request cannot have a body`);
      // A Response serialises every BodyInit (string, bytes, URLSearchParams,
      // Blob, FormData, stream) and knows its content type; no socket involved.
      const serialised = new NativeResponse(init.body);
      const bytes = bufferFrom(await serialised.arrayBuffer());
      if (bytes.length > MAX_REQUEST_BODY_BYTES) throw new FetchError("request_too_large", false, method, target);
      const type = serialised.headers.get("content-type");
      if (type && !("content-type" in headers)) headers["content-type"] = type;
      body = bytes.toString("base64");
    }
    const requestSignal = init.signal ? NativeAbortSignal.any([signal, init.signal]) : signal;
    const retries = init.retry !== false;

    for (let attempt = 1; ; attempt++) {
      requestSignal.throwIfAborted();
      const answer = await untilAborted(transport.fetch({ method, url: target, headers: { ...headers }, body }), requestSignal);
      const last = !retries || attempt >= maxAttempts;

      if (answer.t === "fetch_error") {
        // No HTTP answer at all: the broker says whether trying again can help.
        // This is also the one case where a POST or PATCH is retried: the
        // request got no response (see README, "Retries").
        const error = new FetchError(answer.code, answer.retryable === true, method, target);
        if (last || !error.retryable) throw error;
        const delay = backoff(attempt);
        if (!fitsBeforeDeadline(delay)) throw error;
        await clock.sleep(delay, requestSignal);
        continue;
      }

      const response = toResponse(answer, target, method);
      const retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
      if (last || !retryableStatus(method, answer.status, retryAfterMs)) return response;
      const delay = retryAfterMs !== null ? Math.min(retryAfterMs, maxRetryAfterMs) : backoff(attempt);
      if (!fitsBeforeDeadline(delay)) return response;
      await clock.sleep(delay, requestSignal);
    }
  }

  async function json(path, schema, init = {}) {
    const method = String(init.method ?? "GET").toUpperCase();
    const headers = new NativeHeaders(init.headers);
    if (!headers.has("accept")) headers.set("accept", "application/json");
    const response = await fetch(path, { ...init, headers });
    if (!response.ok) throw new HttpError(response.status, method, response.url);
    const text = await response.text();
    let value;
    try {
      value = jsonParse(text);
    } catch {
      throw new SchemaError(`${method} ${response.url}: the response is not valid JSON`);
    }
    return checkWithSchema(schema, value, `${method} ${response.url}`);
  }

  function paginate(path, options = {}) {
    // Checked here, synchronously, so a wrong option throws where it is written.
    const { items, next, maxPages, schema, init } = options;
    if (items !== undefined && typeof items !== "string") throw new TypeError("ctx.paginate: items must be a dot path such as \"data\"");
    if (maxPages !== undefined && !(Number.isInteger(maxPages) && maxPages >= 1)) throw new TypeError("ctx.paginate: maxPages must be an integer >= 1");
    if (!next || typeof next !== "object") throw new TypeError("ctx.paginate: next must describe the pagination, e.g. { type: \"link\" }");
    let step;
    switch (next.type) {
      case "cursor": {
        if (typeof next.param !== "string" || typeof next.from !== "string") throw new TypeError("ctx.paginate: a cursor pagination needs param and from");
        let cursor = next.start ?? null;
        step = {
          url: (target) => (cursor === null ? target : withQuery(target, { [next.param]: cursor })),
          // Returns the cursor of the next page, or null when the listing ends.
          advance(body, page) {
            const value = getPath(body, next.from);
            if (value === undefined || value === null || value === "" || page.length === 0) return (cursor = null);
            if (value === cursor) throw new Error(`ctx.paginate: ${path} returned the same cursor again; stopping to avoid a loop`);
            return (cursor = value);
          },
        };
        break;
      }
      case "link": {
        let current = path;
        step = {
          url: () => current,
          advance(body, page, response) {
            const link = nextLink(response.headers.get("link"));
            if (link === null) return (current = null);
            const resolved = resolveAgainst(response.url, link);
            if (resolved === current) throw new Error(`ctx.paginate: ${path} links to itself as next; stopping to avoid a loop`);
            return (current = resolved);
          },
        };
        break;
      }
      case "page":
      case "offset": {
        const isPage = next.type === "page";
        const param = next.param ?? (isPage ? "page" : "offset");
        const stopWhenEmpty = next.stopWhenEmpty ?? true;
        if (!stopWhenEmpty && maxPages === undefined) throw new TypeError("ctx.paginate: stopWhenEmpty: false needs maxPages, or the listing never ends");
        let position = next.start ?? (isPage ? 1 : 0);
        const limitParam = next.limitParam ?? "limit";
        const limit = next.limit ?? 100;
        step = {
          url: (target) => withQuery(target, isPage ? { [param]: position } : { [param]: position, [limitParam]: limit }),
          advance(body, page) {
            if (stopWhenEmpty && page.length === 0) return null;
            position = isPage ? position + 1 : position + page.length;
            return position;
          },
        };
        break;
      }
      default:
        throw new TypeError("ctx.paginate: next.type must be \"cursor\", \"link\", \"page\" or \"offset\"");
    }

    return (async function* pages() {
      for (let fetched = 0; maxPages === undefined || fetched < maxPages; fetched++) {
        const target = step.url(path);
        const response = await fetch(target, { ...init, headers: { accept: "application/json", ...headersToObject(init?.headers) } });
        const method = String(init?.method ?? "GET").toUpperCase();
        if (!response.ok) throw new HttpError(response.status, method, target);
        let body;
        try {
          body = jsonParse(await response.text());
        } catch {
          throw new SchemaError(`${method} ${target}: the response is not valid JSON`);
        }
        body = checkWithSchema(schema, body, `${method} ${target}`);
        const found = getPath(body, items);
        if (!Array.isArray(found)) throw new SchemaError(`${method} ${target}: expected an array at "${items ?? "(the body)"}"`);
        const page = Array.from(found);
        const following = step.advance(body, page, response);
        // The value to resume from: pass it as next.start (cursor, page,
        // offset) or as the path (link) in a later run. Not enumerable, so a
        // page still serialises as a plain array.
        Object.defineProperty(page, "next", { value: following, enumerable: false });
        if (page.length > 0 || following !== null) yield page;
        if (following === null) return;
      }
    })();
  }

  const log = {};
  for (const level of LEVELS) {
    log[level] = (message, _fields) => {
      // Only the message text leaves the sandbox; fields are dropped on purpose
      // (see README, "Logging").
      let text;
      try {
        text = String(message);
      } catch {
        text = "[message could not be converted to text]";
      }
      return transport.log(level, text);
    };
  }

  return Object.freeze({
    config,
    signal,
    fetch,
    json,
    paginate,
    log: Object.freeze(log),
  });
}
