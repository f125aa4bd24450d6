#!/usr/bin/env node
// The real `e2b` SDK against one node of an sbx cluster whose sandboxes run
// on another node: control plane and envd through node A, the sandbox on node
// B (the Rust test drains A so that placement puts the create on B).
//
//   SBX_URL=<node A> SBX_KEY=<tenant key> SBX_RUN=<metadata run> SBX_OTHER=<id> node cluster.mjs
//
// SBX_OTHER is a sandbox of the same tenant with metadata {run: SBX_RUN} on
// node A: the list through A must show both. Prints `sandbox <id>` once the
// sandbox exists, `ok   <step>` per step and `all steps passed` at the end.

import { FileNotFoundError, Sandbox } from "e2b";
import { check, report, step } from "./steps.mjs";

const url = process.env.SBX_URL;
const key = process.env.SBX_KEY;
const run = process.env.SBX_RUN;
const other = process.env.SBX_OTHER;
if (!url || !key || !run || !other) {
  console.error("SBX_URL, SBX_KEY, SBX_RUN and SBX_OTHER are required");
  process.exit(2);
}
const opts = { apiKey: key, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 180_000 };


async function counter(sbx) {
  return Number((await sbx.files.read("/tmp/counter")).trim());
}

/** Reads the counter until it is past `than` (it counts every 100 ms; the
 * file appears once the background loop has started). */
async function counterPast(sbx, than) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    let now = -1;
    try {
      now = await counter(sbx);
    } catch (e) {
      check(e instanceof FileNotFoundError && Date.now() < deadline, "reading the counter", e?.message);
    }
    if (now > than) return now;
    check(Date.now() < deadline, "the counter does not count", [than, now]);
    await new Promise((r) => setTimeout(r, 100));
  }
}

let sbx;
try {
  await step("create through node A", async () => {
    sbx = await Sandbox.create({ ...opts, metadata: { run, who: "b" }, timeoutMs: 300_000 });
    console.log(`sandbox ${sbx.sandboxId}`);
  });
  await step("getInfo through node A", async () => {
    const info = await sbx.getInfo();
    check(info.sandboxId === sbx.sandboxId && info.state === "running", "info", info);
    check(info.metadata.who === "b" && info.metadata.run === run, "metadata", info.metadata);
  });
  await step("list with a metadata filter shows both nodes' sandboxes", async () => {
    const pager = Sandbox.list({ ...opts, query: { metadata: { run } } });
    const items = [];
    while (pager.hasNext) items.push(...(await pager.nextItems()));
    const ids = items.map((s) => s.sandboxId).sort();
    check(JSON.stringify(ids) === JSON.stringify([sbx.sandboxId, other].sort()), "listed", ids);
    const mine = Sandbox.list({ ...opts, query: { metadata: { run, who: "b" } } });
    const only = await mine.nextItems();
    check(only.length === 1 && only[0].sandboxId === sbx.sandboxId, "filtered", only);
  });
  await step("commands.run streams its output", async () => {
    const chunks = [];
    const r = await sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo err >&2", {
      onStdout: (d) => chunks.push(d),
    });
    check(r.exitCode === 0 && r.stdout === "line1\nline2\nline3\n", "result", r);
    check(r.stderr === "err\n", "stderr", r.stderr);
    check(chunks.length >= 2, "streamed in several chunks", chunks);
    check(chunks.join("") === r.stdout, "chunks add up", chunks);
  });
  await step("files write and read (text, and 4 MiB of bytes)", async () => {
    await sbx.files.write("/home/user/cluster/a.txt", "through node A\n");
    check((await sbx.files.read("/home/user/cluster/a.txt")) === "through node A\n", "text");
    const big = new Uint8Array(4 << 20);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) & 0xff;
    await sbx.files.write("/home/user/cluster/big.bin", big.buffer);
    const back = await sbx.files.read("/home/user/cluster/big.bin", { format: "bytes" });
    check(back.length === big.length, "size", back.length);
    let same = true;
    for (let i = 0; i < big.length; i++) if (back[i] !== big[i]) { same = false; break; }
    check(same, "bytes");
    const sum = await sbx.commands.run("sha256sum /home/user/cluster/big.bin | cut -c1-16");
    check(sum.stdout.length === 17, "the file is in the sandbox", sum.stdout);
  });
  await step("setTimeout through node A", async () => {
    await sbx.setTimeout(60_000);
    const left = (await sbx.getInfo()).endAt.getTime() - Date.now();
    check(left > 30_000 && left <= 61_000, "end time moved", left);
    await Sandbox.setTimeout(sbx.sandboxId, 300_000, opts);
    const later = (await sbx.getInfo()).endAt.getTime() - Date.now();
    check(later > 200_000, "end time moved again", later);
  });
  let before;
  await step("pause and connect keep memory (a counter keeps counting)", async () => {
    await sbx.commands.run(
      "sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.1; done'",
      { background: true },
    );
    before = await counterPast(sbx, 3);
    check((await sbx.pause()) === true, "pause");
    check((await sbx.getInfo()).state === "paused", "paused");
    const again = await Sandbox.connect(sbx.sandboxId, { ...opts, timeoutMs: 120_000 });
    check((await again.getInfo()).state === "running", "resumed");
    const after = await counter(again);
    check(after >= before, "the counter kept its value", [before, after]);
    await counterPast(again, after);
  });
  await step("kill through node A", async () => {
    check((await sbx.kill()) === true, "kill");
    const pager = Sandbox.list({ ...opts, query: { metadata: { run, who: "b" } } });
    check((await pager.nextItems()).length === 0, "gone from the list");
    sbx = undefined;
  });
  console.log("e2b cluster (js): all steps passed");
} catch (e) {
  report(e);
  if (sbx) await sbx.kill().catch(() => {});
  process.exit(1);
}
