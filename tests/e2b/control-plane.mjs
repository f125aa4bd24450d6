#!/usr/bin/env node
// Drives sbxd's E2B control plane with the real `e2b` SDK (2.51.0), and the
// inngest SDK against the same sbxd, on the same sandboxes.
//
//   SBX_URL=http://127.0.0.1:8731 SBX_KEY=signkey-sbx-… node control-plane.mjs
//
// SBX_KEY is a tenant's key (`sbxd keys create`); both SDKs use it (with
// SBX_INNGEST_DEV=1, for a dev-mode sbxd, the inngest SDK sends none). Only the
// control plane is exercised: the SDK's Sandbox.create/connect make no envd
// request (contract §4), and envd (commands, files) is a later slice.
// Prints one line per step; exits 1 at the first failure after destroying
// what it created.

import { Sandbox, SandboxNotFoundError } from "e2b";
import { Inngest } from "inngest";

const url = process.env.SBX_URL;
const key = process.env.SBX_KEY;
if (!url || !key) {
  console.error("SBX_URL and SBX_KEY are required");
  process.exit(2);
}
const opts = { apiKey: key, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 180_000 };
const run = `run-${process.pid}-${Date.now()}`;
const created = [];

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`FAIL ${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
  }
  console.log(`ok ${what}`);
}

async function listAll(query, limit) {
  const pager = Sandbox.list({ ...opts, query, limit });
  const items = [];
  let pages = 0;
  while (pager.hasNext) {
    items.push(...(await pager.nextItems()));
    pages += 1;
    if (pages > 50) throw new Error("FAIL list: too many pages");
  }
  return { items, pages };
}

async function main() {
  // create: template base, metadata, envs, timeout.
  const a = await Sandbox.create("base", {
    ...opts,
    timeoutMs: 300_000,
    metadata: { run, name: "a", spaced: "v w&x=y" },
    envs: { FOO: "bar" },
  });
  created.push(a.sandboxId);
  check(typeof a.sandboxId === "string" && a.sandboxId.length > 0, "Sandbox.create returns an id");
  const b = await Sandbox.create("base", { ...opts, timeoutMs: 300_000, metadata: { run, name: "b" } });
  created.push(b.sandboxId);

  // getInfo
  const info = await a.getInfo();
  check(info.sandboxId === a.sandboxId, "getInfo: same id", info);
  check(info.templateId === "base", "getInfo: template base", info.templateId);
  check(info.state === "running", "getInfo: running", info.state);
  check(info.metadata.name === "a" && info.metadata.spaced === "v w&x=y", "getInfo: metadata", info.metadata);
  const left = info.endAt.getTime() - Date.now();
  check(left > 200_000 && left <= 301_000, "getInfo: endAt is the timeout away", left);
  check(info.cpuCount >= 1 && info.memoryMB >= 1024, "getInfo: shape", [info.cpuCount, info.memoryMB]);

  // list: metadata filter (special characters), paging one per page.
  const both = await listAll({ metadata: { run } }, 1);
  check(both.items.length === 2 && both.pages >= 2, "list: metadata filter, one per page", both.items.map((s) => s.sandboxId));
  const onlyA = await listAll({ metadata: { run, spaced: "v w&x=y" } });
  check(onlyA.items.length === 1 && onlyA.items[0].sandboxId === a.sandboxId, "list: metadata with spaces, & and =", onlyA.items);

  // setTimeout: shorter and longer.
  await a.setTimeout(60_000);
  const shorter = (await a.getInfo()).endAt.getTime() - Date.now();
  check(shorter > 30_000 && shorter <= 61_000, "setTimeout: end time moved", shorter);
  await Sandbox.setTimeout(a.sandboxId, 600_000, opts);

  // pause, then list by state, then connect resumes.
  check((await a.pause()) === true, "pause: true");
  check((await Sandbox.pause(a.sandboxId, opts)) === false, "pause again: false (409)");
  check((await a.getInfo()).state === "paused", "getInfo: paused");
  const paused = await listAll({ metadata: { run }, state: ["paused"] });
  check(paused.items.length === 1 && paused.items[0].sandboxId === a.sandboxId, "list: state paused", paused.items);
  const running = await listAll({ metadata: { run }, state: ["running"] });
  check(running.items.length === 1 && running.items[0].sandboxId === b.sandboxId, "list: state running", running.items);
  const again = await Sandbox.connect(a.sandboxId, { ...opts, timeoutMs: 120_000 });
  check(again.sandboxId === a.sandboxId, "connect: same sandbox");
  check((await again.getInfo()).state === "running", "connect: resumed");

  // metrics: after a busy loop, a sample shows CPU and memory in use (sbxd samples
  // every few seconds: polled until one appears, within a deadline).
  check(Array.isArray(await a.getMetrics()), "getMetrics: an array");
  const busy = await again.commands.run("while :; do :; done", { background: true });
  const since = Math.floor(Date.now() / 1000) - 1;
  let busySample;
  for (const deadline = Date.now() + 90_000; !busySample && Date.now() < deadline; ) {
    const ms = await a.getMetrics({ start: new Date(since * 1000) });
    busySample = ms.find((m) => m.cpuUsedPct > 0 && m.timestamp.getTime() >= since * 1000);
    if (!busySample) await new Promise((r) => setTimeout(r, 500));
  }
  check(busySample !== undefined, "getMetrics: a sample after the busy loop started");
  check(busySample.cpuUsedPct > 0 && busySample.memUsed > 0, "getMetrics: cpuUsedPct > 0 and memUsed > 0", busySample);
  check(
    busySample.cpuCount >= 1 && busySample.memTotal >= 1024 * 1024 * 1024 && busySample.diskUsed >= 0,
    "getMetrics: cpuCount, memTotal, diskUsed",
    busySample,
  );
  const none = await a.getMetrics({ start: new Date(Date.now() + 3_600_000) });
  check(Array.isArray(none) && none.length === 0, "getMetrics: start in the future selects none", none);
  await busy.kill();

  // Snapshots: create, boot a sandbox from one, list, fork, delete.
  const snap = await a.createSnapshot();
  check(typeof snap.snapshotId === "string" && snap.snapshotId.length > 0, "createSnapshot", snap);
  const fromSnap = await Sandbox.create(snap.snapshotId, { ...opts, timeoutMs: 120_000, metadata: { run, name: "c" } });
  created.push(fromSnap.sandboxId);
  check((await fromSnap.getInfo()).templateId === snap.snapshotId, "Sandbox.create(snapshotId) boots from it");
  const snaps = [];
  const snapPager = Sandbox.listSnapshots({ ...opts, sandboxId: a.sandboxId });
  while (snapPager.hasNext) snaps.push(...(await snapPager.nextItems()));
  check(snaps.length === 1 && snaps[0].snapshotId === snap.snapshotId, "listSnapshots by sandbox", snaps);
  const forks = await a.fork({ count: 1, timeoutMs: 120_000 });
  check(forks.length === 1 && !(forks[0] instanceof Error) && forks[0].sandboxId !== a.sandboxId, "fork", forks.map(String));
  created.push(forks[0].sandboxId);
  check((await forks[0].getInfo()).metadata.name === "a", "fork keeps metadata");
  check((await Sandbox.deleteSnapshot(snap.snapshotId, opts)) === true, "deleteSnapshot: true");
  check((await Sandbox.deleteSnapshot(snap.snapshotId, opts)) === false, "deleteSnapshot again: false");
  check((await fromSnap.kill()) === true && (await forks[0].kill()) === true, "kill the snapshot's sandboxes");

  // The inngest SDK on the same sbxd, same tenant, same sandboxes.
  // SBX_INNGEST_DEV=1: sbxd in dev mode, where the inngest SDK sends no key.
  const inngestAuth = process.env.SBX_INNGEST_DEV === "1" ? { isDev: true } : { signingKey: key, isDev: false };
  const inngest = new Inngest({ id: "e2b-mixed", baseUrl: url, ...inngestAuth }).sandboxes;
  const seen = await inngest.get(a.sandboxId);
  check(seen.id === a.sandboxId && seen.status === "RUNNING", "inngest SDK sees the E2B sandbox", { id: seen.id, status: seen.status });
  const other = await inngest.create({ name: `inngest-${run}`, vcpu: 1, memoryMb: 1024 });
  created.push(other.id);
  const viaE2b = await Sandbox.getInfo(other.id, opts);
  check(viaE2b.state === "running" && viaE2b.templateId === "base", "E2B SDK sees the inngest sandbox", viaE2b);

  // kill: true, then false (404); getInfo of a killed sandbox throws SandboxNotFoundError.
  check((await b.kill()) === true, "kill: true");
  check((await Sandbox.kill(b.sandboxId, opts)) === false, "kill again: false");
  let notFound = false;
  try {
    await Sandbox.getInfo(b.sandboxId, opts);
  } catch (e) {
    notFound = e instanceof SandboxNotFoundError;
  }
  check(notFound, "getInfo after kill: SandboxNotFoundError");
  check((await Sandbox.kill(other.id, opts)) === true, "E2B kill of the inngest sandbox");
  await a.kill();
  created.length = 0;
  console.log("e2b control plane: all steps passed");
}

try {
  await main();
} catch (e) {
  console.error(e?.stack ?? String(e));
  for (const id of created) {
    await Sandbox.kill(id, opts).catch(() => {});
  }
  process.exit(1);
}
