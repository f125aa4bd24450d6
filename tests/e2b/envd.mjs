#!/usr/bin/env node
// Drives sbxd's envd API (commands, PTYs, files, watch; contract §3-§5 of
// protocol/e2b/README.md) with the real `e2b` SDK (2.51.0, pinned in
// package-lock.json), against one sandbox of the default image.
//
//   SBX_URL=http://127.0.0.1:8731 SBX_KEY=signkey-sbx-… node envd.mjs
//
// SBX_KEY is a tenant's key (`sbxd keys create`). Both the control plane and
// envd are SBX_URL (contract §1.8: envd requests carry E2b-Sandbox-Id).
// Prints `ok   <step>` per step and `all steps passed` at the end; at the first
// failure prints `FAIL <step>: <error>`, kills the sandbox and exits 1.

import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  FileType,
  FilesystemEventType,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  TimeoutError,
} from "e2b";
import { check, eq, report, step } from "./steps.mjs";

const url = process.env.SBX_URL;
const key = process.env.SBX_KEY;
if (!url || !key) {
  console.error("SBX_URL and SBX_KEY are required");
  process.exit(2);
}
const opts = { apiKey: key, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 180_000 };
const HOME = "/home/user";
const DIR = `${HOME}/envd-js`;

// ---- helpers ----------------------------------------------------------------

/** Runs fn, which must throw an instance of cls; returns the error. */
async function throws(fn, cls, what) {
  try {
    await fn();
  } catch (e) {
    check(e instanceof cls, `${what}: want ${cls.name}, got ${e?.constructor?.name}: ${e?.message}`);
    return e;
  }
  throw new Error(`${what}: did not throw (want ${cls.name})`);
}

