// {{NAME}}: an sbx Connect package. Iterate with
//   sbx connect dev . --origin https://api.example.com --auth api-key --api-key KEY
// which builds it and runs `verify` and one sync against your sbxd, printing the
// logs and the records committed. The SDK's README describes every option.
//
// The platform provides "@sbx/connect" at run time: do not add it to package.json.
import { defineConnector } from "@sbx/connect";
import { itemsSync } from "./src/items.mjs";

export default defineConnector({
  // The platform sends the connection's key in this header; this code never sees it.
  auth: { type: "apiKey", header: "X-Api-Key" },

  // The connection's settings (a JSON Schema subset); defaults are filled in.
  config: {
    type: "object",
    additionalProperties: false,
    properties: {
      pageSize: { type: "integer", minimum: 1, maximum: 500, default: 100, description: "Items per request" },
    },
  },

  // The connection test: one small authenticated request that throws when access is wrong.
  async verify(ctx) {
    const me = await ctx.json("/v1/me");
    await ctx.log.info(`signed in as ${me.id}`);
  },

  syncs: {
    // Each run reads the items after the last committed checkpoint and appends them.
    items: { mode: "append", run: itemsSync },
  },
});
