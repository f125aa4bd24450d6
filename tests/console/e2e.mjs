// End-to-end test of the sbx web console in headless Debian Chromium.
//
//   node e2e.mjs <baseUrl> <key> <screenshotDir> [<connector-items.tgz> [<oauth-package.tgz> [<connector-webhooks.tgz>]]]
//   node e2e.mjs <baseUrl> --dev <screenshotDir>     (sbxd --dev: no sign-in, no screenshots)
//
// Signs in (after a wrong key), checks the cookie and CSRF protection, creates a
// sandbox, uses its terminal (resize, reattach after a reload), follows a process, uploads and downloads a file,
// snapshots and clones, pauses and resumes, destroys; with the tarball of
// examples/connector-items, the Connect pages too: upload, build, create a
// connection, Run now with live progress, the run and its logs, the records
// browser (page 2, a record as JSON, the checkpoint), editing the config (a bad
// value refused next to its field, then a good one used by the next run), Test
// connection, delete; with an OAuth2 package as well: "Reauthorization required"
// and Reconnect (from the list and the edit form); with examples/connector-webhooks:
// a delivery in the Deliveries tab, its records filtered by key, schedule and
// credential rotation. Writes a screenshot of each page.
// Prints "ok   <step>" per step and "N passed, M failed" at the end; exits 1 on failure.

import { chromium } from "playwright-core";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, key, shots, tarball, oauthTarball, webhooksTarball] = process.argv.slice(2);
if (!base || !key || !shots) {
  console.error("usage: node e2e.mjs <baseUrl> <key> <screenshotDir>");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
rmSync(join(shots, "failure.png"), { force: true });

// The machine has no outside network: nothing that phones home.
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const profile = mkdtempSync(join(tmpdir(), "sbx-console-chromium-"));
// ignoreDefaultArgs: exactly our flags, the fresh profile, and the pipe playwright talks over.
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  ignoreDefaultArgs: true,
  args: [...FLAGS, `--user-data-dir=${profile}`, "--remote-debugging-pipe"],
  timeout: 180_000, // a loaded machine can take a while to start Chromium
});
const context = await browser.newContext({ viewport: { width: 1366, height: 820 }, acceptDownloads: true });
context.setDefaultTimeout(90_000);
const page = await context.newPage();
page.on("dialog", (d) => d.accept());
const consoleErrors = [];
page.on("pageerror", (e) => consoleErrors.push(`pageerror: ${e.message}`));
page.on("console", (m) => {
  if (m.type() === "error") consoleErrors.push(`console: ${m.text()}`);
});
// The API's refusals, printed with a failed step: a badge that never shows
// is then a 503 with its message, not only a timeout.
const refusals = [];
page.on("response", async (r) => {
  if (r.status() < 400) return;
  const body = await r.text().catch(() => "");
  refusals.push(`${r.request().method()} ${new URL(r.url()).pathname} -> ${r.status()} ${body.slice(0, 300)}`);
  if (refusals.length > 5) refusals.shift();
});