/** Polls pred (sync or async) every 100 ms until it is true or ms pass. */
async function waitFor(pred, what, ms = 15_000) {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Go's FileMode.String() of the permission bits of a regular file. */
function permString(mode) {
  const rwx = (bits) => `${bits & 4 ? "r" : "-"}${bits & 2 ? "w" : "-"}${bits & 1 ? "x" : "-"}`;
  return `-${rwx(mode >> 6)}${rwx(mode >> 3)}${rwx(mode)}`;
}

const enc = (s) => new TextEncoder().encode(s);

// ---- commands ---------------------------------------------------------------

async function commands(sbx) {
  await step("commands.run: stdout/stderr callbacks and the result", async () => {
    const out = [];
    const err = [];
    const r = await sbx.commands.run("echo out-1; echo err-1 >&2; echo out-2", {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    });
    eq(r.exitCode, 0, "exitCode");
    eq(r.stdout, "out-1\nout-2\n", "stdout");
    eq(r.stderr, "err-1\n", "stderr");
    eq(out.join(""), r.stdout, "onStdout chunks");
    eq(err.join(""), r.stderr, "onStderr chunks");
  });

  await step("commands.run: a non-zero exit is CommandExitError", async () => {
    const e = await throws(
      () => sbx.commands.run("echo before; echo oops >&2; exit 3"),
      CommandExitError,
      "exit 3",
    );
    eq(e.exitCode, 3, "exitCode");
    eq(e.stdout, "before\n", "stdout");
    eq(e.stderr, "oops\n", "stderr");
    check(typeof e.error === "string" && e.error.length > 0, "error is set", e.error);
  });

  await step("commands.run: envs, the sandbox's envs and cwd", async () => {
    const r = await sbx.commands.run('echo "$FOO|$SBX_CREATE_ENV|$(pwd)"', {
      envs: { FOO: "bar" },
      cwd: "/tmp",
    });
    eq(r.stdout, "bar|from-create|/tmp\n", "stdout");
    const o = await sbx.commands.run('echo "$SBX_CREATE_ENV"', { envs: { SBX_CREATE_ENV: "per-call" } });
    eq(o.stdout, "per-call\n", "per-call envs win over the sandbox's");
  });

  await step("commands.run: the default user is user, home /home/user", async () => {
    const r = await sbx.commands.run("whoami; echo $HOME; pwd; id -u; id -g");
    eq(r.stdout, `user\n${HOME}\n${HOME}\n1000\n1000\n`, "whoami, HOME, pwd, uid, gid");
  });

  await step("commands.run: user root", async () => {
    const r = await sbx.commands.run("whoami; echo $HOME; pwd", { user: "root" });
    eq(r.stdout, "root\n/root\n/root\n", "whoami, HOME, pwd");
  });

  // No sudo step: every process in an sbx sandbox runs with no_new_privs set
  // (gVisor), so setuid binaries cannot raise privileges; `user: "root"` is
  // the way to root (docs/e2b.md).

  await step("commands.run: python, python3, git and bash are there", async () => {
    const r = await sbx.commands.run("python --version; python3 --version; git --version; bash --version | head -1");
    const lines = r.stdout.trim().split("\n");
    check(/^Python 3\./.test(lines[0]) && lines[0] === lines[1], "python is python3", lines);
    check(/^git version/.test(lines[2]) && /bash/.test(lines[3]), "git and bash", lines);
  });

  await step("commands.run: a missing cwd is InvalidArgumentError", async () => {
    await throws(() => sbx.commands.run("pwd", { cwd: "/does/not/exist" }), InvalidArgumentError, "missing cwd");
  });

  await step("commands.run: timeoutMs ends the command with TimeoutError", async () => {
    const started = Date.now();
    await throws(() => sbx.commands.run("sleep 10", { timeoutMs: 2_000 }), TimeoutError, "sleep 10 with 2 s");
    check(Date.now() - started < 8_000, "it took the timeout, not the sleep", Date.now() - started);
  });

  await step("commands: the timed-out command was killed", async () => {
    await waitFor(
      async () => !(await sbx.commands.list()).some((p) => p.args.includes("sleep 10")),
      "`sleep 10` to leave commands.list()",
    );
  });

  await step("commands.run: an unknown user is AuthenticationError", async () => {
    await throws(() => sbx.commands.run("true", { user: "no-such-user" }), AuthenticationError, "user no-such-user");
  });

  await step("commands.run: 1 MiB of output arrives whole", async () => {
    const r = await sbx.commands.run("yes abcdefghi | head -c 1048576");
    eq(r.stdout.length, 1048576, "stdout length");
    check(r.stdout === "abcdefghi\n".repeat(104858).slice(0, 1048576), "stdout content");
  });
}

async function background(sbx) {
  const out = [];
  let h;
  await step("commands.run background with stdin", async () => {
    h = await sbx.commands.run("cat", {
      background: true,
      stdin: true,
      envs: { BG: "1" },
      cwd: "/tmp",
      onStdout: (d) => out.push(d),
    });
    check(Number.isInteger(h.pid) && h.pid > 0, "pid", h.pid);
    eq(h.exitCode, undefined, "exitCode while running");
  });

  await step("commands.list shows it with its config", async () => {
    const procs = await sbx.commands.list();
    const p = procs.find((x) => x.pid === h.pid);
    check(p, "pid in list", procs);
    eq(p.cmd, "/bin/bash", "cmd");
    eq(p.args, ["-l", "-c", "cat"], "args");
    eq(p.envs?.BG, "1", "envs.BG");
    eq(p.cwd, "/tmp", "cwd");
    // The SDK cannot set a tag on commands, so none is expected here.
    check(p.tag === undefined || typeof p.tag === "string", "tag", p.tag);
  });

  await step("sendStdin reaches the background command", async () => {
    await h.sendStdin("hello stdin\n");
    await sbx.commands.sendStdin(h.pid, enc("bytes too\n"));
    await waitFor(() => out.join("") === "hello stdin\nbytes too\n", "cat to echo both lines");
  });

  await step("closeStdin ends it (EOF) with exit code 0", async () => {
    await h.closeStdin();
    const r = await h.wait();
    eq(r.exitCode, 0, "exitCode");
    eq(r.stdout, "hello stdin\nbytes too\n", "stdout");
    check(!(await sbx.commands.list()).some((p) => p.pid === h.pid), "gone from list");
  });

  await step("kill: true for a running command, then false", async () => {
    const k = await sbx.commands.run("sleep 300", { background: true });
    eq(await k.kill(), true, "kill");
    await throws(() => k.wait(), CommandExitError, "wait after kill");
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === k.pid), "the killed pid to leave the list");
    eq(await sbx.commands.kill(k.pid), false, "kill of the dead pid");
    eq(await sbx.commands.kill(999_999), false, "kill of an unknown pid");
  });

  await step("commands.connect to an unknown pid is NotFoundError", async () => {
    await throws(() => sbx.commands.connect(999_999), NotFoundError, "connect 999999");
  });

  // disconnect keeps the process; a second client connects and sees only new output.
  const first = [];
  let loop;
  await step("a background read loop answers its input", async () => {
    loop = await sbx.commands.run('while read l; do echo "got:$l"; done', {
      background: true,
      stdin: true,
      onStdout: (d) => first.push(d),
    });
    await loop.sendStdin("one\n");
    await waitFor(() => first.join("") === "got:one\n", "got:one");
  });

  await step("disconnect does not kill the command", async () => {
    await loop.disconnect();
    await new Promise((r) => setTimeout(r, 500));
    check((await sbx.commands.list()).some((p) => p.pid === loop.pid), "still listed after disconnect");
  });

  await step("commands.connect from a second client sees the output made after it", async () => {
    const other = await Sandbox.connect(sbx.sandboxId, opts);
    const second = [];
    const h2 = await other.commands.connect(loop.pid, { onStdout: (d) => second.push(d) });
    eq(h2.pid, loop.pid, "pid");
    await sbx.commands.sendStdin(loop.pid, "two\n");
    await waitFor(() => second.join("").includes("got:two\n"), "got:two on the connected handle");
    await other.commands.closeStdin(loop.pid);
    const r = await h2.wait();
    eq(r.exitCode, 0, "exitCode");
    eq(r.stdout, "got:two\n", "only output produced after connecting");
    eq(first.join(""), "got:one\n", "nothing reached the disconnected handle");
  });
}

