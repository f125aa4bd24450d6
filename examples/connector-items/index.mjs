// Example Connect package: reads items, users and a product catalog from the
// test API (examples/test-api/server.mjs). The syncs after `catalog` exist
// only so the platform's tests can exercise failures and limits.

import { FetchError, defineConnector } from "@sbx/connect";
import { setTimeout as sleep } from "node:timers/promises";

const Me = {
  type: "object",
  required: ["id"],
  properties: { id: { type: "string" }, name: { type: "string" } },
};

export default defineConnector({
  auth: { type: "apiKey", header: "X-Api-Key" },

  config: {
    type: "object",
    additionalProperties: false,
    properties: {
      pageSize: { type: "integer", minimum: 1, maximum: 500, default: 100, description: "Items per request" },
      maxPages: { type: "integer", minimum: 1, description: "Pages per run of the items sync; the next run continues" },
      probeUrl: { type: "string", pattern: "^https?://", description: "Only for the globalFetch test sync" },
      generateCount: {
        type: "integer",
        minimum: 1,
        maximum: 5000000,
        default: 1000,
        description: "Records the generate sync produces (benchmarks, console tests)",
      },
    },
  },

  // One small authenticated request that throws (HttpError 401) when the key is wrong.
  async verify(ctx) {
    await ctx.json("/v1/me", Me);
  },

  syncs: {
    items: {
      mode: "append",
      // Bounded: at most config.maxPages pages per run, then a checkpoint.
      async *run(ctx, checkpoint) {
        let cursor = checkpoint?.cursor ?? null;
        const pages = ctx.paginate(`/v1/items?limit=${ctx.config.pageSize}`, {
          items: "data",
          next: { type: "cursor", param: "cursor", from: "meta.next_cursor", start: cursor ?? undefined },
          maxPages: ctx.config.maxPages,
        });
        for await (const page of pages) {
          yield { records: page };
          // page.next is the cursor after this page (null at the very end).
          cursor = page.next ?? cursor;
        }
        yield { checkpoint: { cursor } };
      },
    },

    users: {
      mode: "merge",
      primaryKey: "id",
      async *run(ctx) {
        const body = await ctx.json("/v1/users", {
          type: "object",
          required: ["data"],
          properties: { data: { type: "array", items: { type: "object", required: ["id"] } } },
        });
        yield { records: body.data };
      },
    },

    catalog: {
      mode: "replace",
      // A replace run reads everything: it replaces the whole dataset.
      async *run(ctx) {
        for await (const page of ctx.paginate("/v1/catalog", { items: "data", next: { type: "page", param: "page", start: 1 } })) {
          yield { records: page };
        }
      },
    },

    // --- test syncs ------------------------------------------------------------

    explode: {
      mode: "append",
      async *run(ctx) {
        yield { records: [{ id: 1 }] };
        await ctx.log.error("explode: about to throw");
        throw new Error("explode: secret detail that must not reach the Runs tab");
      },
    },

    slow: {
      mode: "append",
      async *run(ctx) {
        ctx.signal.addEventListener("abort", () => {
          ctx.log.warn(`slow: signal aborted (${ctx.signal.reason?.name ?? "unknown"})`);
        });
        await ctx.log.info("slow: waiting");
        // Waits for the signal and nothing else; rejects with its reason.
        await sleep(24 * 3600 * 1000, undefined, { signal: ctx.signal });
      },
    },

    leak: {
      mode: "append",
      async *run(ctx) {
        await ctx.log.info(`env: ${JSON.stringify(process.env)}`);
        await ctx.log.info(`argv: ${JSON.stringify(process.argv)}`);
        await ctx.log.info(`ctx: ${JSON.stringify(ctx)}`);
        await ctx.log.info(`ctx keys: ${Object.keys(ctx).join(",")}`);
        const response = await ctx.fetch("/v1/me");
        await ctx.log.info(`response headers: ${JSON.stringify([...response.headers])}`);
        await ctx.log.info(`response body: ${await response.text()}`);
      },
    },

    bigLog: {
      mode: "append",
      async *run(ctx) {
        await ctx.log.info("x".repeat(5 * 1024));
        await ctx.log.info("bigLog: after the big message");
        await ctx.log.info("y".repeat(100 * 1024));
        await ctx.log.info("bigLog: after the huge message");
      },
    },

    hog: {
      mode: "append",
      async *run() {
        const hoard = [];
        for (;;) hoard.push(new Array(1 << 20).fill(hoard.length));
      },
    },

    foreign: {
      mode: "append",
      async *run(ctx) {
        try {
          const response = await ctx.fetch("https://other.example/");
          await ctx.log.error(`foreign: fetch was allowed (HTTP ${response.status})`);
        } catch (error) {
          await ctx.log.info(`foreign: refused: ${error instanceof FetchError ? error.code : "unexpected error"}`);
        }
      },
    },

    globalFetch: {
      mode: "append",
      async *run(ctx) {
        try {
          const response = await fetch(ctx.config.probeUrl ?? "https://example.com");
          await ctx.log.error(`global fetch succeeded: ${response.status}`);
        } catch (error) {
          const code = error?.cause?.code ?? error?.code ?? error?.name ?? "unknown";
          await ctx.log.info(`global fetch failed: ${code}`);
        }
      },
    },

    flood: {
      mode: "append",
      async *run(ctx) {
        yield { checkpoint: { padding: "p".repeat(2048) } };
        const record = (n) => ({ id: n, padding: "f".repeat(200) });
        for (let batch = 0; ; batch++) {
          ctx.signal.throwIfAborted();
          yield { records: Array.from({ length: 500 }, (_, i) => record(batch * 500 + i)) };
        }
      },
    },

    ratelimited: {
      mode: "append",
      async *run(ctx) {
        const body = await ctx.json("/v1/ratelimited");
        await ctx.log.info(`ratelimited: ${JSON.stringify(body)}`);
      },
    },

    // No network: config.generateCount small records in batches of 1,000
    // (the end-to-end records/s benchmark and the console's Run now test),
    // then a checkpoint counting the runs (the console's checkpoint view).
    generate: {
      mode: "append",
      async *run(ctx, checkpoint) {
        const total = ctx.config.generateCount;
        for (let start = 0; start < total; start += 1000) {
          const n = Math.min(1000, total - start);
          yield { records: Array.from({ length: n }, (_, i) => ({ id: start + i, v: "x" })) };
        }
        await ctx.log.info(`generated ${total} records`);
        yield { checkpoint: { runs: (checkpoint?.runs ?? 0) + 1, generated: total } };
      },
    },
  },
});
