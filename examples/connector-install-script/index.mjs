// Example Connect package whose dependency, @scarf/scarf, declares a
// postinstall script (it would report the installation over the network).
// Builds run `npm ci --ignore-scripts`, so that script never runs; the package
// lock marks the dependency with "hasInstallScript": true, which is what the
// platform's build tests look for. This package does not import it.

import { defineConnector } from "@sbx/connect";

export default defineConnector({
  auth: { type: "apiKey", header: "X-Api-Key" },
  config: { type: "object", properties: {} },
  async verify(ctx) {
    await ctx.json("/v1/me");
  },
  syncs: {
    me: {
      mode: "replace",
      async *run(ctx) {
        yield { records: [await ctx.json("/v1/me")] };
      },
    },
  },
});
