#!/usr/bin/env node
// E2B rows of ./scripts/bench: the real `e2b` SDK against the real inngest
// SDK, on the same sbxd in the same run, same shape (2 vCPU / 2048 MiB).
//
//   SBX_URL=http://127.0.0.1:8731 SBX_KEY=dev node bench.mjs [iterations]
//
// Rows: create → first command done (a fresh sandbox each time, `true`),
// and the round trip of one `true` in a running sandbox (commands.run through
// envd vs the inngest SDK's commands.run through `/v2/.../exec`). Prints a
// markdown table; sandboxes are destroyed as it goes.
//
// With SBX_E2B_DOMAIN (sbxd's --e2b-domain) it also prints the preview-URL
// rows: small GETs and a 64 MiB download from `python3 -m http.server` in a
// sandbox through `{port}-{id}.{domain}` (sent to SBX_URL with that Host),
// against the same done by curl inside the sandbox on 127.0.0.1, same run.

import { Sandbox } from "e2b";
import { Inngest } from "inngest";
import { request } from "undici";

const url = process.env.SBX_URL;
const key = process.env.SBX_KEY ?? "dev";
if (!url) {
  console.error("SBX_URL is required");
  process.exit(2);
}
const iterations = Number(process.argv[2] ?? process.env.SBX_BENCH_ITERATIONS ?? 10);
const e2bOpts = { apiKey: key, apiUrl: url, sandboxUrl: url };
const inngest = new Inngest({ id: "sbx-bench", baseUrl: url, isDev: true });

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function e2bFirst() {
  const t0 = process.hrtime.bigint();
  const sbx = await Sandbox.create("base", e2bOpts);
  await sbx.commands.run("true");
  const t = ms(t0);
  await sbx.kill();
  return t;
}

async function inngestFirst(i) {
  const t0 = process.hrtime.bigint();
  let s = await inngest.sandboxes.create({
    name: `bench-first-${Date.now().toString(36)}-${i}`,
    vcpu: 2,
    memoryMb: 2048,
    runningTimeout: false,
  });
  s = await s.waitUntilRunning({ timeout: "2m" });
  await s.commands.run(["true"]);
  const t = ms(t0);
  await s.destroy();
  return t;
}

async function rows() {
  const out = [];
  const first = { e2b: [], inngest: [] };
  for (let i = 0; i < iterations; i++) {
    first.e2b.push(await e2bFirst());
    first.inngest.push(await inngestFirst(i));
  }
  out.push(["create → first command", first.e2b, first.inngest]);

  const sbx = await Sandbox.create("base", e2bOpts);
  let s = await inngest.sandboxes.create({
    name: `bench-rt-${Date.now().toString(36)}`,
    vcpu: 2,
    memoryMb: 2048,
    runningTimeout: false,
  });
  s = await s.waitUntilRunning({ timeout: "2m" });
  const rt = { e2b: [], inngest: [], inngestLogin: [] };
  const n = iterations * 5;
  // commands.run always wraps the command as `/bin/bash -l -c CMD` (the
  // SDK does it): the third series runs that same argv through /v2 exec.
  const login = ["/bin/bash", "-l", "-c", "true"];
  // Warm every path once (connections, the agent's first spawn).
  await sbx.commands.run("true");
  await s.commands.run(["true"]);
  await s.commands.run(login);
  for (let i = 0; i < n; i++) {
    let t0 = process.hrtime.bigint();
    await sbx.commands.run("true");
    rt.e2b.push(ms(t0));
    t0 = process.hrtime.bigint();
    await s.commands.run(["true"]);
    rt.inngest.push(ms(t0));
    t0 = process.hrtime.bigint();
    await s.commands.run(login);
    rt.inngestLogin.push(ms(t0));
  }
  out.push(["`true` round trip, running sandbox (e2b: bash -l -c true; inngest: argv true)", rt.e2b, rt.inngest]);
  out.push(["same command both ways: bash -l -c true", rt.e2b, rt.inngestLogin]);
  await sbx.kill();
  await s.destroy();
  return out;
}

/** Preview-URL rows: [name, through sbxd, inside the sandbox, unit]. */
async function previewRows(domain) {
  const sbx = await Sandbox.create("base", e2bOpts);
  try {
    await sbx.commands.run(
      "mkdir -p /tmp/www && echo small > /tmp/www/small.txt && head -c 67108864 /dev/zero > /tmp/www/big.bin",
    );
    await sbx.commands.run("python3 -m http.server 8000", { background: true, cwd: "/tmp/www" });
    const host = `8000-${sbx.sandboxId}.${domain}`;
    const fetchVia = async (path) => {
      const r = await request(`${url}${path}`, { headers: { host } });
      let n = 0;
      for await (const chunk of r.body) n += chunk.length;
      return [r.statusCode, n];
    };
    for (let i = 0; ; i++) {
      if ((await fetchVia("/small.txt"))[0] === 200) break;
      if (i > 150) throw new Error("the preview server never answered");
      await new Promise((res) => setTimeout(res, 200));
    }
    const n = iterations * 5;
    const via = [];
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      await fetchVia("/small.txt");
      via.push(ms(t0));
    }
    const curl = "curl -s -o /dev/null -w '%{time_total} %{speed_download}\\n'";
    const inside = (
      await sbx.commands.run(`for i in $(seq ${n}); do ${curl} http://127.0.0.1:8000/small.txt; done`)
    ).stdout
      .trim()
      .split("\n")
      .map((l) => Number(l.split(" ")[0]) * 1000);
    const mbps = { via: [], inside: [] };
    for (let i = 0; i < 3; i++) {
      const t0 = process.hrtime.bigint();
      const [, bytes] = await fetchVia("/big.bin");
      mbps.via.push(bytes / 1e6 / (ms(t0) / 1000));
      const out = await sbx.commands.run(`${curl} http://127.0.0.1:8000/big.bin`);
      mbps.inside.push(Number(out.stdout.trim().split(" ")[1]) / 1e6);
    }
    return [
      [`small GET (n=${n})`, via, inside, "ms"],
      ["64 MiB download (n=3)", mbps.via, mbps.inside, "MB/s"],
    ];
  } finally {
    await sbx.kill();
  }
}

const table = await rows();
console.log(`| scenario | e2b SDK p50 | e2b SDK p90 | inngest SDK p50 | inngest SDK p90 | e2b / inngest (p50) |`);
console.log(`|---|---|---|---|---|---|`);
for (const [name, e, g] of table) {
  const f = (x) => `${x.toFixed(1)} ms`;
  console.log(
    `| ${name} (n=${e.length}) | ${f(pct(e, 50))} | ${f(pct(e, 90))} | ${f(pct(g, 50))} | ${f(pct(g, 90))} | ${(pct(e, 50) / pct(g, 50)).toFixed(2)}× |`,
  );
}

const domain = process.env.SBX_E2B_DOMAIN;
if (domain) {
  console.log("");
  console.log("| preview URL | through sbxd p50 | worst (p95 / min) | curl inside the sandbox p50 | worst (p95 / min) |");
  console.log("|---|---|---|---|---|");
  for (const [name, via, inside, unit] of await previewRows(domain)) {
    const f = (x) => `${x.toFixed(1)} ${unit}`;
    const hi = unit === "MB/s" ? 5 : 95;
    console.log(`| ${name} | ${f(pct(via, 50))} | ${f(pct(via, hi))} | ${f(pct(inside, 50))} | ${f(pct(inside, hi))} |`);
  }
}