let passed = 0;
let failed = 0;
async function step(name, fn) {
  if (failed) return;
  try {
    await fn();
    passed += 1;
    console.log(`ok   ${name}`);
  } catch (err) {
    failed += 1;
    console.log(`FAIL ${name}: ${err.stack || err}`);
    if (refusals.length) console.log(`the last refusals of the API:\n  ${refusals.join("\n  ")}`);
    await page.screenshot({ path: join(shots, "failure.png"), fullPage: true }).catch(() => {});
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}
const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`) });
/** A screenshot of the whole page (long forms and tables). */
const fullShot = (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
/** A fetch from inside the page (same origin, the session cookie). */
const pageFetch = (path, init) =>
  page.evaluate(async ([p, i]) => {
    const r = await fetch(p, i);
    const text = await r.text();
    let code = null;
    try {
      code = JSON.parse(text).errors?.[0]?.code ?? null;
    } catch {}
    return { status: r.status, code, requestId: r.headers.get("x-request-id") };
  }, [path, init]);
/** The text on the Terminal tab's screen (xterm.js's rows). */
const termText = () =>
  page.evaluate(() => (document.querySelector(".xterm-box .xterm-rows")?.textContent || "").replace(/\u00a0/g, " "));
/** Waits until the Terminal tab's shell is connected. */
const termConnected = () => page.locator('.term-state[data-state="connected"]').waitFor({ timeout: 30_000 });
/** Waits for a new shell's prompt: keys typed before it are lost when the
 * shell's line editor sets up the terminal (it flushes pending input). */
async function termPrompt() {
  try {
    await page.waitForFunction(
      () => /@sandbox:.*[#$] /.test((document.querySelector(".xterm-box .xterm-rows")?.textContent || "").replace(/\u00a0/g, " ")),
      null,
      { timeout: 30_000 },
    );
  } catch (err) {
    throw new Error(`the shell never showed its prompt: ${await termText()}`);
  }
}
/** Types `line` and Enter into the terminal; waits until its screen shows `want`. */
async function termRun(line, want) {
  await page.locator(".xterm-box").click();
  await page.keyboard.type(line);
  await page.keyboard.press("Enter");
  try {
    await page.waitForFunction(
      (w) => (document.querySelector(".xterm-box .xterm-rows")?.textContent || "").replace(/\u00a0/g, " ").includes(w),
      want,
      { timeout: 30_000 },
    );
  } catch (err) {
    throw new Error(`the terminal never showed ${JSON.stringify(want)}: ${await termText()}`);
  }
}
/** Form controls on the page without an accessible label. */
const unlabelled = () =>
  page.evaluate(() =>
    [...document.querySelectorAll("main input, main select, main textarea")]
      .filter((el) => el.type !== "hidden" && el.labels.length === 0 && !el.closest("label") && !el.getAttribute("aria-label"))
      .map((el) => el.outerHTML));

/** The bearer token the SDK sends for a key: `signkey-x-` + hex(sha256(hexdecode(rest))). */
function bearer(k) {
  const m = k.match(/^(signkey-\w+-)(.*)$/);
  const [prefix, rest] = m ? [m[1], m[2]] : ["", k];
  const raw = /^([0-9a-f]{2})+$/i.test(rest) ? Buffer.from(rest, "hex") : Buffer.from(rest);
  return prefix + createHash("sha256").update(raw).digest("hex");
}
/** The session's CSRF token (null in dev mode). */
const csrfToken = () => page.evaluate(async () => (await (await fetch("/console/session")).json()).data.csrfToken);
/**
 * Run now on a sync of the open connection page: its live progress line, then the
 * result with `records` committed and the run's logs under it (no reload).
 */
async function runNow(sync, records, progressShot) {
  const url = page.url();
  const item = page.locator(`ul.syncs li[data-sync="${sync}"]`);
  const live = page.locator(`.live-run[data-sync="${sync}"]`);
  // The text of the live line as soon as it shows (a short run may end a second later).
  const seen = page.waitForFunction((s) => {
    const el = document.querySelector(`.live-run[data-sync="${s}"]`);
    return el ? el.textContent : false;
  }, sync, { timeout: 30_000, polling: 50 }).then(async (handle) => {
    if (progressShot) await shot(progressShot);
    return handle.jsonValue();
  });
  await item.getByRole("button", { name: `Run now ${sync}`, exact: true }).click();
  const text = await seen;
  assert(/(queued|running)/.test(text) && /records committed so far/.test(text), `live line: ${text}`);
  const ended = page.locator(`.run-ended[data-sync="${sync}"]`);
  await ended.locator(".ok", { hasText: `Run of ${sync} succeeded: ${records} records committed` }).waitFor({ timeout: 240_000 });
  await ended.getByRole("region", { name: /^Logs of run / }).locator("td", { hasText: `generated ${records} records` }).waitFor();
  await live.waitFor({ state: "detached" });
  assert(page.url() === url, `the page changed: ${page.url()}`);
}
/** Best effort: a screenshot of a progress line if it shows up in time. */
const shotIfShown = (selector, name) =>
  page.locator(selector).first().waitFor({ timeout: 5000 }).then(() => shot(name)).catch(() => {});

/** Ends the run: closes the browser, prints the tally, exits. */
async function finish() {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

if (key === "--dev") {
  await step("dev mode: the console opens without sign-in and offers no sign-out", async () => {
    await page.goto(base);
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
    assert(await page.getByText("dev mode (no sign-in)").isVisible(), "no dev-mode hint");
    assert(!(await page.getByRole("button", { name: "Sign out", exact: true }).isVisible()), "Sign out shown in dev mode");
    assert(!(await page.getByLabel("API key").count()), "a sign-in form in dev mode");
  });
  await finish();
}

let sandboxId = "";
let cloneId = "";
const fileText = `hello from the console ${Date.now()}\n`;

await step("the page is served with a strict CSP and a sign-in form", async () => {
  const resp = await page.goto(base);
  assert(resp.status() === 200, `GET / answered ${resp.status()}`);
  const csp = resp.headers()["content-security-policy"] || "";
  assert(csp.includes("script-src 'self'") && !csp.includes("unsafe-inline"), `CSP: ${csp}`);
  assert((resp.headers()["cache-control"] || "").length > 0, "Cache-Control");
  await page.getByLabel("API key").waitFor();
  await shot("sign-in");
});

await step("a wrong key is refused with its code and request id", async () => {
  await page.getByLabel("API key").fill("signkey-test-ffffffff");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  const error = page.locator("#sign-in-status .error");
  await error.waitFor();
  const text = await error.textContent();
  assert(text.includes("invalid_api_key"), `error: ${text}`);
  assert(/request id [0-9a-f-]{36}/.test(text), `no request id: ${text}`);
  await shot("sign-in-error");
});

await step("sign in with the key (keyboard only)", async () => {
  await page.getByLabel("API key").fill(key);
  await page.getByLabel("API key").press("Enter");
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  const cookie = (await context.cookies()).find((c) => c.name === "sbx_session");
  assert(cookie, "no sbx_session cookie");
  assert(cookie.httpOnly, "cookie is not HttpOnly");
  assert(cookie.sameSite === "Strict", `cookie SameSite=${cookie.sameSite}`);
  assert(cookie.path === "/", `cookie path ${cookie.path}`);
  assert(cookie.value.length >= 64 && !cookie.value.includes(key), "cookie is an opaque random id");
});

await step("CSRF: a cookie-authenticated POST without the token is 403", async () => {
  const body = JSON.stringify({ name: "csrf-probe", vcpu: 1, memoryMb: 1024 });
  const none = await pageFetch("/v2/sandboxes", { method: "POST", headers: { "content-type": "application/json" }, body });
  assert(none.status === 403 && none.code === "csrf_token_invalid", `without token: ${JSON.stringify(none)}`);
  const wrong = await pageFetch("/v2/sandboxes", { method: "POST", headers: { "content-type": "application/json", "x-csrf-token": "nope" }, body });
  assert(wrong.status === 403 && wrong.code === "csrf_token_invalid", `wrong token: ${JSON.stringify(wrong)}`);
  const del = await pageFetch("/console/session", { method: "DELETE" });
  assert(del.status === 403, `sign-out without token: ${JSON.stringify(del)}`);
  const list = await pageFetch("/v2/sandboxes", {});
  assert(list.status === 200, `GET with the cookie: ${JSON.stringify(list)}`);
});

await step("API callers with the header need no CSRF token (a secret for the create form)", async () => {
  const resp = await fetch(`${base}/v1/secrets/CONSOLE_TOKEN`, {
    method: "PUT",
    headers: { authorization: `Bearer ${bearer(key)}`, "content-type": "application/json" },
    body: JSON.stringify({ value: "s3cret-from-console" }),
  });
  assert(resp.status === 200, `PUT secret with the header: ${resp.status} ${await resp.text()}`);
});

await step("create a sandbox (shape, secret, network) with progress", async () => {
  await page.getByRole("link", { name: "New sandbox", exact: true }).click();
  await page.getByLabel("Name").fill("console-e2e");
  // Every shape sbxd offers (GET /v1/shapes: the whole grid by default).
  assert((await page.locator("input[name=shape]").count()) === 9, "nine shapes offered");
  await page.getByLabel("4 vCPU, 16 GiB").waitFor();
  await page.getByLabel("1 vCPU, 1 GiB").check();
  await page.getByLabel("CONSOLE_TOKEN").check();
  await page.getByLabel("Network").selectOption("none");
  assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
  await shot("create");
  const progress = shotIfShown("form .progress", "create-progress");
  await page.getByRole("button", { name: "Create sandbox", exact: true }).click();
  await progress;
  await page.waitForURL(/#\/sandboxes\/[0-9a-f-]{36}$/);
  sandboxId = page.url().split("/").pop();
  await page.getByRole("heading", { name: "console-e2e" }).waitFor();
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
});

await step("the terminal: a shell in the sandbox, resized, reattached after a reload", async () => {
  await termConnected();
  await termPrompt();
  await termRun("echo hello-$((6*7)) $CONSOLE_TOKEN", "hello-42 s3cret-from-console");
  // A smaller window: the terminal fits it, and the shell sees the new size.
  const before = await page.locator(".xterm-box").getAttribute("data-size");
  await page.setViewportSize({ width: 900, height: 640 });
  await page.waitForFunction((b) => document.querySelector(".xterm-box").dataset.size !== b, before);
  const size = await page.locator(".xterm-box").getAttribute("data-size");
  await termRun("echo size-$(stty size)", `size-${size}`);
  await page.setViewportSize({ width: 1366, height: 820 });
  await page.waitForFunction((b) => document.querySelector(".xterm-box").dataset.size !== b, size);
  // A reload reattaches to the same shell: its variables are still set.
  await termRun("X=kept; echo set-$X", "set-kept");
  const pidBefore = await page.locator(".term-state").textContent();
  await page.reload();
  await termConnected();
  const pidAfter = await page.locator(".term-state").textContent();
  assert(pidAfter === pidBefore, `another shell after the reload: ${pidBefore} / ${pidAfter}`);
  await termRun("echo got-$X", "got-kept");
  await termRun("uname -sr; ls /", "proc");
  await shot("terminal");
});

await step("start a process and follow its live output", async () => {
  await page.getByRole("link", { name: "Processes", exact: true }).click();
  await page.getByLabel("Start a background process").fill("for i in 1 2 3; do echo tick-$i; sleep 0.5; done");
  await page.getByRole("button", { name: "Start", exact: true }).click();
  const out = page.locator("section.output pre");
  await out.getByText("[end of output]").waitFor();
  const text = await out.textContent();
  assert(text.includes("tick-1") && text.includes("tick-3"), `output: ${text}`);
  await page.locator("table[aria-label=Processes] .badge", { hasText: "EXITED" }).first().waitFor();
  await shot("processes");
});

await step("upload a file and download it back", async () => {
  await page.getByRole("link", { name: "Files", exact: true }).click();
  await page.getByLabel("Upload a file into this directory").setInputFiles({
    name: "hello.txt",
    mimeType: "text/plain",
    buffer: Buffer.from(fileText),
  });
  await page.getByRole("button", { name: "Upload", exact: true }).click();
  await page.locator('tr[data-path="/tmp/hello.txt"]').waitFor();
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("link", { name: "Download hello.txt", exact: true }).click(),
  ]);
  const got = readFileSync(await download.path(), "utf8");
  assert(got === fileText, `downloaded ${JSON.stringify(got)}`);
  await page.getByLabel("New directory").fill("made-by-console");
  await page.getByRole("button", { name: "Create", exact: true }).click();
  await page.locator('tr[data-path="/tmp/made-by-console"]').waitFor();
  assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
  await shot("files");
});

await step("the sandbox page shows CPU and memory sparklines", async () => {
  // sbxd samples every few seconds; a chart's line appears once there are samples.
  for (const metric of ["cpu", "memory"]) {
    // "attached": a flat line (an idle CPU) has no height, which Playwright counts as hidden.
    await page.locator(`.usage-chart[data-metric="${metric}"] svg.spark polyline`).waitFor({ state: "attached", timeout: 60_000 });
  }
  const now = await page.locator('.usage-chart[data-metric="memory"] .usage-now').textContent();
  assert(/MiB of 1\.0 GiB|KiB of/.test(now), `memory caption: ${now}`);
});

await step("a busy process shows in the sparklines (usage screenshot)", async () => {
  // One vCPU kept busy by a process holding 200 MiB: both lines climb.
  await page.getByRole("link", { name: "Processes", exact: true }).click();
  const busy = "python3 -c \"b = b'x' * (200 << 20); exec('while True: pass')\"";
  await page.getByLabel("Start a background process").fill(busy);
  await page.getByRole("button", { name: "Start", exact: true }).click();
  const row = page.locator("table[aria-label=Processes] tr", { hasText: "while True" });
  await row.locator(".badge", { hasText: "RUNNING" }).waitFor();
  // sbxd samples every second here (--usage-sample-secs 1); the page redraws every 2 s.
  // Wait for 5 samples above 50 % (y of the 36-pixel-high line under 18).
  await page.waitForFunction(() => {
    const line = document.querySelector('.usage-chart[data-metric="cpu"] svg.spark polyline');
    const ys = (line?.getAttribute("points") || "").trim().split(/\s+/).map((p) => Number(p.split(",")[1]));
    return ys.filter((y) => y < 18).length >= 5;
  }, undefined, { timeout: 60_000 });
  const memNow = await page.locator('.usage-chart[data-metric="memory"] .usage-now').textContent();
  const mib = /^([\d.]+) MiB of 1\.0 GiB/.exec(memNow);
  assert(mib && Number(mib[1]) >= 200, `memory caption: ${memNow}`);
  await shot("usage");
  await row.getByRole("button", { name: "Kill", exact: true }).click();
  await row.locator(".badge", { hasText: /EXITED|SIGNALED|KILLED/ }).waitFor();
});

await step("preview URLs: token, public, a port's URL, off", async () => {
  const panel = page.locator("section.panel");
  await page.getByRole("link", { name: "Preview", exact: true }).click();
  await panel.locator("p", { hasText: "off: preview URLs answer 404" }).waitFor();
  await page.getByRole("button", { name: "Token only", exact: true }).click();
  const token = (await panel.locator("code.mono").textContent()).trim();
  assert(/^[0-9a-f]{64}$/.test(token), `token: ${token}`);
  const apiToken = await page.evaluate(
    async (p) => (await (await fetch(p)).json()).data.token,
    `/v1/sandboxes/${sandboxId}/preview`,
  );
  assert(apiToken === token, `the API's token: ${apiToken}`);
  await page.getByRole("button", { name: "Public", exact: true }).click();
  await panel.locator("p", { hasText: "public: anyone with the URL may call" }).waitFor();
  await page.getByLabel("Port").fill("8000");
  await page.getByRole("button", { name: "Show URL", exact: true }).click();
  const url = `http://8000-${sandboxId}.sbx.localhost/`;
  await panel.getByRole("link", { name: url, exact: true }).waitFor();
  await shot("preview");
  await page.getByRole("button", { name: "Off", exact: true }).click();
  await panel.locator("p", { hasText: "off: preview URLs answer 404" }).waitFor();
  await page.getByRole("link", { name: "Processes", exact: true }).click();
});