// ---- PTY ----------------------------------------------------------------------

async function pty(sbx) {
  const decoder = new TextDecoder();
  let raw = "";
  let t;
  // The terminal's output without escape sequences (prompt colours, title,
  // bracketed paste) and carriage returns.
  const text = () =>
    raw
      .replace(/\x1b\][^\x07\x1b]*(\x07|\x1b\\)/g, "")
      .replace(/\x1b\[[0-9;?]*[ -\/]*[@-~]/g, "")
      .replace(/\r/g, "");
  const sees = (re, what) =>
    waitFor(() => re.test(text()), `${what} (pty output so far: ${JSON.stringify(raw.slice(-300))})`);

  await step("pty.create runs an interactive bash", async () => {
    t = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        raw += decoder.decode(d, { stream: true });
      },
    });
    check(Number.isInteger(t.pid) && t.pid > 0, "pid", t.pid);
  });

  await step("pty.sendInput: the command runs and its output arrives in onData", async () => {
    await sbx.pty.sendInput(t.pid, enc("echo hi-from-pty\n"));
    // The echoed input line is "echo hi-from-pty"; the output is the line alone.
    await sees(/(^|\n)hi-from-pty\n/, "hi-from-pty on its own line");
  });

  await step("pty: the terminal is 80x24 and runs as user", async () => {
    await sbx.pty.sendInput(t.pid, enc("stty size; whoami\n"));
    await sees(/(^|\n)24 80\nuser\n/, '"24 80" and "user"');
  });

  await step("pty.resize to 100x30: stty size prints 30 100", async () => {
    await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(t.pid, enc("stty size\n"));
    await sees(/(^|\n)30 100\n/, '"30 100"');
  });

  await step("pty: exit ends it with exit code 0", async () => {
    await sbx.pty.sendInput(t.pid, enc("exit\n"));
    const r = await t.wait();
    eq(r.exitCode, 0, "exitCode");
  });

  await step("pty.kill: true, then false", async () => {
    const k = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    eq(await sbx.pty.kill(k.pid), true, "kill");
    await throws(() => k.wait(), CommandExitError, "wait after kill");
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === k.pid), "the killed pty to leave the list");
    eq(await sbx.pty.kill(k.pid), false, "kill again");
  });
}

// ---- files ----------------------------------------------------------------------

