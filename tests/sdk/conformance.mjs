#!/usr/bin/env node
// Conformance checks beyond sdk-smoke.mjs, driven through the real inngest SDK:
// error codes and flags, streams and logs, secrets, and the clone counter test
// (a loop started before a snapshot keeps counting in the clone, with its
// earlier output). Prints "ok <step>" per step and "N passed, 0 failed" at the end.
//
//   SBX_URL=http://127.0.0.1:8731 node conformance.mjs
import { Inngest } from "inngest";

const baseUrl = process.env.SBX_URL;
if (!baseUrl) {
  console.error("SBX_URL is required");
  process.exit(2);
}
const inngest = new Inngest({ id: "sbx-conformance", baseUrl, isDev: true });
const sbx = inngest.sandboxes;
const tag = `conf-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;
const cleanup = [];
let passed = 0;
const text = (bytes) => new TextDecoder().decode(bytes);
const check = (cond, message) => {
  if (!cond) throw new Error(`assertion failed: ${message}`);
};
const step = async (name, fn) => {
  const t = Date.now();
  try {
    const v = await fn();
    passed += 1;
    console.log(`ok   ${name} (${Date.now() - t}ms)`);
    return v;
  } catch (e) {
    const extra = e?.name === "SandboxError" ? ` [code=${e.code} status=${e.status} retryable=${e.retryable} ambiguous=${e.ambiguous}]` : "";
    console.log(`FAIL ${name}: ${e?.name}: ${e?.message}${extra}`);
    for (const s of cleanup.reverse()) await s.destroy().catch(() => undefined);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
};
const expectError = async (promise, code, flags = {}) => {
  try {
    await promise;
  } catch (e) {
    check(e?.name === "SandboxError", `expected SandboxError, got ${e?.name}: ${e?.message}`);
    check(e.code === code, `expected code ${code}, got ${e.code} (${e.message})`);
    for (const [k, v] of Object.entries(flags)) check(e[k] === v, `${code}: ${k} should be ${v}, got ${e[k]}`);
    check(typeof e.requestId === "string" && e.requestId.length > 0, "error carries the request id");
    return e;
  }
  throw new Error(`expected ${code}, but the call succeeded`);
};
// Counts guest processes running `sleep 300` (the image has no ps).
const COUNT_SLEEPERS = `
import os
n = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            n += open(f"/proc/{p}/cmdline", "rb").read().startswith(b"sleep\\x00300")
        except OSError:
            pass
