// Webhook handlers: defineConnector's checks and the runner's `webhook` job kind, with the
// real runner and the example package examples/connector-webhooks.

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";
import { defineConnector } from "../index.mjs";
import { describeDefinition } from "../lib/definition.mjs";
import { last, logs, records, runJob } from "./helpers.mjs";

const ENTRY = fileURLToPath(new URL("../../examples/connector-webhooks/index.mjs", import.meta.url));
const withoutAt = ({ at, ...rest }) => rest;

const base = () => ({ auth: { type: "bearer" }, async verify() {} });
const delivery = (body, id = "d-1") => ({
  id,
  receivedAt: "2026-01-01T00:00:00.000Z",
  headers: { "content-type": "application/json" },
  body: Buffer.from(body).toString("base64"),
});
const webhookJob = (name, body, id) => ({ job: { kind: "webhook", entry: ENTRY, sync: name, checkpoint: null, delivery: delivery(body, id) } });

describe("defineConnector webhooks", () => {
  test("a package may define only webhooks, and describe lists them", () => {
    const d = defineConnector({ ...base(), webhooks: { pushes: { mode: "merge", primaryKey: "id", handle() {} } } });
    const described = describeDefinition(d);
    assert.deepEqual(described.syncs, []);
    assert.deepEqual(described.webhooks, [{ name: "pushes", mode: "merge", primaryKey: "id" }]);
  });

  test("rejects a bad mode, a missing handle, a key outside merge and a name taken by a sync", () => {
    const hook = (h) => () => defineConnector({ ...base(), webhooks: { w: h } });
    assert.throws(hook({ mode: "upsert", handle() {} }), /webhooks\.w\.mode/);
    assert.throws(hook({ mode: "append" }), /webhooks\.w\.handle must be a function/);
    assert.throws(hook({ mode: "append", primaryKey: "id", handle() {} }), /only applies to merge webhooks/);
    assert.throws(hook({ mode: "merge", handle() {} }), /needs a primaryKey/);
    assert.throws(hook({ mode: "append", handle() {}, extra: 1 }), /unknown field "extra"/);
    assert.throws(
      () => defineConnector({ ...base(), syncs: { s: { mode: "append", async *run() {} } }, webhooks: { s: { mode: "append", handle() {} } } }),
      /has the name of a sync/,
    );
    assert.throws(() => defineConnector({ ...base() }), /syncs must be an object with at least one sync \(or define webhooks\)/);
  });
});

describe("webhook jobs", () => {
  test("a handler's returned records are sent, with the parsed JSON body and the delivery id", async () => {
    const run = await runJob(webhookJob("events", JSON.stringify({ events: [{ id: 1, a: "x" }, { id: 2 }] }), "d-42"));
    assert.deepEqual(withoutAt(last(run.messages)), { t: "done", result: null });
    assert.deepEqual(records(run.messages), [
      { id: 1, a: "x", deliveryId: "d-42", receivedAt: "2026-01-01T00:00:00.000Z" },
      { id: 2, deliveryId: "d-42", receivedAt: "2026-01-01T00:00:00.000Z" },
    ]);
  });

  test("a generator handler gets the raw body, bytes and headers; a non-JSON body has no json", async () => {
    const run = await runJob(webhookJob("raw", "not json ✓"));
    assert.deepEqual(withoutAt(last(run.messages)), { t: "done", result: null });
    assert.deepEqual(records(run.messages), [{ id: "d-1", body: "not json ✓", headers: { "content-type": "application/json" } }]);
    assert.deepEqual(logs(run.messages), [`delivery d-1: ${Buffer.byteLength("not json ✓")} bytes`]);
  });

  test("a handler that throws fails as the package's (threw), and sends no message text", async () => {
    const run = await runJob(webhookJob("broken", "{}"));
    assert.deepEqual(withoutAt(last(run.messages)), { t: "fail", category: "package", kind: "threw" });
    assert.ok(!JSON.stringify(run.messages).includes("SECRET-MESSAGE"));
  });

  test("an unknown webhook fails as no_such_webhook; a checkpoint is not a webhook batch", async () => {
    const unknown = await runJob(webhookJob("nope", "{}"));
    assert.deepEqual(withoutAt(last(unknown.messages)), { t: "fail", category: "package", kind: "no_such_webhook" });
  });

  test("a webhook job without a delivery is a protocol error of the host", async () => {
    const run = await runJob({ job: { kind: "webhook", entry: ENTRY, sync: "raw", delivery: null } });
    assert.deepEqual(withoutAt(last(run.messages)), { t: "fail", category: "platform", kind: "protocol" });
  });
});