async function files(sbx) {
  await step("files.write text (parents created)", async () => {
    const info = await sbx.files.write(`${DIR}/a.txt`, "hello text\n");
    eq([info.name, info.type, info.path], ["a.txt", FileType.FILE, `${DIR}/a.txt`], "name, type, path");
    eq(await sbx.files.read(`${DIR}/a.txt`), "hello text\n", "read back");
  });

  await step("files.write a relative path lands in /home/user", async () => {
    const info = await sbx.files.write("envd-js-rel.txt", "rel");
    eq(info.path, `${HOME}/envd-js-rel.txt`, "path");
    const r = await sbx.commands.run("cat envd-js-rel.txt");
    eq(r.stdout, "rel", "the same file for a command's relative path");
  });

  const bytes = new Uint8Array([0, 1, 2, 127, 128, 254, 255, 10]);
  await step("files.write bytes (Uint8Array), read as bytes", async () => {
    await sbx.files.write(`${DIR}/bytes.bin`, bytes);
    const got = await sbx.files.read(`${DIR}/bytes.bin`, { format: "bytes" });
    check(got instanceof Uint8Array, "a Uint8Array", typeof got);
    eq(Array.from(got), Array.from(bytes), "bytes");
  });

  await step("files.write several files at once", async () => {
    const infos = await sbx.files.write([
      { path: `${DIR}/m1.txt`, data: "one" },
      { path: `${DIR}/sub/m2.txt`, data: enc("two") },
    ]);
    eq(infos.map((i) => i.path).sort(), [`${DIR}/m1.txt`, `${DIR}/sub/m2.txt`], "paths");
    eq(await sbx.files.read(`${DIR}/m1.txt`), "one", "m1");
    eq(await sbx.files.read(`${DIR}/sub/m2.txt`), "two", "m2");
  });

  await step("files.write with gzip (octet-stream, Content-Encoding: gzip)", async () => {
    const content = "gzipped ".repeat(1000);
    const info = await sbx.files.write(`${DIR}/gz.txt`, content, { gzip: true });
    eq(info.path, `${DIR}/gz.txt`, "path");
    eq(await sbx.files.read(`${DIR}/gz.txt`), content, "read back");
    eq(await sbx.files.read(`${DIR}/gz.txt`, { gzip: true }), content, "read back with gzip");
  });

  await step("files.write a ReadableStream (streamed octet-stream)", async () => {
    const parts = ["stream-", "ed ", "content"];
    const body = new ReadableStream({
      start(c) {
        for (const p of parts) c.enqueue(enc(p));
        c.close();
      },
    });
    await sbx.files.write(`${DIR}/stream.txt`, body);
    eq(await sbx.files.read(`${DIR}/stream.txt`), parts.join(""), "read back");
  });

  await step("files.read of a missing file is FileNotFoundError", async () => {
    await throws(() => sbx.files.read(`${DIR}/missing.txt`), FileNotFoundError, "read missing");
  });

  await step("files.getInfo: type, size, owner, permissions, mtime", async () => {
    const i = await sbx.files.getInfo(`${DIR}/a.txt`);
    eq([i.name, i.type, i.path, i.size], ["a.txt", FileType.FILE, `${DIR}/a.txt`, 11], "name, type, path, size");
    eq([i.owner, i.group], ["user", "user"], "owner, group");
    eq(i.permissions, permString(i.mode & 0o777), "permissions match mode");
    check((i.mode & 0o600) === 0o600, "owner can read and write", i.mode.toString(8));
    check(i.modifiedTime instanceof Date && Math.abs(Date.now() - i.modifiedTime.getTime()) < 600_000, "modifiedTime", i.modifiedTime);
    const d = await sbx.files.getInfo(DIR);
    eq([d.type, d.owner], [FileType.DIR, "user"], "the created parent: a dir of user");
  });

  await step("files.write metadata: user.e2b.* xattrs, in getInfo and list, replaced by the next upload", async () => {
    const path = "/home/user/envd-js-meta.txt";
    const w = await sbx.files.write(path, "m", { metadata: { Owner: "me", "build.id": "42" } });
    eq(w.metadata, { "build.id": "42", owner: "me" }, "the write's answer (keys lower-cased)");
    eq((await sbx.files.getInfo(path)).metadata, { "build.id": "42", owner: "me" }, "getInfo");
    const listed = (await sbx.files.list("/home/user")).find((e) => e.path === path);
    eq(listed?.metadata, { "build.id": "42", owner: "me" }, "list");
    const xattr = await sbx.commands.run(`python3 -c "import os; print(os.getxattr('${path}', 'user.e2b.owner').decode())"`);
    eq(xattr.stdout.trim(), "me", "the xattr inside the sandbox");
    await sbx.files.write(path, "n", { metadata: { other: "x" } });
    eq((await sbx.files.getInfo(path)).metadata, { other: "x" }, "a new upload replaces the keys");
    await sbx.files.write(path, "o");
    const cleared = (await sbx.files.getInfo(path)).metadata;
    check(cleared === undefined || Object.keys(cleared).length === 0, "an upload without metadata clears it", cleared);
  });

  await step("files.write as root makes root's file", async () => {
    const info = await sbx.files.write("/root/envd-js-root.txt", "r", { user: "root" });
    eq(info.path, "/root/envd-js-root.txt", "path");
    eq((await sbx.files.getInfo("/root/envd-js-root.txt", { user: "root" })).owner, "root", "owner");
    const rel = await sbx.files.write("rel-root.txt", "r", { user: "root" });
    eq(rel.path, "/root/rel-root.txt", "root's relative path is under /root");
  });

  await step("files.list depth 1 and 2", async () => {
    const one = await sbx.files.list(DIR);
    eq(one.map((e) => e.name).sort(), ["a.txt", "bytes.bin", "gz.txt", "m1.txt", "stream.txt", "sub"], "depth 1 names");
    const sub = one.find((e) => e.name === "sub");
    eq([sub.type, sub.path], [FileType.DIR, `${DIR}/sub`], "sub entry");
    const two = await sbx.files.list(DIR, { depth: 2 });
    const paths = two.map((e) => e.path).sort();
    check(paths.includes(`${DIR}/sub/m2.txt`) && paths.includes(`${DIR}/a.txt`), "depth 2 has sub/m2.txt", paths);
    eq(two.length, 7, "depth 2 count");
  });

  await step("files.exists: true and false", async () => {
    eq(await sbx.files.exists(`${DIR}/a.txt`), true, "a.txt");
    eq(await sbx.files.exists(DIR), true, "the dir");
    eq(await sbx.files.exists(`${DIR}/missing.txt`), false, "missing");
  });

  await step("files.makeDir: true, then false when it exists", async () => {
    eq(await sbx.files.makeDir(`${DIR}/made/deep`), true, "first");
    eq(await sbx.files.makeDir(`${DIR}/made/deep`), false, "again");
    const i = await sbx.files.getInfo(`${DIR}/made/deep`);
    eq([i.type, i.owner], [FileType.DIR, "user"], "a dir of user");
  });

  await step("commands.run: a relative cwd resolves against home", async () => {
    const r = await sbx.commands.run("pwd", { cwd: "envd-js/made" });
    eq(r.stdout, `${DIR}/made\n`, "pwd");
  });

  await step("files.rename", async () => {
    const e = await sbx.files.rename(`${DIR}/a.txt`, `${DIR}/renamed/a2.txt`);
    eq([e.name, e.path, e.type], ["a2.txt", `${DIR}/renamed/a2.txt`, FileType.FILE], "entry");
    eq(await sbx.files.exists(`${DIR}/a.txt`), false, "old path");
    eq(await sbx.files.read(`${DIR}/renamed/a2.txt`), "hello text\n", "content");
  });

  await step("files.remove a file and a directory tree", async () => {
    await sbx.files.remove(`${DIR}/renamed/a2.txt`);
    eq(await sbx.files.exists(`${DIR}/renamed/a2.txt`), false, "file");
    await sbx.files.remove(`${DIR}/made`);
    eq(await sbx.files.exists(`${DIR}/made`), false, "tree");
  });

  await step("files.watchDir (recursive) sees create, write and remove", async () => {
    await sbx.files.makeDir(`${DIR}/watch/sub`);
    const events = [];
    const w = await sbx.files.watchDir(`${DIR}/watch`, (e) => events.push(e), { recursive: true });
    try {
      await sbx.commands.run(`echo hi > ${DIR}/watch/sub/w.txt && echo top > ${DIR}/watch/top.txt && rm ${DIR}/watch/sub/w.txt`);
      const seen = (name, type) => events.some((e) => e.name === name && e.type === type);
      await waitFor(
        () =>
          seen("sub/w.txt", FilesystemEventType.CREATE) &&
          seen("sub/w.txt", FilesystemEventType.WRITE) &&
          seen("sub/w.txt", FilesystemEventType.REMOVE) &&
          seen("top.txt", FilesystemEventType.CREATE),
        `create/write/remove of sub/w.txt and create of top.txt (events: ${JSON.stringify(events)})`,
      );
    } finally {
      await w.stop();
    }
  });

  await step("files.watchDir of a missing directory is FileNotFoundError", async () => {
    await throws(() => sbx.files.watchDir(`${DIR}/no-such-dir`, () => {}), FileNotFoundError, "watch missing");
  });
}