await step("pause and resume", async () => {
  await page.getByRole("button", { name: "Pause", exact: true }).click();
  await page.locator(".title-row .badge", { hasText: "PAUSED" }).waitFor();
  await page.getByRole("button", { name: "Resume", exact: true }).click();
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
});

await step("take a snapshot and clone it", async () => {
  await page.getByRole("link", { name: "Snapshots", exact: true }).nth(1).click();
  await page.getByLabel("Snapshot name").fill("console-e2e-snap");
  const progress = shotIfShown("section.panel .progress", "snapshot-progress");
  await page.getByRole("button", { name: "Take snapshot", exact: true }).click();
  await progress;
  await page.getByText("Snapshot console-e2e-snap is READY").waitFor();
  const row = page.locator("table[aria-label=Snapshots] tr", { hasText: "console-e2e-snap" });
  await row.locator(".badge", { hasText: "READY" }).waitFor();
  await shot("snapshots");
  await row.getByRole("button", { name: "Clone", exact: true }).click();
  await page.getByLabel("Clone name").fill("console-e2e-clone");
  await page.getByRole("button", { name: "Create clone", exact: true }).click();
  await page.getByRole("heading", { name: "console-e2e-clone" }).waitFor();
  cloneId = page.url().split("/").pop();
  assert(cloneId !== sandboxId, "the clone has its own id");
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
  await termConnected();
  await termRun("cat /tmp/hello.txt", fileText.trim());
});

