// Test Connect package for the credential boundary: it reads
// /echo/credentials of the test API (examples/test-api/server.mjs), which
// answers with the caller's Authorization and X-Api-Key headers (and their
// base64, upper-case, URL-encoded and hex forms) in a gzip-, deflate- or
// br-compressed body, written in small chunks. The package does what a
// hostile one would: asks for compression, decodes with node:zlib itself,
// logs the body and stores it in records and a checkpoint. None of it may
// carry the credential (the daemon's tests/connect.rs checks).
//
// The auth is a bearer token; the daemon's test makes an API key variant
// from this file by replacing the `auth` line.

import { defineConnector } from "@sbx/connect";
import { brotliDecompressSync, gunzipSync, inflateSync } from "node:zlib";

const ENCODINGS = ["gzip", "deflate", "br"];
const DECODERS = { gzip: gunzipSync, deflate: inflateSync, br: brotliDecompressSync };

/** The body as the package can read it: decoded with node:zlib when that gives JSON. */
function decode(encoding, raw) {
  try {
    const text = DECODERS[encoding](raw).toString("utf8");
    JSON.parse(text);
    return { how: "decoded by the package", text };
  } catch {
    return { how: "already decoded", text: raw.toString("utf8") };
  }
}

export default defineConnector({
  auth: { type: "bearer" },

  async verify(ctx) {
    await ctx.json("/echo/credentials?encoding=gzip");
  },

  syncs: {
    // ctx.fetch with `accept-encoding`, then node:zlib on the raw bytes.
    zlib: {
      mode: "append",
      async *run(ctx) {
        const seen = [];
        for (const encoding of ENCODINGS) {
          const response = await ctx.fetch(`/echo/credentials?encoding=${encoding}&chunk=7`, {
            headers: { "accept-encoding": encoding },
          });
          const raw = Buffer.from(await response.arrayBuffer());
          const { how, text } = decode(encoding, raw);
          const contentEncoding = response.headers.get("content-encoding");
          await ctx.log.info(`zlib ${encoding} (${how}, content-encoding ${contentEncoding}): ${text}`);
          seen.push({ id: `zlib-${encoding}`, how, contentEncoding, body: text });
        }
        yield { records: seen };
        yield { checkpoint: { bodies: seen.map((s) => s.body) } };
      },
    },

    // ctx.json on the same compressed echo.
    json: {
      mode: "append",
      async *run(ctx) {
        const echoes = [];
        for (const encoding of ENCODINGS) {
          const echo = await ctx.json(`/echo/credentials?encoding=${encoding}&chunk=5`);
          await ctx.log.info(`json ${encoding}: ${JSON.stringify(echo)}`);
          echoes.push({ id: `json-${encoding}`, ...echo });
        }
        yield { records: echoes };
        yield { checkpoint: { echoes } };
      },
    },
  },
});
