// defineConnector: validates a connector definition once, up front, so a
// mistake shows up as a clear message at build (describe) time rather than as
// a strange failure in the middle of a sync run.

import { checkSchema } from "./schema.mjs";

const MODES = new Set(["append", "merge", "replace"]);
const OAUTH_HOOKS = new Set(["afterAuthorize"]);
const SYNC_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
// RFC 9110 token: what an HTTP header name may contain.
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

// Definitions made by defineConnector. A WeakSet in this shared module (and
// not a property) so package code cannot forge the mark.
const defined = new WeakSet();

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

// Errors thrown by defineConnector, so the runner can tell a definition
// mistake (reported as `bad_definition` with its message in the log) from any
// other error while importing the package.
const definitionErrors = new WeakSet();

function fail(message) {
  const error = new TypeError(`defineConnector: ${message}`);
  definitionErrors.add(error);
  throw error;
}

/** Whether `error` is a definition mistake reported by defineConnector. */
export function isDefinitionError(error) {
  return error !== null && typeof error === "object" && definitionErrors.has(error);
}

function onlyKeys(object, allowed, where) {
  for (const key of Object.keys(object)) {
    if (!allowed.includes(key)) fail(`${where} has an unknown field "${key}" (allowed: ${allowed.join(", ")})`);
  }
}

function httpsUrl(value, where) {
  let url;
  try {
    url = new URL(value);
  } catch {
    fail(`${where} must be an absolute https:// URL`);
  }
  if (url.protocol !== "https:") fail(`${where} must be an absolute https:// URL`);
  return url.href;
}

function checkAuth(auth) {
  if (!isPlainObject(auth)) fail("auth must be an object such as { type: \"bearer\" }");
  switch (auth.type) {
    case "apiKey": {
      onlyKeys(auth, ["type", "header", "query"], "auth");
      const placements = ["header", "query"].filter((k) => k in auth);
      if (placements.length !== 1) fail("an apiKey auth needs exactly one of header or query");
      const [where] = placements;
      if (typeof auth[where] !== "string" || !HEADER_NAME.test(auth[where])) fail(`auth.${where} must be a header or parameter name`);
      return { type: "apiKey", [where]: auth[where] };
    }
    case "bearer":
    case "basic":
      onlyKeys(auth, ["type"], "auth");
      return { type: auth.type };
    case "oauth2": {
      onlyKeys(auth, ["type", "authorizeUrl", "tokenUrl", "scopes", "pkce"], "auth");
      const scopes = auth.scopes ?? [];
      if (!Array.isArray(scopes) || !scopes.every((s) => typeof s === "string" && s.length > 0 && !/\s/.test(s))) {
        fail("auth.scopes must be an array of scope names");
      }
      if ("pkce" in auth && typeof auth.pkce !== "boolean") fail("auth.pkce must be a boolean");
      return {
        type: "oauth2",
        authorizeUrl: httpsUrl(auth.authorizeUrl, "auth.authorizeUrl"),
        tokenUrl: httpsUrl(auth.tokenUrl, "auth.tokenUrl"),
        scopes: [...scopes],
        pkce: auth.pkce ?? true,
      };
    }
    default:
      fail(`auth.type must be "apiKey", "bearer", "basic" or "oauth2", got ${JSON.stringify(auth.type)}`);
  }
}

function checkSyncs(syncs, hasWebhooks) {
  // A package that only receives webhooks may leave syncs out.
  if (syncs === undefined && hasWebhooks) return Object.freeze({});
  if (!isPlainObject(syncs) || Object.keys(syncs).length === 0) fail("syncs must be an object with at least one sync (or define webhooks)");
  const out = {};
  for (const [name, sync] of Object.entries(syncs)) {
    const where = `syncs.${name}`;
    if (!SYNC_NAME.test(name)) fail(`sync name "${name}" must start with a letter and use only letters, digits, _ and - (at most 64)`);
    if (!isPlainObject(sync)) fail(`${where} must be an object`);
    onlyKeys(sync, ["mode", "primaryKey", "run"], where);
    const primaryKey = checkModeAndKey(sync, where, "sync");
    if (typeof sync.run !== "function") fail(`${where}.run must be an async generator function`);
    out[name] = Object.freeze({ mode: sync.mode, primaryKey, run: sync.run });
  }
  return Object.freeze(out);
}