// ---- the sandbox ------------------------------------------------------------------

async function sandbox(sbx) {
  await step("isRunning: true", async () => {
    eq(await sbx.isRunning(), true, "isRunning");
  });

  await step("getHost(port) names the sandbox", async () => {
    const host = sbx.getHost(8080);
    check(typeof host === "string" && host.includes(sbx.sandboxId) && host.startsWith("8080-"), "host", host);
  });

  // Pre-signed URLs: the SDK signs them with the envdAccessToken; with
  // sandboxUrl they are SBX_URL/files?path=…&signature=… (no sandbox id, no
  // headers: contract §1.5 and §3.6).
  await step("downloadUrl: a plain fetch gets the file", async () => {
    await sbx.files.write(`${DIR}/dl.txt`, "download me");
    const link = await sbx.downloadUrl(`${DIR}/dl.txt`);
    check(link.includes("signature="), "signed", link);
    const res = await fetch(link);
    eq(res.status, 200, "status");
    eq(await res.text(), "download me", "body");
  });

  await step("downloadUrl: a bad signature is 401", async () => {
    const link = await sbx.downloadUrl(`${DIR}/dl.txt`);
    const bad = await fetch(link.replace(/signature=[^&]+/, "signature=v1_bad"));
    eq(bad.status, 401, "status");
    check(!(await bad.text()).includes("download me"), "no content");
  });

  await step("uploadUrl: a plain multipart POST writes the file", async () => {
    const path = `${DIR}/ul.txt`;
    const link = await sbx.uploadUrl(path, { useSignatureExpiration: 120 });
    const form = new FormData();
    form.append("file", new Blob(["uploaded via url"]), path);
    const res = await fetch(link, { method: "POST", body: form });
    eq(res.status, 200, "status");
    eq(await sbx.files.read(path), "uploaded via url", "content");
    eq((await sbx.files.getInfo(path)).owner, "user", "owner");
  });
}

