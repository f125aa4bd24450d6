// Example Connect package with a dependency (ms), installed by the build from
// package-lock.json with install scripts off. Talks to examples/test-api.

import { defineConnector } from "@sbx/connect";
import ms from "ms";

export default defineConnector({
  auth: { type: "apiKey", header: "X-Api-Key" },
  config: { type: "object", properties: {} },
  async verify(ctx) {
    await ctx.json("/v1/me");
  },
  syncs: {
    items: {
      mode: "replace",
      async *run(ctx) {
        const started = Date.now();
        let count = 0;
        for await (const page of ctx.paginate("/v1/items?limit=100", { items: "data", next: { type: "cursor", param: "cursor", from: "meta.next_cursor" } })) {
          count += page.length;
          yield { records: page };
        }
        // The dependency at work: "Read 250 items in 12ms".
        await ctx.log.info(`Read ${count} items in ${ms(Date.now() - started)}`);
      },
    },
  },
});
