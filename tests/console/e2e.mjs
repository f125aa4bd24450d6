// End-to-end test of the sbx web console in headless Debian Chromium.
//
//   node e2e.mjs <baseUrl> <key> <screenshotDir>
//   node e2e.mjs <baseUrl> --dev <screenshotDir>     (sbxd --dev: no sign-in, no screenshots)
//
// Signs in (after a wrong key), checks the cookie and CSRF protection, creates a
// sandbox, runs a command, follows a process, uploads and downloads a file,
// snapshots and clones, pauses and resumes, destroys; writes a screenshot of each page.
// Prints "ok   <step>" per step and "N passed, M failed" at the end; exits 1 on failure.

import { chromium } from "playwright-core";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, key, shots] = process.argv.slice(2);
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
  timeout: 60_000,
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
    await page.screenshot({ path: join(shots, "failure.png"), fullPage: true }).catch(() => {});
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}
const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`) });
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
const terminal = () => page.locator("pre.terminal").first();
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

await step("run a command and see its output", async () => {
  await page.getByRole("textbox", { name: "Command", exact: true }).fill("echo hello-from-console $CONSOLE_TOKEN; python3 -c 'print(6*7)'; echo oops >&2");
  await page.getByRole("button", { name: "Run", exact: true }).click();
  await terminal().locator(".exit", { hasText: "[exit 0]" }).waitFor();
  const text = await terminal().textContent();
  assert(text.includes("hello-from-console s3cret-from-console") && text.includes("42") && text.includes("oops"), `terminal: ${text}`);
  await page.getByRole("textbox", { name: "Command", exact: true }).fill("uname -a; ls /");
  await page.getByRole("textbox", { name: "Command", exact: true }).press("Enter");
  await terminal().locator(".exit").nth(1).waitFor();
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
  await page.getByRole("textbox", { name: "Command", exact: true }).fill("cat /tmp/hello.txt");
  await page.getByRole("button", { name: "Run", exact: true }).click();
  await terminal().locator(".exit, .err").filter({ hasText: /\S/ }).first().waitFor();
  const text = await terminal().textContent();
  assert((await terminal().locator(".exit").count()) > 0, `the clone did not answer: ${text}`);
  assert(text.includes(fileText.trim()), `the clone lacks the file: ${text}`);
});

await step("the lists: sandboxes, snapshots, connections placeholder", async () => {
  await page.getByRole("link", { name: "Sandboxes", exact: true }).first().click();
  await page.locator(`tr[data-id="${cloneId}"] .badge`).waitFor();
  await page.locator(`tr[data-id="${sandboxId}"]`).waitFor();
  await shot("sandboxes");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Snapshots", exact: true }).click();
  await page.locator("table[aria-label=Snapshots] tr", { hasText: "console-e2e-snap" }).waitFor();
  await shot("snapshots-page");
  await page.getByRole("link", { name: "Connections", exact: true }).click();
  await page.getByText("Connect is not available yet").waitFor();
  await shot("connections");
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

await step("sign out deletes the session", async () => {
  await page.getByRole("button", { name: "Sign out", exact: true }).click();
  await page.getByLabel("API key").waitFor();
  assert(!(await context.cookies()).some((c) => c.name === "sbx_session"), "cookie still set");
  const after = await pageFetch("/v2/sandboxes", {});
  assert(after.status === 401, `after sign-out: ${JSON.stringify(after)}`);
});

await step("no script errors in the page", async () => {
  // A failed request logs a console error by design (the 401/403/404 probes above).
  const unexpected = consoleErrors.filter((e) => !/status of (401|403|404)/.test(e));
  assert(unexpected.length === 0, unexpected.join("\n"));
});

await finish();