/** Checks one sync's or webhook's commit mode and primary key; returns the frozen key. */
function checkModeAndKey(entry, where, kind) {
  if (!MODES.has(entry.mode)) fail(`${where}.mode must be "append", "merge" or "replace"`);
  if (entry.mode === "merge") {
    // One field name, or several (a composite key) as a non-empty array.
    const fields = Array.isArray(entry.primaryKey) ? entry.primaryKey : [entry.primaryKey];
    const valid = fields.length > 0 && fields.every((f) => typeof f === "string" && f !== "") && new Set(fields).size === fields.length;
    if (!valid) fail(`${where} is a merge ${kind} and needs a primaryKey: a field name or an array of distinct field names`);
  } else if ("primaryKey" in entry) {
    // Rejected rather than ignored: an author could think it deduplicates.
    fail(`${where}.primaryKey only applies to merge ${kind}s`);
  }
  return Array.isArray(entry.primaryKey) ? Object.freeze([...entry.primaryKey]) : (entry.primaryKey ?? null);
}

function checkWebhooks(webhooks, syncs) {
  if (!isPlainObject(webhooks)) fail("webhooks must be an object of webhook handlers");
  const out = {};
  for (const [name, hook] of Object.entries(webhooks)) {
    const where = `webhooks.${name}`;
    if (!SYNC_NAME.test(name)) fail(`webhook name "${name}" must start with a letter and use only letters, digits, _ and - (at most 64)`);
    // Records are kept per sync or webhook name: one name cannot be both.
    if (Object.hasOwn(syncs, name)) fail(`${where} has the name of a sync; use another name`);
    if (!isPlainObject(hook)) fail(`${where} must be an object`);
    onlyKeys(hook, ["mode", "primaryKey", "handle"], where);
    const primaryKey = checkModeAndKey(hook, where, "webhook");
    if (typeof hook.handle !== "function") fail(`${where}.handle must be a function (ctx, delivery) returning { records } or yielding them`);
    out[name] = Object.freeze({ mode: hook.mode, primaryKey, handle: hook.handle });
  }
  return Object.freeze(out);
}

function deepFreeze(value) {
  if (value !== null && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * Validates a connector definition and returns it frozen. Throws a TypeError
 * that says what is wrong.
 */
export function defineConnector(definition) {
  if (isDefinition(definition)) return definition;
  if (!isPlainObject(definition)) fail("expects an object { auth, config, verify, oauth?, syncs, webhooks? }");
  onlyKeys(definition, ["auth", "config", "verify", "oauth", "syncs", "webhooks"], "the definition");

  const auth = checkAuth(definition.auth);

  const config = definition.config ?? { type: "object", properties: {} };
  try {
    checkSchema(config, "config");
  } catch (error) {
    fail(error.message);
  }
  if (config.type !== "object") fail("config must be a schema of type \"object\"");

  if (typeof definition.verify !== "function") fail("verify(ctx) is required: one small authenticated request that throws when access is wrong");

  let oauth = {};
  if (definition.oauth !== undefined) {
    if (auth.type !== "oauth2") fail("oauth hooks need auth.type \"oauth2\"");
    if (!isPlainObject(definition.oauth)) fail("oauth must be an object of hooks");
    for (const [name, hook] of Object.entries(definition.oauth)) {
      if (!OAUTH_HOOKS.has(name)) fail(`unknown oauth hook "${name}" (known: ${[...OAUTH_HOOKS].join(", ")})`);
      if (typeof hook !== "function") fail(`oauth.${name} must be a function`);
    }
    oauth = { ...definition.oauth };
  }

  const hasWebhooks = isPlainObject(definition.webhooks) && Object.keys(definition.webhooks).length > 0;
  const syncs = checkSyncs(definition.syncs, hasWebhooks);
  const webhooks = definition.webhooks === undefined ? Object.freeze({}) : checkWebhooks(definition.webhooks, syncs);

  const result = Object.freeze({
    auth: deepFreeze(auth),
    // A JSON copy, so later changes to the author's object change nothing.
    config: deepFreeze(JSON.parse(JSON.stringify(config))),
    verify: definition.verify,
    oauth: Object.freeze(oauth),
    syncs,
    webhooks,
  });
  defined.add(result);
  return result;
}

export function isDefinition(value) {
  return defined.has(value);
}

/** The static part of a definition: the `result` of a describe job. */
export function describeDefinition(definition) {
  return {
    auth: { ...definition.auth },
    config: definition.config,
    syncs: Object.entries(definition.syncs).map(([name, s]) => ({
      name,
      mode: s.mode,
      primaryKey: Array.isArray(s.primaryKey) ? [...s.primaryKey] : s.primaryKey,
    })),
    webhooks: Object.entries(definition.webhooks).map(([name, w]) => ({
      name,
      mode: w.mode,
      primaryKey: Array.isArray(w.primaryKey) ? [...w.primaryKey] : w.primaryKey,
    })),
    hasVerify: typeof definition.verify === "function",
    oauth: Object.keys(definition.oauth),
  };
}
