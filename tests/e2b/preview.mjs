#!/usr/bin/env node
// Preview URLs with the real `e2b` SDK: `sandbox.getHost(port)` over HTTPS
// (sbxd terminating TLS with the test's own CA) reaches `python3 -m
// http.server` and a WebSocket echo server inside the sandbox; a port with
// nothing listening is 502; `allowPublicTraffic: false` needs the
// sandbox's `trafficAccessToken` in `e2b-traffic-access-token`.
//
//   SBX_URL=https://localhost:PORT SBX_KEY=signkey-… SBX_CA=ca.pem \
//   NODE_EXTRA_CA_CERTS=ca.pem SBX_WS_ECHO=ws_echo.py node preview.mjs
//
// sbxd runs with `--e2b-domain sbx.test`; `*.sbx.test` is resolved to
// 127.0.0.1 by this script (undici `connect.lookup`), and the port is
// SBX_URL's (in production sbxd or its proxy listens on 443, and the URL is
// just `https://${sandbox.getHost(port)}`). Prints `ok   <step>` per step
// and `all steps passed`; at the first failure `FAIL <step>: …`, exit 1.

import { Sandbox } from "e2b";
import { check, eq, report, step } from "./steps.mjs";
import { Agent, fetch, WebSocket } from "undici";
import { createHash } from "node:crypto";
import dns from "node:dns";
import fs from "node:fs";

const url = process.env.SBX_URL;
const key = process.env.SBX_KEY;
if (!url || !key || !process.env.SBX_CA || !process.env.SBX_WS_ECHO) {
  console.error("SBX_URL, SBX_KEY, SBX_CA and SBX_WS_ECHO are required");
  process.exit(2);
}
const port = new URL(url).port;
const opts = { apiKey: key, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 180_000 };

// *.sbx.test is this machine; everything else resolves as usual.
function lookup(hostname, options, cb) {
  if (hostname.endsWith(".sbx.test")) {
    if (options?.all) return cb(null, [{ address: "127.0.0.1", family: 4 }]);
    return cb(null, "127.0.0.1", 4);
  }
  return dns.lookup(hostname, options, cb);
}
const dispatcher = new Agent({ connect: { lookup, ca: fs.readFileSync(process.env.SBX_CA) } });


/** The preview URL of `path` on `p`, as a browser would use it. */
const previewUrl = (sbx, p, path = "/") => `https://${sbx.getHost(p)}:${port}${path}`;

const get = (sbx, p, path, headers = {}) => fetch(previewUrl(sbx, p, path), { dispatcher, headers });

/** Polls until the server on `p` answers (anything but 502) or 30 s pass. */
async function listening(sbx, p, headers = {}) {
  const end = Date.now() + 30_000;
  for (;;) {
    const r = await get(sbx, p, "/", headers);
    await r.arrayBuffer();
    if (r.status !== 502) return;
    if (Date.now() > end) throw new Error(`port ${p} never opened`);
    await new Promise((res) => setTimeout(res, 200));
  }
}

const made = [];
try {
  let sbx;
  await step("create (public preview URLs by default)", async () => {
    sbx = await Sandbox.create("base", opts);
    made.push(sbx);
    eq(sbx.trafficAccessToken, undefined, "trafficAccessToken");
    eq(sbx.getHost(8000), `8000-${sbx.sandboxId}.sbx.test`, "getHost");
  });

  await step("python3 -m http.server through getHost over HTTPS", async () => {
    await sbx.files.write("/home/user/www/hello.txt", "hello from the sandbox\n");
    await sbx.commands.run("head -c 4194304 /dev/urandom > /home/user/www/big.bin");
    await sbx.commands.run("python3 -m http.server 8000", { background: true, cwd: "/home/user/www" });
    await listening(sbx, 8000);
    const r = await get(sbx, 8000, "/hello.txt");
    eq(r.status, 200, "status");
    eq(await r.text(), "hello from the sandbox\n", "body");
  });

  await step("a 4 MiB download arrives intact", async () => {
    const r = await get(sbx, 8000, "/big.bin");
    eq(r.status, 200, "status");
    const body = Buffer.from(await r.arrayBuffer());
    eq(body.length, 4 << 20, "length");
    const inside = await sbx.commands.run("sha256sum /home/user/www/big.bin");
    eq(createHash("sha256").update(body).digest("hex"), inside.stdout.split(" ")[0], "sha256");
  });

  await step("WebSocket echo through getHost (wss)", async () => {
    await sbx.files.write("/home/user/ws_echo.py", fs.readFileSync(process.env.SBX_WS_ECHO, "utf8"));
    await sbx.commands.run("python3 /home/user/ws_echo.py 8765", { background: true });
    const wsUrl = `wss://${sbx.getHost(8765)}:${port}/echo`;
    const end = Date.now() + 30_000;
    let ws;
    for (;;) {
      ws = new WebSocket(wsUrl, { dispatcher });
      ws.binaryType = "arraybuffer";
      const opened = await new Promise((res) => {
        ws.onopen = () => res(true);
        ws.onerror = () => res(false);
      });
      if (opened) break;
      if (Date.now() > end) throw new Error("the WebSocket never opened");
      await new Promise((res) => setTimeout(res, 200));
    }
    const echoed = [];
    const got = new Promise((res, rej) => {
      ws.onmessage = (m) => {
        echoed.push(typeof m.data === "string" ? m.data : Buffer.from(m.data).toString("hex"));
        if (echoed.length === 2) res();
      };
      ws.onerror = (e) => rej(new Error(`ws error ${e?.message}`));
    });
    ws.send("hello over a preview URL");
    ws.send(new Uint8Array([1, 2, 3, 250]));
    await got;
    eq(echoed, ["hello over a preview URL", "010203fa"], "echoed");
    await new Promise((res) => {
      ws.onclose = () => res();
      ws.close(1000, "done");
    });
  });

  await step("a port with nothing listening: 502", async () => {
    const r = await get(sbx, 8001, "/");
    eq(r.status, 502, "status");
    check((await r.text()).includes("nothing listens on port 8001"), "message");
  });

  let locked;
  await step("allowPublicTraffic: false needs the traffic access token", async () => {
    locked = await Sandbox.create("base", { ...opts, network: { allowPublicTraffic: false } });
    made.push(locked);
    check(typeof locked.trafficAccessToken === "string" && locked.trafficAccessToken.length > 0, "trafficAccessToken", locked.trafficAccessToken);
    await locked.commands.run("python3 -m http.server 8000", { background: true, cwd: "/tmp" });
    const token = { "e2b-traffic-access-token": locked.trafficAccessToken };
    await listening(locked, 8000, token);
    const none = await get(locked, 8000, "/");
    eq(none.status, 401, "without the token");
    await none.arrayBuffer();
    const wrong = await get(locked, 8000, "/", { "e2b-traffic-access-token": "0".repeat(64) });
    eq(wrong.status, 403, "with a wrong token");
    await wrong.arrayBuffer();
    const ok = await get(locked, 8000, "/", token);
    eq(ok.status, 200, "with the token");
    await ok.arrayBuffer();
  });

  await step("kill", async () => {
    for (const s of made.splice(0)) eq(await s.kill(), true, "kill");
  });
  console.log("e2b preview (js): all steps passed");
  await dispatcher.close();
} catch (e) {
  report(e);
  for (const s of made) await s.kill().catch(() => {});
  process.exit(1);
}
