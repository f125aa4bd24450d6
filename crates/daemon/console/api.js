// The HTTP API as the console uses it: same origin, the session cookie, and the
// CSRF token on every unsafe request. Errors carry their code and request id.

let csrfToken = null;

/** Remembers the session's CSRF token (null in dev mode or when signed out). */
export function setCsrf(token) {
  csrfToken = token || null;
}

/** An error answered by sbxd: status, stable code, message and X-Request-Id. */
export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }
}

const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);

/** Sends a request; `body` may be an object (JSON), a Blob/File, or undefined. */
export async function request(method, path, body, opts = {}) {
  const headers = {};
  let payload;
  if (body instanceof Blob) {
    payload = body;
    headers["content-type"] = "application/octet-stream";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["content-type"] = "application/json";
  }
  if (!SAFE.has(method) && csrfToken) headers["x-csrf-token"] = csrfToken;
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: payload, credentials: "same-origin", signal: opts.signal });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "network_error", `cannot reach sbxd: ${e.message}`, null);
  }
  if (!resp.ok) throw await toError(resp);
  return resp;
}

async function toError(resp) {
  const requestId = resp.headers.get("x-request-id");
  let code = `http_${resp.status}`;
  let message = resp.statusText || "request failed";
  try {
    const body = await resp.json();
    const item = (body.errors || [])[0];
    if (item) {
      code = item.code;
      message = item.message;
    }
  } catch {
    // not JSON: keep the status
  }
  return new ApiError(resp.status, code, message, requestId);
}

/** A JSON call returning the envelope's `data` (null for 204), plus the status. */
export async function call(method, path, body, opts) {
  const resp = await request(method, path, body, opts);
  if (resp.status === 204) return { status: 204, data: null };
  const json = await resp.json();
  return { status: resp.status, data: json.data, page: json.page };
}

/** GET returning `data`. */
export async function get(path, opts) {
  return (await call("GET", path, undefined, opts)).data;
}

/** Reads an NDJSON stream, calling `onFrame` per parsed line, until EOF or abort. */
export async function ndjson(path, onFrame, signal) {
  await readNdjson(await request("GET", path, undefined, { signal }), onFrame);
}

/** Calls `onFrame` with each parsed line of an NDJSON answer until it ends. */
export async function readNdjson(resp, onFrame) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (line) onFrame(JSON.parse(line));
    }
  }
  if (buffered.trim()) onFrame(JSON.parse(buffered));
}

/** Decodes padded base64 into text (UTF-8, lossy). */
export function b64text(data) {
  if (!data) return "";
  const bin = atob(data);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}

/** Encodes a path segment or query value. */
export const q = encodeURIComponent;