print(n)
`;
const readAll = async (stream) => {
  const chunks = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return chunks;
    chunks.push(value);
  }
};

const main = async () => {
  const s = await step("create 1 vCPU / 1024 MiB", async () => {
    const s = await sbx.create({ name: tag, vcpu: 1, memoryMb: 1024, environment: { BASE: "b" } });
    cleanup.push(s);
    check(s.status === "RUNNING", s.status);
    return s;
  });

  await step("name taken with another config", () =>
    expectError(sbx.create({ name: tag, vcpu: 2, memoryMb: 2048 }), "sandbox_name_taken", { retryable: false }));

  await step("shapes off the grid (1, 2 or 4 vCPU with 1, 2 or 4 GiB each) are refused", async () => {
    await expectError(sbx.create({ name: `${tag}-big`, vcpu: 3, memoryMb: 3072 }), "invalid_field_format");
    await expectError(sbx.create({ name: `${tag}-thin`, vcpu: 4, memoryMb: 2048 }), "invalid_field_format");
  });

  await step("unknown secret is refused", () =>
    expectError(sbx.create({ name: `${tag}-sec`, vcpu: 1, memoryMb: 1024, secrets: ["NO_SUCH_SECRET"] }), "invalid_field_format"));

  await step("exec timeout is ambiguous 504", () =>
    expectError(s.commands.run(["sleep", "10"], { timeout: "500ms" }), "sandbox_exec_timed_out", { ambiguous: true }));

  await step("exec output over the limit is 413", () =>
    expectError(s.commands.run("head -c 4000000 /dev/zero"), "sandbox_exec_output_too_large", { ambiguous: true }));

  await step("bare command names resolve through PATH", async () => {
    const r = await s.commands.run(["python3", "-c", "import os; print(os.environ['BASE'])"]);
    check(r.exitCode === 0 && r.stdout === "b\n", JSON.stringify(r));
  });

  await step("process wait timeout, then wait again", async () => {
    const p = await s.processes.start({ command: ["sh", "-c", "sleep 3; echo done"] });
    await expectError(p.wait({ timeout: "100ms" }), "sandbox_process_wait_timed_out", { retryable: false });
    const done = await p.wait({ timeout: "30s" });
    check(done.state === "EXITED" && done.exitCode === 0, `${done.state} ${done.exitCode}`);
  });

  await step("process stream: live output, then end of stream", async () => {
    const p = await s.processes.start({ command: ["sh", "-c", "for i in 1 2 3 4 5; do echo n$i; sleep 0.1; done; echo e >&2"] });
    const chunks = await readAll(await p.streamOutput());
    const out = chunks.filter((c) => c.stream === "STDOUT").map((c) => text(c.data)).join("");
    const err = chunks.filter((c) => c.stream === "STDERR").map((c) => text(c.data)).join("");
    check(out === "n1\nn2\nn3\nn4\nn5\n" && err === "e\n", JSON.stringify({ out, err }));
  });

  await step("includeChildren signal reaches the whole group", async () => {
    const p = await s.processes.start({ command: ["sh", "-c", "sleep 300 & sleep 300; wait"] });
    await p.signal({ signal: 15, includeChildren: true });
    const done = await p.wait({ timeout: "30s" });
    check(done.state === "KILLED" && done.terminationSignal === 15, `${done.state} ${done.terminationSignal}`);
    // The group's other members die right after the leader; give them a moment.
    let ps;
    for (let n = 0; n < 50; n += 1) {
      ps = await s.commands.run(["python3", "-c", COUNT_SLEEPERS]);
      if (ps.exitCode === 0 && ps.stdout.trim() === "0") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    check(ps.exitCode === 0 && ps.stdout.trim() === "0", `children left: ${JSON.stringify(ps)}`);
  });

  await step("logs stream (follow=false) ends", async () => {
    const chunks = await readAll(await s.logs.stream({ follow: false }));
    const log = chunks.map((c) => text(c.data)).join("");
    check(log.includes("sbx-agent"), `console log: ${log.slice(0, 200)}`);
  });

  await step("download of a missing file is sandbox_file_not_found", () =>
    expectError(s.files.download({ path: "/no/such/file" }), "sandbox_file_not_found"));

  await step("upload creates parent directories and replaces", async () => {
    await s.files.upload({ path: "/tmp/deep/a/b/c.txt", data: new TextEncoder().encode("one") });
    await s.files.upload({ path: "/tmp/deep/a/b/c.txt", data: new TextEncoder().encode("two") });
    const r = await s.commands.run(["cat", "/tmp/deep/a/b/c.txt"]);
    check(r.stdout === "two", r.stdout);
  });

  // Secrets: set through the /v1 API, selected by name at create.
  await step("secrets are injected and never returned", async () => {
    const put = await fetch(new URL("/v1/secrets/CONF_TOKEN", baseUrl), {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ value: "s3cr3t-value" }),
    });
    check(put.ok, `put secret: ${put.status}`);
    const putBody = await put.text();
    check(!putBody.includes("s3cr3t-value"), "secret value echoed");
    const withSecret = await sbx.create({ name: `${tag}-secret`, vcpu: 1, memoryMb: 1024, secrets: ["CONF_TOKEN"] });
    cleanup.push(withSecret);
    const r = await withSecret.commands.run("printf %s \"$CONF_TOKEN\"");
    check(r.stdout === "s3cr3t-value", `secret in env: ${r.stdout}`);
    const raw = await (await fetch(new URL(`/v2/sandboxes/${withSecret.id}`, baseUrl))).text();
    check(!raw.includes("s3cr3t-value"), "secret value in the sandbox resource");
    const list = await (await fetch(new URL("/v1/secrets", baseUrl))).text();
    check(list.includes("CONF_TOKEN") && !list.includes("s3cr3t-value"), "secret list shows names only");
    await withSecret.destroy();
  });

  // Clone keeps memory and processes: a counter loop keeps counting.
  const counter = await step("start a counter loop", async () => {
    const p = await s.processes.start({
      command: ["sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; echo tick$i; sleep 0.1; done"],
    });
    for (let n = 0; n < 100; n += 1) {
      const r = await s.commands.run("cat /tmp/count 2>/dev/null || echo 0");
      if (Number(r.stdout) >= 3) return p;
    }
    throw new Error("counter never reached 3");
  });

  const snap = await step("snapshot while the loop runs", async () => {
    const snap = await s.snapshot({ name: `${tag}-snap` });
    check(snap.status === "READY", snap.status);
    return snap;
  });

  await step("snapshot name is held", () => expectError(s.snapshot({ name: `${tag}-snap` }), "sandbox_snapshot_name_taken"));

  await step("clone continues the loop with its earlier output", async () => {
    const clone = await snap.clone({ name: `${tag}-clone` });
    cleanup.push(clone);
    check(clone.status === "RUNNING" && clone.id !== s.id, clone.status);
    const first = Number((await clone.commands.run("cat /tmp/count")).stdout);
    let later = first;
    for (let n = 0; n < 100 && later <= first; n += 1) later = Number((await clone.commands.run("cat /tmp/count")).stdout);
    check(later > first, `counter did not advance in the clone (${first} -> ${later})`);
    const p = await clone.processes.get(counter.id);
    check(p && p.state === "RUNNING", `process in clone: ${p?.state}`);
    const { chunks } = await p.getOutput();
    const out = chunks.map((c) => text(c.data)).join("");
    check(out.includes("tick1\n") && out.includes("tick3\n"), `earlier output missing: ${out.slice(0, 80)}`);
    const env = await clone.commands.run("printf %s \"$BASE\"");
    check(env.stdout === "b", "environment carried into the clone");
    await clone.destroy();
  });

  await step("pause keeps the loop frozen, resume continues it", async () => {
    const paused = await s.pause();
    check(paused.status === "PAUSED", paused.status);
    await expectError(s.commands.run(["true"]), "invalid_request");
    const resumed = await s.resume();
    check(resumed.status === "RUNNING", resumed.status);
    const r = await s.commands.run("cat /tmp/count");
    check(Number(r.stdout) > 0, r.stdout);
  });

  await step("clone of a deleted snapshot is refused", async () => {
    await snap.delete();
    await expectError(snap.clone({ name: `${tag}-late` }), "sandbox_snapshot_not_found");
  });

  await step("destroy", async () => {
    const r = await s.destroy();
    check(["TERMINATING", "TERMINATED"].includes(r.status), r.status);
    cleanup.length = 0;
  });
  console.log(`${passed} passed, 0 failed`);
};

await main();
