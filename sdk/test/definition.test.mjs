// defineConnector and the JSON Schema subset.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { defineConnector } from "../index.mjs";
import { describeDefinition, isDefinition } from "../lib/definition.mjs";
import { applyDefaults, checkSchema, validate } from "../lib/schema.mjs";

const minimal = () => ({
  auth: { type: "bearer" },
  config: { type: "object", properties: {} },
  async verify() {},
  syncs: { things: { mode: "append", async *run() {} } },
});

describe("defineConnector", () => {
  test("returns a frozen, marked definition", () => {
    const definition = defineConnector(minimal());
    assert.ok(Object.isFrozen(definition));
    assert.ok(Object.isFrozen(definition.syncs.things));
    assert.ok(Object.isFrozen(definition.auth));
    assert.ok(isDefinition(definition));
    assert.ok(!isDefinition({ ...definition }), "a copy is not a definition");
    assert.equal(defineConnector(definition), definition);
  });

  test("accepts every auth kind and normalises OAuth", () => {
    for (const auth of [{ type: "apiKey", header: "X-Api-Key" }, { type: "apiKey", query: "api_key" }, { type: "bearer" }, { type: "basic" }]) {
      assert.deepEqual(defineConnector({ ...minimal(), auth }).auth, auth);
    }
    const oauth = defineConnector({
      ...minimal(),
      auth: { type: "oauth2", authorizeUrl: "https://id.example/authorize", tokenUrl: "https://id.example/token", scopes: ["read", "write"] },
      oauth: { async afterAuthorize() {} },
    });
    assert.deepEqual(oauth.auth, { type: "oauth2", authorizeUrl: "https://id.example/authorize", tokenUrl: "https://id.example/token", scopes: ["read", "write"], pkce: true });
  });

  const rejects = [
    ["no auth", (d) => delete d.auth, /auth must be an object/],
    ["unknown auth type", (d) => (d.auth = { type: "magic" }), /auth.type must be/],
    ["apiKey in two places", (d) => (d.auth = { type: "apiKey", header: "X", query: "k" }), /exactly one of header or query/],
    ["apiKey nowhere", (d) => (d.auth = { type: "apiKey" }), /exactly one of header or query/],
    ["bearer with extras", (d) => (d.auth = { type: "bearer", token: "x" }), /unknown field "token"/],
    ["http OAuth URL", (d) => (d.auth = { type: "oauth2", authorizeUrl: "http://a/", tokenUrl: "https://a/t", scopes: [] }), /authorizeUrl must be an absolute https/],
    ["scope with a space", (d) => (d.auth = { type: "oauth2", authorizeUrl: "https://a/", tokenUrl: "https://a/t", scopes: ["a b"] }), /scopes/],
    ["oauth hooks without oauth2", (d) => (d.oauth = { afterAuthorize() {} }), /oauth hooks need/],
    ["unknown oauth hook", (d) => ((d.auth = { type: "oauth2", authorizeUrl: "https://a/", tokenUrl: "https://a/t" }), (d.oauth = { beforeAuthorize() {} })), /unknown oauth hook/],
    ["no verify", (d) => delete d.verify, /verify\(ctx\) is required/],
    ["no syncs", (d) => (d.syncs = {}), /at least one sync/],
    ["bad mode", (d) => (d.syncs.things.mode = "upsert"), /mode must be/],
    ["merge without key", (d) => (d.syncs.things.mode = "merge"), /needs a primaryKey/],
    ["key on append", (d) => (d.syncs.things.primaryKey = "id"), /only applies to merge/],
    ["empty composite key", (d) => Object.assign(d.syncs.things, { mode: "merge", primaryKey: [] }), /needs a primaryKey/],
    ["repeated key field", (d) => Object.assign(d.syncs.things, { mode: "merge", primaryKey: ["a", "a"] }), /distinct field names/],
    ["no run", (d) => delete d.syncs.things.run, /run must be/],
    ["bad sync name", (d) => (d.syncs = { "9lives": d.syncs.things }), /must start with a letter/],
    ["unknown top-level field", (d) => (d.name = "x"), /unknown field "name"/],
    ["config not an object schema", (d) => (d.config = { type: "string" }), /type "object"/],
    ["unsupported config keyword", (d) => (d.config = { type: "object", anyOf: [] }), /unsupported keyword "anyOf"/],
  ];
  for (const [name, change, message] of rejects) {
    test(`rejects: ${name}`, () => {
      const definition = minimal();
      change(definition);
      assert.throws(() => defineConnector(definition), (e) => e instanceof TypeError && message.test(e.message));
    });
  }

  test("describe gives the static part only", () => {
    const definition = defineConnector({
      ...minimal(),
      syncs: {
        a: { mode: "merge", primaryKey: "id", run: async function* () {} },
        b: { mode: "replace", run: async function* () {} },
        c: { mode: "merge", primaryKey: ["org", "id"], run: async function* () {} },
      },
    });
    assert.deepEqual(describeDefinition(definition), {
      auth: { type: "bearer" },
      config: { type: "object", properties: {} },
      syncs: [
        { name: "a", mode: "merge", primaryKey: "id" },
        { name: "b", mode: "replace", primaryKey: null },
        { name: "c", mode: "merge", primaryKey: ["org", "id"] },
      ],
      webhooks: [],
      hasVerify: true,
      oauth: [],
    });
  });
});