// ---- network update ---------------------------------------------------------

async function network(sbx) {
  await step("updateNetwork: no internet, then the default again, for new commands", async () => {
    const proxy = async () => (await sbx.commands.run('echo "${HTTPS_PROXY:-none}"')).stdout.trim();
    eq(await proxy(), "http://127.0.0.1:3128", "created with the internet");
    await sbx.updateNetwork({ allowInternetAccess: false });
    eq(await proxy(), "none", "no proxy variables without a network");
    await sbx.updateNetwork({ allowOut: ["api.example.com"], denyOut: ["0.0.0.0/0"] });
    eq(await proxy(), "http://127.0.0.1:3128", "an allowlist has the proxy");
    await sbx.updateNetwork({});
    eq(await proxy(), "http://127.0.0.1:3128", "cleared: the server's default");
  });
  await step("updateNetwork: what sbx cannot express is refused", async () => {
    let refused;
    try {
      await sbx.updateNetwork({ denyOut: ["10.0.0.0/8"] });
    } catch (e) {
      refused = e;
    }
    check(refused && /denyOut/.test(refused.message), "a partial denyOut is refused", refused?.message);
    eq(await sbx.isRunning(), true, "the sandbox runs on");
  });
}

// Preview URLs (getHost) are driven by preview.mjs / python/preview.py (tests/e2b_preview.rs).

// ---- main ---------------------------------------------------------------------------

let sbx;
try {
  await step("Sandbox.create", async () => {
    sbx = await Sandbox.create("base", { ...opts, timeoutMs: 600_000, envs: { SBX_CREATE_ENV: "from-create" } });
  });
  await commands(sbx);
  await background(sbx);
  await pty(sbx);
  await files(sbx);
  await sandbox(sbx);
  await network(sbx);
  await step("kill", async () => {
    eq(await sbx.kill(), true, "kill");
    sbx = undefined;
  });
  console.log("e2b envd (js): all steps passed");
} catch (e) {
  report(e);
  if (sbx) await sbx.kill().catch(() => {});
  process.exit(1);
}