await step("the lists: sandboxes, snapshots", async () => {
  await page.getByRole("link", { name: "Sandboxes", exact: true }).first().click();
  await page.locator(`tr[data-id="${cloneId}"] .badge`).waitFor();
  await page.locator(`tr[data-id="${sandboxId}"]`).waitFor();
  await shot("sandboxes");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Snapshots", exact: true }).click();
  await page.locator("table[aria-label=Snapshots] tr", { hasText: "console-e2e-snap" }).waitFor();
  await shot("snapshots-page");
});

await step("volumes: create one, mount it from the create form, delete it once unmounted", async () => {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Volumes", exact: true }).click();
  await page.getByRole("heading", { name: "Volumes", exact: true }).waitFor();
  await page.getByLabel("Name").fill("console-vol");
  await page.getByLabel("Size (MiB)").fill("32");
  assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
  await page.getByRole("button", { name: "Create volume", exact: true }).click();
  const row = page.locator('table[aria-label=Volumes] tr[data-name="console-vol"]');
  await row.waitFor();
  await row.locator("td", { hasText: "32.0 MiB" }).waitFor();
  await shot("volumes");
  await page.goto(`${base}/#/sandboxes/new`);
  await page.getByLabel("Name").fill("console-vol-user");
  await page.getByLabel("Volumes").fill("console-vol:/data");
  await page.getByRole("button", { name: "Create sandbox", exact: true }).click();
  await page.waitForURL(/#\/sandboxes\/[0-9a-f-]{36}$/);
  const id = page.url().split("/").pop();
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
  const mounts = await page.evaluate(async (i) => (await (await fetch(`/v1/sandboxes/${i}`)).json()).data.mounts, id);
  assert(JSON.stringify(mounts) === JSON.stringify([{ name: "console-vol", path: "/data", readOnly: false }]), `mounts: ${JSON.stringify(mounts)}`);
  // Delete is refused while a sandbox mounts it; the error is shown.
  await page.goto(`${base}/#/volumes`);
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await page.locator("main .error", { hasText: "invalid_request" }).waitFor();
  await page.goto(`${base}/#/sandboxes/${id}`);
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
  await page.getByRole("button", { name: "Destroy", exact: true }).click();
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  await page.getByLabel("Show ended sandboxes").check();
  await page.locator(`tr[data-id="${id}"] .badge`, { hasText: "TERMINATED" }).waitFor();
  await page.goto(`${base}/#/volumes`);
  await row.waitFor();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await row.waitFor({ state: "detached" });
});

/** An OCI image layout tarball of one layer holding `/marker` (made with tar(1)). */
function ociImage(marker) {
  const dir = mkdtempSync(join(tmpdir(), "sbx-console-oci-"));
  const sha = (b) => createHash("sha256").update(b).digest("hex");
  const blob = (bytes) => {
    mkdirSync(join(dir, "oci/blobs/sha256"), { recursive: true });
    writeFileSync(join(dir, "oci/blobs/sha256", sha(bytes)), bytes);
    return { digest: `sha256:${sha(bytes)}`, size: bytes.length };
  };
  mkdirSync(join(dir, "root"));
  writeFileSync(join(dir, "root/marker"), marker);
  execFileSync("tar", ["-cf", join(dir, "layer.tar"), "-C", join(dir, "root"), "marker"]);
  const layer = blob(readFileSync(join(dir, "layer.tar")));
  const config = blob(Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", config: { Env: ["FROM_IMAGE=1"] } })));
  const manifest = blob(Buffer.from(JSON.stringify({
    schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
    layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", ...layer }],
  })));
  writeFileSync(join(dir, "oci/oci-layout"), '{"imageLayoutVersion":"1.0.0"}');
  writeFileSync(join(dir, "oci/index.json"), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", ...manifest }] }));
  execFileSync("tar", ["-cf", join(dir, "image.tar"), "-C", join(dir, "oci"), "oci-layout", "index.json", "blobs"]);
  const bytes = readFileSync(join(dir, "image.tar"));
  rmSync(dir, { recursive: true, force: true });
  return bytes;
}

await step("images: import a tarball, see the usage, boot it from the create form, make it the default, delete it", async () => {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Images", exact: true }).click();
  await page.getByRole("heading", { name: "Images", exact: true }).waitFor();
  await page.getByLabel("Image tarball").setInputFiles({ name: "tiny.tar", mimeType: "application/x-tar", buffer: ociImage("from-console") });
  await page.getByLabel("Name and tag", { exact: true }).fill("console-img:1");
  assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
  await page.getByRole("button", { name: "Import image", exact: true }).click();
  const row = page.locator('table[aria-label=Images] tr[data-name="console-img:1"]');
  await row.waitFor();
  await row.locator("td", { hasText: "import" }).waitFor();
  await page.locator("main p", { hasText: "Images take 12 B of this workspace's" }).waitFor();
  await shot("images");
  // The create form offers it; the sandbox boots on it (its only file is
  // /marker: the terminal tab answers 409, the image has no shell).
  await page.goto(`${base}/#/sandboxes/new`);
  await page.getByLabel("Name").fill("console-img-user");
  await page.getByLabel("Image").selectOption("console-img:1");
  await page.getByRole("button", { name: "Create sandbox", exact: true }).click();
  await page.waitForURL(/#\/sandboxes\/[0-9a-f-]{36}$/);
  const id = page.url().split("/").pop();
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
  const sandbox = await page.evaluate(async (i) => (await (await fetch(`/v1/sandboxes/${i}`)).json()).data, id);
  assert(sandbox.imageRef.startsWith("console-img:1@sha256:"), `imageRef: ${sandbox.imageRef}`);
  assert(sandbox.environment && sandbox.environment.FROM_IMAGE === "1", `environment: ${JSON.stringify(sandbox.environment)}`);
  await page.getByRole("link", { name: "Files", exact: true }).click();
  // The tab lists /tmp first; open / only after that, or the first listing wins.
  await page.locator("main", { hasText: "/tmp is empty." }).waitFor();
  await page.getByLabel("Directory", { exact: true }).fill("/");
  await page.getByRole("button", { name: "Open", exact: true }).click();
  await page.locator('table[aria-label="Files in /"]', { hasText: "marker" }).waitFor();
  await page.getByRole("button", { name: "Destroy", exact: true }).click();
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  // Make default: the list shows it first as the workspace's default; undo it; delete.
  await page.goto(`${base}/#/images`);
  await row.getByRole("button", { name: "Make default", exact: true }).click();
  const def = page.locator('table[aria-label=Images] tr[data-name="default:latest"]', { hasText: "this workspace's default" });
  await def.waitFor();
  await def.getByRole("button", { name: "Use the node's default", exact: true }).click();
  await def.waitFor({ state: "detached" });
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await row.waitFor({ state: "detached" });
});

await step("images: build from a Dockerfile typed in the form, its log live, then again from the cache", async () => {
  await page.goto(`${base}/#/images`);
  await page.getByRole("heading", { name: "Images", exact: true }).waitFor();
  await page.getByLabel("Image name and tag").fill("console-built:1");
  await page.getByLabel("Dockerfile", { exact: true }).fill("FROM default\nRUN echo building-now && echo hi > /hello\nENV GREETING=hi\n");
  await page.getByRole("button", { name: "Build image", exact: true }).click();
  const log = page.getByLabel("Build log");
  await log.locator("span", { hasText: /^building-now\s*$/ }).waitFor();
  await page.locator("main p", { hasText: "Built console-built:1" }).waitFor({ timeout: 180_000 });
  const text = await log.textContent();
  assert(text.includes("Step 2/3 (line 2): RUN echo building-now") && !text.includes("[cached]"), `log: ${text}`);
  await page.locator('table[aria-label=Images] tr[data-name="console-built:1"]', { hasText: "build" }).waitFor();
  await shot("image-build");
  // The same Dockerfile again: every step from the cache, nothing run.
  await page.getByLabel("Image name and tag").fill("console-built:1");
  await page.getByRole("button", { name: "Build image", exact: true }).click();
  await page.locator("main p", { hasText: "Built console-built:1" }).waitFor();
  const again = await log.textContent();
  assert(again.includes("[cached]") && !again.includes("building-now\n"), `cached log: ${again}`);
  await page.locator('table[aria-label=Images] tr[data-name="console-built:1"]').getByRole("button", { name: "Delete", exact: true }).click();
  await page.locator('table[aria-label=Images] tr[data-name="console-built:1"]').waitFor({ state: "detached" });
});

await step("templates: create one with a start command and a port check, READY, create a sandbox from it, delete it", async () => {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Templates", exact: true }).click();
  await page.getByRole("heading", { name: "Templates", exact: true }).waitFor();
  await page.getByLabel("Name", { exact: true }).fill("console-web");
  await page.getByLabel("Start command").fill("python3 -m http.server 8000");
  await page.getByLabel("Ready when").selectOption("port");
  await page.getByLabel("Port").fill("8000");
  assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
  await page.getByRole("button", { name: "Create template", exact: true }).click();
  const row = page.locator('table[aria-label=Templates] tr[data-name="console-web"]');
  await row.locator(".badge", { hasText: "READY" }).waitFor();
  await shot("templates");
  // The create form offers it; the clone's server answers at once.
  await page.goto(`${base}/#/sandboxes/new`);
  await page.getByLabel("Name").fill("console-from-template");
  await page.getByLabel("Template").selectOption("console-web");
  assert(await page.getByLabel("Image").isHidden(), "the image field is hidden for a template");
  await page.getByRole("button", { name: "Create sandbox", exact: true }).click();
  await page.waitForURL(/#\/sandboxes\/[0-9a-f-]{36}$/);
  const id = page.url().split("/").pop();
  await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
  const got = await page.evaluate(async ([i, csrf]) => {
    const sandbox = (await (await fetch(`/v1/sandboxes/${i}`)).json()).data;
    const exec = await fetch(`/v2/sandboxes/${i}/exec`, {
      method: "POST", headers: { "content-type": "application/json", ...(csrf ? { "x-csrf-token": csrf } : {}) },
      body: JSON.stringify({ command: ["python3", "-c", "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').status)"] }),
    });
    return { template: sandbox.template, status: exec.status, exec: await exec.text() };
  }, [id, await csrfToken()]);
  assert(got.template === "console-web", `template: ${JSON.stringify(got)}`);
  const printed = got.status === 200 ? Buffer.from(JSON.parse(got.exec).data.stdout, "base64").toString() : "";
  assert(printed === "200\n", `the first exec reaches the server: ${JSON.stringify(got)}`);
  await page.getByRole("button", { name: "Destroy", exact: true }).click();
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  await page.goto(`${base}/#/templates`);
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await row.waitFor({ state: "detached" });
});

await step("keyboard: Tab reaches New sandbox, Enter opens the form with its name field labelled", async () => {
  await page.goto(`${base}/#/sandboxes`);
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  let found = false;
  for (let i = 0; i < 20 && !found; i++) {
    await page.keyboard.press("Tab");
    found = await page.evaluate(() => document.activeElement?.textContent === "New sandbox");
  }
  assert(found, "Tab never reached the New sandbox link");
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "New sandbox" }).waitFor();
  await page.getByRole("textbox", { name: "Name" }).waitFor();
});

await step("an API error is shown with its code and request id", async () => {
  await page.goto(`${base}/#/sandboxes/00000000-0000-4000-8000-000000000000`);
  const alert = page.locator("#alerts .error");
  await alert.waitFor();
  const text = await alert.textContent();
  assert(text.includes("sandbox_not_found") && /request id [0-9a-f-]{36}/.test(text), `alert: ${text}`);
});

await step("destroy the clone and the sandbox, delete the snapshot", async () => {
  for (const id of [cloneId, sandboxId]) {
    await page.goto(`${base}/#/sandboxes/${id}`);
    await page.locator(".title-row .badge", { hasText: "RUNNING" }).waitFor();
    await page.getByRole("button", { name: "Destroy", exact: true }).click();
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  }
  await page.getByLabel("Show ended sandboxes").check();
  await page.locator(`tr[data-id="${sandboxId}"] .badge`, { hasText: "TERMINATED" }).waitFor();
  await page.locator(`tr[data-id="${cloneId}"] .badge`, { hasText: "TERMINATED" }).waitFor();
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Snapshots", exact: true }).click();
  const row = page.locator("table[aria-label=Snapshots] tr", { hasText: "console-e2e-snap" });
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await row.waitFor({ state: "detached" });
});

// ---- Connect: packages, builds, connections, runs and logs ----
const mainNav = () => page.getByRole("navigation", { name: "Main" });
let connectionId = "";

if (tarball) {
  await step("packages: upload the connector-items tarball through the page", async () => {
    await mainNav().getByRole("link", { name: "Packages", exact: true }).click();
    await page.getByRole("heading", { name: "Packages" }).waitFor();
    assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
    await page.getByLabel("Package tarball (.tgz)").setInputFiles(tarball);
    await page.getByRole("button", { name: "Upload", exact: true }).click();
    await page.getByRole("heading", { name: "connector-items 1.0.0" }).waitFor();
    await page.getByText("Not built yet").waitFor();
  });

  await step("start a build, see its progress, status and log", async () => {
    const progress = shotIfShown("main .progress", "package-build-progress");
    await page.getByRole("button", { name: "Start build", exact: true }).click();
    await progress;
    await page.locator("table[aria-label=Builds] .badge", { hasText: "succeeded" }).waitFor({ timeout: 300_000 });
    await page.getByText("Build succeeded").waitFor({ timeout: 30_000 });
    const log = await page.getByRole("region", { name: "Build log" }).locator("pre").textContent();
    assert(log.trim().length > 0 && !log.includes("(waiting for output"), `build log: ${log}`);
    assert((await page.locator(".facts").textContent()).includes("generate (append)"), "the definition lists the generate sync");
    await shot("package-build");
    await mainNav().getByRole("link", { name: "Packages", exact: true }).click();
    const row = page.locator('tr[data-package="connector-items"][data-version="1.0.0"]');
    await row.locator(".badge", { hasText: "succeeded" }).waitFor();
    assert((await row.textContent()).includes("generate"), "the list shows the syncs");
    await shot("packages");
  });

  await step("create a connection: version, origin, API key, config from the schema", async () => {
    await mainNav().getByRole("link", { name: "Connections", exact: true }).click();
    await page.getByRole("heading", { name: "Connections" }).waitFor();
    await page.getByRole("link", { name: "New connection", exact: true }).click();
    await page.getByRole("heading", { name: "New connection" }).waitFor();
    await page.getByLabel("Package version").selectOption({ label: "connector-items 1.0.0" });
    await page.getByLabel("Connection name").fill("items-e2e");
    await page.getByLabel("Origin").fill("https://example.invalid");
    await page.getByLabel("API key").fill("k-console-e2e");
    const count = page.getByLabel("generateCount");
    await count.fill("2500");
    const hint = await page.locator(`#${await count.getAttribute("id")}-hint`).textContent();
    assert(hint.includes("Records the generate sync produces") && hint.includes("default 1000"), `config hint: ${hint}`);
    assert(await page.getByLabel("pageSize").count() === 1, "every config property has a field");
    assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
    await shot("connection-create");
    await page.getByRole("button", { name: "Create connection", exact: true }).click();
    await page.waitForURL((u) => /^#\/connections\/[^/]+$/.test(u.hash) && u.hash !== "#/connections/new");
    connectionId = decodeURIComponent(page.url().split("/").pop());
    await page.getByRole("heading", { name: "items-e2e" }).waitFor();
    assert((await page.locator(".facts").textContent()).includes('"generateCount":2500'), "the config is saved");
  });

  await step("Run now on the generate sync: live progress, then 2500 records committed and the run's logs", async () => {
    await runNow("generate", 2500, "connection-run-progress");
    const row = page.locator('table[aria-label=Runs] tr[data-sync="generate"]').first();
    await row.locator(".badge", { hasText: "succeeded" }).waitFor();
    const text = await row.textContent();
    assert(/2,?500/.test(text), `runs row: ${text}`);
    assert(/\d+(\.\d)? (ms|s)/.test(text), `no duration: ${text}`);
    await shot("connection-runs");
  });

  await step("the Logs tab shows the run's recorded messages", async () => {
    await page.locator('table[aria-label=Runs] tr[data-sync="generate"]').first().getByRole("link", { name: /^Logs of run/ }).click();
    await page.getByLabel("Run", { exact: true }).waitFor();
    await page.locator("table[aria-label=Logs]", { hasText: "generated 2500 records" }).waitFor();
    await shot("connection-logs");
    await page.getByLabel("Run", { exact: true }).selectOption("");
    await page.waitForURL(/\/logs$/);
    await page.locator("table[aria-label=Logs]", { hasText: "generated 2500 records" }).waitFor();
  });

  await step("Records: page 2 of the generate sync, a record as JSON, the last checkpoint", async () => {
    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.getByLabel("Sync", { exact: true }).selectOption("generate");
    await page.waitForURL(/\/records\/generate$/);
    const table = page.locator("table[aria-label=Records]");
    await table.locator('tr[data-n="1"]').waitFor();
    assert(await table.locator("tbody tr").count() === 20, "20 records a page");
    assert(await page.getByLabel("Primary key", { exact: true }).isDisabled(), "an append sync has no key to filter on");
    await page.getByRole("button", { name: "Next page", exact: true }).click();
    await page.locator(".page-label", { hasText: "Page 2 · records 21–40" }).waitFor();
    const first = await table.locator('tr[data-n="21"]').textContent();
    assert(first.includes('"id":20'), `page 2 starts at id 20: ${first}`);
    await page.getByRole("button", { name: "View record 21 as JSON", exact: true }).click();
    const json = await page.getByRole("region", { name: "Record JSON" }).locator("pre").textContent();
    assert(JSON.parse(json).id === 20, `record JSON: ${json}`);
    const cp = JSON.parse(await page.getByRole("region", { name: "Last committed checkpoint" }).locator("pre").textContent());
    assert(cp.runs === 1 && cp.generated === 2500, `checkpoint: ${JSON.stringify(cp)}`);
    await page.getByRole("button", { name: "Previous page", exact: true }).click();
    await page.locator(".page-label", { hasText: "Page 1 · records 1–20" }).waitFor();
    await page.getByRole("button", { name: "Next page", exact: true }).click();
    await page.locator(".page-label", { hasText: "Page 2" }).waitFor();
    await page.getByRole("button", { name: "View record 21 as JSON", exact: true }).click();
    assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
    await fullShot("connection-records");
  });

  await step("Edit: a bad config value is refused next to its field, nothing changes", async () => {
    await page.getByRole("link", { name: "Edit", exact: true }).click();
    await page.getByRole("heading", { name: "Edit items-e2e" }).waitFor();
    const count = page.getByLabel("generateCount");
    assert(await count.inputValue() === "2500", `the stored config is shown: ${await count.inputValue()}`);
    assert(await page.getByLabel("pageSize").inputValue() === "100", "defaults the server applied are shown");
    assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
    await count.fill("0");
    await page.getByRole("button", { name: "Save changes", exact: true }).click();
    const error = page.locator(`#${await count.getAttribute("id")}-error`);
    await error.waitFor();
    assert((await error.textContent()).includes("must be >= 1"), `field error: ${await error.textContent()}`);
    assert(await count.getAttribute("aria-invalid") === "true", "the field is marked invalid");
    assert((await count.getAttribute("aria-describedby")).includes(`${await count.getAttribute("id")}-error`), "the error describes the field");
    assert(page.url().endsWith("/edit"), "the form stays");
    await fullShot("connection-edit-error");
    const saved = await page.evaluate(async (id) => (await (await fetch(`/v1/connect/connections/${id}`)).json()).data, connectionId);
    assert(saved.config.generateCount === 2500, `a refused edit changed the config: ${JSON.stringify(saved.config)}`);
  });

  await step("Edit: a new item count is saved and used by the next run (1200 records)", async () => {
    const count = page.getByLabel("generateCount");
    await count.fill("1200");
    await page.getByRole("button", { name: "Save changes", exact: true }).click();
    await page.getByRole("heading", { name: "items-e2e" }).waitFor();
    await page.locator(".facts", { hasText: '"generateCount":1200' }).waitFor();
    await runNow("generate", 1200);
    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.getByLabel("Sync", { exact: true }).selectOption("generate");
    await page.waitForURL(/\/records\/generate$/);
    const cp = page.getByRole("region", { name: "Last committed checkpoint" }).locator("pre");
    await cp.waitFor();
    const checkpoint = JSON.parse(await cp.textContent());
    assert(checkpoint.runs === 2 && checkpoint.generated === 1200, `checkpoint: ${JSON.stringify(checkpoint)}`);
    await page.getByRole("link", { name: "Runs", exact: true }).click();
    const rows = page.locator('table[aria-label=Runs] tr[data-sync="generate"]');
    await rows.nth(1).waitFor();
    const counts = [await rows.nth(0).textContent(), await rows.nth(1).textContent()];
    assert(/1,?200/.test(counts[0]) && /2,?500/.test(counts[1]), `runs: ${counts}`);
  });

  await step("Test connection: the failed verify shows its category, no message", async () => {
    await page.getByRole("link", { name: "Runs", exact: true }).click();
    await page.getByRole("button", { name: "Test connection", exact: true }).click();
    const result = page.locator(".test-result");
    await result.waitFor({ timeout: 240_000 });
    const text = await result.textContent();
    assert(text.includes("Connection test failed") && text.includes("package_error"), `test result: ${text}`);
    assert(!/example\.invalid|ENOTFOUND|EAI_AGAIN|fetch failed|Error:/i.test(text), `a message leaked: ${text}`);
    const row = page.locator("table[aria-label=Runs] tr", { hasText: "connection test" }).first();
    await row.locator(".badge", { hasText: "failed" }).waitFor();
    assert((await row.textContent()).includes("package_error"), "the runs table shows the category");
    await shot("connection-test");
  });

  if (oauthTarball) {
    await step("OAuth: a new OAuth2 connection needs authorization; Reconnect goes to the provider", async () => {
      await mainNav().getByRole("link", { name: "Packages", exact: true }).click();
      await page.getByLabel("Package tarball (.tgz)").setInputFiles(oauthTarball);
      await page.getByRole("button", { name: "Upload", exact: true }).click();
      await page.getByRole("heading", { name: "connector-oauth 1.0.0" }).waitFor();
      await page.getByRole("button", { name: "Start build", exact: true }).click();
      await page.getByText("Build succeeded").waitFor({ timeout: 300_000 });
      await mainNav().getByRole("link", { name: "Connections", exact: true }).click();
      await page.getByRole("link", { name: "New connection", exact: true }).click();
      await page.getByLabel("Package version").selectOption({ label: "connector-oauth 1.0.0" });
      await page.getByLabel("Connection name").fill("oauth-e2e");
      await page.getByLabel("Origin").fill("https://example.invalid");
      await page.getByLabel("OAuth client id").fill("client-e2e");
      assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
      await page.getByRole("button", { name: "Create connection", exact: true }).click();
      await page.getByRole("heading", { name: "oauth-e2e" }).waitFor();
      await page.locator(".title-row .badge", { hasText: "Reauthorization required" }).waitFor();
      // The edit form says so too, offers Reconnect, and no status to pick.
      await page.getByRole("link", { name: "Edit", exact: true }).click();
      await page.getByRole("heading", { name: "Edit oauth-e2e" }).waitFor();
      await page.locator(".reauth", { hasText: "Reauthorization required" }).waitFor();
      assert(await page.getByLabel("Status").count() === 0, "no status select while reauthorization is required");
      await page.route("https://auth.example.invalid/**", (r) => r.fulfill({ status: 200, contentType: "text/plain", body: "the provider" }));
      await page.locator(".reauth").getByRole("button", { name: "Reconnect", exact: true }).click();
      await page.waitForURL(/^https:\/\/auth\.example\.invalid\/authorize\?/);
      assert(new URL(page.url()).searchParams.get("client_id") === "client-e2e", `authorize URL: ${page.url()}`);
      await page.goto(`${base}/#/connections`);
      await mainNav().getByRole("link", { name: "Connections", exact: true }).click();
      await page.locator("table[aria-label=Connections] tr", { hasText: "oauth-e2e" }).locator(".badge", { hasText: "Reauthorization required" }).waitFor();
      await page.locator(`tr[data-id="${connectionId}"] .badge`, { hasText: "Active" }).waitFor();
      await shot("connections");
      await page.getByRole("button", { name: "Reconnect oauth-e2e", exact: true }).click();
      await page.waitForURL(/^https:\/\/auth\.example\.invalid\/authorize\?/);
      const url = new URL(page.url());
      assert(url.searchParams.get("client_id") === "client-e2e", `authorize URL: ${url}`);
      assert(url.searchParams.get("redirect_uri") === `${base}/`, `redirect_uri: ${url.searchParams.get("redirect_uri")}`);
      const state = url.searchParams.get("state");
      assert(state, "no state");
      // Back with a code: the token endpoint cannot be reached, and the console says so.
      await page.goto(`${base}/?code=fake-code&state=${encodeURIComponent(state)}`);
      const alert = page.locator("#alerts .error");
      await alert.waitFor({ timeout: 120_000 });
      const text = await alert.textContent();
      assert(/connect_oauth_\w+/.test(text) && /request id [0-9a-f-]{36}/.test(text), `alert: ${text}`);
      assert(!page.url().includes("code="), `the code stays in the URL: ${page.url()}`);
      await page.getByRole("heading", { name: "Connections" }).waitFor();
    });
  }

  if (webhooksTarball) {
    let hooksId = "";
    await step("webhooks: a delivery shows in the Deliveries tab and its records filter by key", async () => {
      await mainNav().getByRole("link", { name: "Packages", exact: true }).click();
      await page.getByLabel("Package tarball (.tgz)").setInputFiles(webhooksTarball);
      await page.getByRole("button", { name: "Upload", exact: true }).click();
      await page.getByRole("heading", { name: "connector-webhooks 1.0.0" }).waitFor();
      await page.getByRole("button", { name: "Start build", exact: true }).click();
      await page.getByText("Build succeeded").waitFor({ timeout: 300_000 });
      await mainNav().getByRole("link", { name: "Connections", exact: true }).click();
      await page.getByRole("link", { name: "New connection", exact: true }).click();
      await page.getByLabel("Package version").selectOption({ label: "connector-webhooks 1.0.0" });
      await page.getByLabel("Connection name").fill("hooks-e2e");
      await page.getByLabel("Origin").fill("https://example.invalid");
      await page.getByLabel("API key").fill("k-hooks-original");
      await page.getByRole("button", { name: "Create connection", exact: true }).click();
      await page.getByRole("heading", { name: "hooks-e2e" }).waitFor();
      hooksId = decodeURIComponent(page.url().split("/").pop());
      // The delivery URLs come from the API (or sbx connect webhooks); a sender posts to them.
      const setup = await page.evaluate(async ([id, csrf]) => {
        const r = await fetch(`/v1/connect/connections/${id}/webhooks`, {
          method: "POST",
          headers: { "content-type": "application/json", ...(csrf ? { "x-csrf-token": csrf } : {}) },
          body: JSON.stringify({ signature: { scheme: "none", idHeader: "X-Delivery" } }),
        });
        return { status: r.status, body: await r.json() };
      }, [hooksId, await csrfToken()]);
      assert(setup.status === 200, `webhooks setup: ${JSON.stringify(setup)}`);
      const events = setup.body.data.webhooks.find((w) => w.name === "events").path;
      const delivery = { events: Array.from({ length: 30 }, (_, i) => ({ id: i + 1, n: `event ${i + 1}` })) };
      const sent = await fetch(`${base}${events}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-delivery": "evt-e2e-1" },
        body: JSON.stringify(delivery),
      });
      assert(sent.status === 202, `delivery: ${sent.status} ${await sent.text()}`);
      await page.getByRole("link", { name: "Deliveries", exact: true }).click();
      const row = page.locator('table[aria-label=Deliveries] tr[data-delivery="evt-e2e-1"]');
      await row.locator(".badge", { hasText: "committed" }).waitFor({ timeout: 240_000 });
      assert((await row.textContent()).includes("30"), `deliveries row: ${await row.textContent()}`);
      await shot("connection-deliveries");

      await page.getByRole("link", { name: "Records", exact: true }).click();
      await page.getByLabel("Sync", { exact: true }).selectOption("events");
      await page.waitForURL(/\/records\/events$/);
      const table = page.locator("table[aria-label=Records]");
      await table.locator('tr[data-n="20"]').waitFor();
      await page.getByText("Webhooks commit no checkpoint.").waitFor();
      await page.getByLabel("Primary key", { exact: true }).fill("7");
      await page.getByRole("button", { name: "Find", exact: true }).click();
      await page.locator(".page-label", { hasText: "Filtered by key 7" }).waitFor();
      assert(await table.locator("tbody tr").count() === 1, "one record has key 7");
      await page.getByRole("button", { name: "View record 1 as JSON", exact: true }).click();
      const json = JSON.parse(await page.getByRole("region", { name: "Record JSON" }).locator("pre").textContent());
      assert(json.id === 7 && json.n === "event 7" && json.deliveryId === "evt-e2e-1", `record: ${JSON.stringify(json)}`);
      await fullShot("connection-records-key");
      await page.getByLabel("Primary key", { exact: true }).fill("99");
      await page.getByRole("button", { name: "Find", exact: true }).click();
      await page.getByText("No committed record has the key 99.").waitFor();
    });

    await step("Edit: schedule and credential rotation; secrets are never shown", async () => {
      await page.getByRole("link", { name: "Edit", exact: true }).click();
      await page.getByRole("heading", { name: "Edit hooks-e2e" }).waitFor();
      assert(!(await page.content()).includes("k-hooks-original"), "the stored API key is on the page");
      await page.getByLabel("Schedule").selectOption({ label: "Every day" });
      await page.getByLabel("Replace the credentials").check();
      await page.getByLabel("API key").fill("k-hooks-rotated");
      assert((await unlabelled()).length === 0, `unlabelled controls: ${await unlabelled()}`);
      await fullShot("connection-edit");
      await page.getByRole("button", { name: "Save changes", exact: true }).click();
      await page.getByRole("heading", { name: "hooks-e2e" }).waitFor();
      await page.locator(".facts", { hasText: "Every day" }).waitFor();
      const got = await page.evaluate(async (id) => (await fetch(`/v1/connect/connections/${id}`)).text(), hooksId);
      const conn = JSON.parse(got).data;
      assert(conn.scheduleIntervalSeconds === 86400 && conn.status === "active", `connection: ${got}`);
      assert(!got.includes("k-hooks"), `a secret in the answer: ${got}`);
    });
  }

  await step("the connections list shows the status", async () => {
    await mainNav().getByRole("link", { name: "Connections", exact: true }).click();
    const row = page.locator(`tr[data-id="${connectionId}"]`);
    await row.locator(".badge", { hasText: "Active" }).waitFor();
    await shot("connections");
  });

  await step("a Connect error is shown with its code and request id", async () => {
    await page.goto(`${base}/#/connections/00000000-0000-4000-8000-000000000000`);
    const alert = page.locator("#alerts .error");
    await alert.waitFor();
    const text = await alert.textContent();
    assert(text.includes("connect_connection_not_found") && /request id [0-9a-f-]{36}/.test(text), `alert: ${text}`);
  });

  await step("delete the connections", async () => {
    await mainNav().getByRole("link", { name: "Connections", exact: true }).click();
    for (const name of ["items-e2e", oauthTarball && "oauth-e2e", webhooksTarball && "hooks-e2e"].filter(Boolean)) {
      await page.getByRole("link", { name, exact: true }).click();
      await page.getByRole("heading", { name }).waitFor();
      await page.getByRole("button", { name: "Delete", exact: true }).click();
      await page.getByRole("heading", { name: "Connections" }).waitFor();
      await page.locator("table[aria-label=Connections] tr", { hasText: name }).waitFor({ state: "detached" });
    }
  });
}

await step("sign out deletes the session", async () => {
  await page.getByRole("button", { name: "Sign out", exact: true }).click();
  await page.getByLabel("API key").waitFor();
  assert(!(await context.cookies()).some((c) => c.name === "sbx_session"), "cookie still set");
  const after = await pageFetch("/v2/sandboxes", {});
  assert(after.status === 401, `after sign-out: ${JSON.stringify(after)}`);
});

await step("no script errors in the page", async () => {
  // A failed request logs a console error by design (the 401/403/404 probes above,
  // the 409 of deleting a mounted volume, the 422 of the refused config edit, and the
  // 502 of the OAuth callback whose provider does not exist, and the 409 of the
  // terminal of the image that has no shell).
  const unexpected = consoleErrors.filter((e) => !/status of (401|403|404|409|422|502)|Unexpected response code: 409/.test(e));
  assert(unexpected.length === 0, unexpected.join("\n"));
});

await finish();