describe("JSON Schema subset", () => {
  const config = {
    type: "object",
    additionalProperties: false,
    required: ["name"],
    properties: {
      name: { type: "string", minLength: 2, maxLength: 5, pattern: "^[a-z]+$" },
      size: { type: "integer", minimum: 1, maximum: 500, default: 100 },
      ratio: { type: "number" },
      on: { type: "boolean", default: false },
      color: { enum: ["red", "blue"] },
      tags: { type: "array", items: { type: "string" } },
      nested: { type: "object", properties: { deep: { type: "string", default: "d" } } },
      maybe: { type: ["string", "null"] },
    },
  };

  test("a valid value has no issues", () => {
    checkSchema(config);
    assert.deepEqual(validate(config, { name: "abc", size: 5, ratio: 0.5, on: true, color: "red", tags: ["a"], nested: {}, maybe: null }), []);
  });

  test("every keyword is enforced", () => {
    assert.deepEqual(validate(config, { size: 0, ratio: "x", color: "green", tags: [1], extra: 1, name: "Ab" }), [
      "$: missing required property \"name\"".replace("$: missing", "$: missing"),
      "$.size: must be >= 1",
      "$.ratio: expected number, got string",
      "$.color: must be one of [\"red\",\"blue\"]",
      "$.tags[0]: expected string, got integer",
      "$: unexpected property \"extra\"",
      "$.name: must match /^[a-z]+$/",
    ].filter((m) => !m.includes("missing")));
    assert.deepEqual(validate(config, {}), ['$: missing required property "name"']);
    assert.deepEqual(validate(config, { name: "abcdef" }), ["$.name: must be at most 5 characters"]);
    assert.deepEqual(validate(config, { name: "a" }), ["$.name: must be at least 2 characters"]);
    assert.deepEqual(validate(config, { name: "ab", size: 501 }), ["$.size: must be <= 500"]);
    assert.deepEqual(validate(config, { name: "ab", size: 1.5 }), ["$.size: expected integer, got number"]);
    assert.deepEqual(validate(config, []), ["$: expected object, got array"]);
  });

  test("malformed schemas are rejected", () => {
    assert.throws(() => checkSchema({ type: "date" }), /type must be one of/);
    assert.throws(() => checkSchema({ type: "string", pattern: "(" }), /not a valid regular expression/);
    assert.throws(() => checkSchema({ type: "integer", default: "x" }), /default does not match/);
    assert.throws(() => checkSchema({ type: "object", additionalProperties: {} }), /must be a boolean/);
    assert.throws(() => checkSchema({ enum: [] }), /enum must be a non-empty array/);
    assert.throws(() => checkSchema({ type: "string", minLength: -1 }), /minLength/);
  });

  test("defaults fill missing properties, recursively, without touching the input", () => {
    const input = { name: "ab", nested: {} };
    assert.deepEqual(applyDefaults(config, input), { name: "ab", size: 100, on: false, nested: { deep: "d" } });
    assert.deepEqual(input, { name: "ab", nested: {} });
  });
});
