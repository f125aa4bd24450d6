// Test Connect package for webhook connections (crates/daemon/tests/connect_webhooks.rs and
// sdk/test/webhooks.test.mjs). A sender POSTs JSON to the connection's delivery URL; each
// handler turns one delivery into records.

import { defineConnector } from "@sbx/connect";

export default defineConnector({
  auth: { type: "apiKey", header: "X-Api-Key" },

  async verify(ctx) {
    await ctx.json("/v1/me");
  },

  webhooks: {
    // `{ "events": [{ "id": ..., ... }] }` → one record per event, upserted by id.
    events: {
      mode: "merge",
      primaryKey: "id",
      handle(ctx, delivery) {
        const events = delivery.json?.events ?? [];
        return {
          records: events.map((e) => ({ ...e, deliveryId: delivery.id, receivedAt: delivery.receivedAt })),
        };
      },
    },

    // Every delivery becomes one record with its raw body and the headers passed on.
    raw: {
      mode: "append",
      async *handle(ctx, delivery) {
        await ctx.log.info(`delivery ${delivery.id}: ${delivery.bytes.length} bytes`);
        yield { records: [{ id: delivery.id, body: delivery.body, headers: delivery.headers }] };
      },
    },

    // Throws with a message that must never reach the delivery or the run.
    broken: {
      mode: "append",
      handle(ctx, delivery) {
        throw new Error(`handler exploded on SECRET-MESSAGE-${delivery.id}`);
      },
    },
  },
});
