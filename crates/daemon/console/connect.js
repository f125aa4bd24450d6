// Connect pages: connections (list, create, detail with Runs and Logs, Run now,
// Test connection, Reconnect, delete) and packages (upload, versions, builds
// with their logs).

import { call, get, q } from "./api.js";
import { badge, bytes, errorView, field, h, replace, sleep, time, withProgress } from "./dom.js";
import { POLL_MS, poll } from "./list.js";
import { deliveriesTab } from "./deliveries.js";

const C = "/v1/connect";
const RUN_ENDED = new Set(["succeeded", "failed"]);
const CONNECTION_STATUS = {
  active: "Active",
  reauthorization_required: "Reauthorization required",
  disabled: "Disabled",
};
const SCHEDULES = [
  ["", "Run now only (no schedule)"],
  ["900", "Every 15 minutes"],
  ["3600", "Every hour"],
  ["21600", "Every 6 hours"],
  ["86400", "Every day"],
];

/** Every item of a Connect list (follows `page.cursor`). */
async function connectAll(path, signal, maxPages = 20) {
  const items = [];
  let cursor = "";
  for (let i = 0; i < maxPages; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const { data, page } = await call("GET", `${path}${sep}limit=1000${cursor ? `&cursor=${q(cursor)}` : ""}`, undefined, { signal });
    items.push(...data);
    if (!page || !page.hasMore) break;
    cursor = page.cursor;
  }
  return items;
}

const versionPath = (name, version) => `${C}/packages/${q(name)}/versions/${q(version)}`;

function connectionBadge(status) {
  return h("span", { class: `badge s-${status}` }, CONNECTION_STATUS[status] || status);
}

function duration(ms) {
  if (ms === null || ms === undefined) return h("span", { class: "muted" }, "—");
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

function schedule(seconds) {
  if (!seconds) return "Run now only";
  const known = SCHEDULES.find(([v]) => Number(v) === seconds);
  return known ? known[1] : `Every ${seconds} s`;
}

/** The failure of a run as its category (and kind): runs never carry a message. */
function failure(run) {
  if (!run.failureCategory) return h("span", { class: "muted" }, "—");
  return h("span", { class: "failure" }, h("code", {}, run.failureCategory), run.failureKind ? h("span", { class: "muted small" }, ` (${run.failureKind})`) : null);
}

/** Starts OAuth for a connection and sends the browser to the provider. */
async function reconnect(id) {
  const { data } = await call("POST", `${C}/connections/${q(id)}/oauth/start`, { redirectUri: `${location.origin}/` });
  location.assign(data.authorizeUrl);
}

/**
 * The provider sends the browser back to `/?code=…&state=…`: finish the OAuth
 * sign-in, then leave the URL on the connection (or the list) for the router.
 * Resolves to the error to show, if any.
 */
export async function finishOauth() {
  const params = new URLSearchParams(location.search);
  if (!params.has("state") || !(params.has("code") || params.has("error"))) return null;
  history.replaceState(null, "", "/#/connections");
  if (params.has("error")) {
    return { code: params.get("error"), message: params.get("error_description") || "the provider refused the authorization" };
  }
  try {
    const { data } = await call("POST", `${C}/oauth/callback`, { state: params.get("state"), code: params.get("code") });
    history.replaceState(null, "", `/#/connections/${data.connection.id}`);
    return null;
  } catch (err) {
    return err;
  }
}

/** `#/connections`: every connection with its status (polled). */
export async function connectionsPage(el, signal) {
  const updated = h("span", { class: "muted", "aria-live": "off" });
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(
    el,
    h("div", { class: "title-row" }, h("h1", {}, "Connections"), h("span", { class: "spacer" }),
      h("a", { class: "button", href: "#/packages" }, "Packages"),
      h("a", { class: "button primary", href: "#/connections/new" }, "New connection")),
    h("div", { class: "toolbar" }, updated),
    status,
    body,
  );
  let seen = "";
  await poll(signal, POLL_MS, async () => {
    const rows = await connectAll(`${C}/connections`, signal);
    updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    const now = JSON.stringify(rows);
    if (now === seen) return; // unchanged: keep keyboard focus
    seen = now;
    if (rows.length === 0) {
      replace(body, h("p", { class: "empty" }, "No connections yet. ",
        h("a", { href: "#/packages" }, "Upload and build a package"), ", then ",
        h("a", { href: "#/connections/new" }, "create a connection"), "."));
      return;
    }
    replace(body, h("table", { class: "grid", "aria-label": "Connections" },
      h("thead", {}, h("tr", {}, ["Name", "Status", "Package", "Origin", "Schedule", "Created"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((c) => {
        let action = null;
        if (c.status === "reauthorization_required") {
          action = h("button", { type: "button", class: "primary", "aria-label": `Reconnect ${c.name}` }, "Reconnect");
          action.addEventListener("click", () => withProgress(status, action, "Starting the OAuth sign-in", () => reconnect(c.id))
            .catch((err) => replace(status, errorView(err))));
        }
        return h("tr", { "data-id": c.id },
          h("td", { class: "nowrap" }, h("a", { href: `#/connections/${c.id}` }, c.name)),
          h("td", { class: "actions" }, connectionBadge(c.status), action),
          h("td", { class: "nowrap" }, h("code", {}, `${c.package}@${c.version}`)),
          h("td", {}, c.origin),
          h("td", {}, schedule(c.scheduleIntervalSeconds)),
          h("td", {}, time(c.createdAt)));
      }))));
  });
}

/** The built package versions (those with a definition), for the create form. */
async function builtVersions(signal) {
  const packages = await connectAll(`${C}/packages`, signal);
  const out = [];
  for (const p of packages) {
    for (const v of p.versions) {
      const pv = await get(versionPath(p.name, v), { signal });
      if (pv.definition) out.push(pv);
    }
  }
  return out;
}

/** Form controls for the credentials of an auth kind. */
function credentialFields(auth) {
  // minlength: sbxd refuses secrets under 8 bytes (they could not be redacted from answers).
  const secret = (label, name, hint) => field(label, h("input", { type: "password", name, required: true, minlength: 8, autocomplete: "off", spellcheck: "false" }), hint);
  const text = (label, name, required, hint) => field(label, h("input", { name, required, autocomplete: "off", spellcheck: "false" }), hint);
  const where = auth.header ? `sent as the ${auth.header} header` : auth.query ? `sent as the ${auth.query} query parameter` : null;
  switch (auth.type) {
    case "apiKey": {
      const [f, key] = secret("API key", "cred-key", where);
      return { fields: [f], value: () => ({ type: "apiKey", key: key.value }) };
    }
    case "bearer": {
      const [f, token] = secret("Bearer token", "cred-token");
      return { fields: [f], value: () => ({ type: "bearer", token: token.value }) };
    }
    case "basic": {
      const [fu, user] = text("Username", "cred-username", true);
      const [fp, pass] = secret("Password", "cred-password");
      return { fields: [fu, fp], value: () => ({ type: "basic", username: user.value, password: pass.value }) };
    }
    case "oauth2": {
      const [fi, id] = text("OAuth client id", "cred-client-id", true);
      const [fs, sec] = field("OAuth client secret", h("input", { type: "password", name: "cred-client-secret", minlength: 8, autocomplete: "off" }), "Optional with PKCE. After creating, Reconnect signs in with the provider.");
      return { fields: [fi, fs], value: () => ({ type: "oauth2", clientId: id.value, clientSecret: sec.value || null }) };
    }
    default:
      return { fields: [h("p", { class: "muted" }, "This package needs no credentials.")], value: () => ({ type: "none" }) };
  }
}

/** Form controls for the top-level properties of a JSON schema; `value()` builds the config. */
function configFields(schema) {
  const props = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  const readers = [];
  const fields = Object.entries(props).map(([name, s]) => {
    const type = Array.isArray(s.type) ? s.type.find((t) => t !== "null") : s.type;
    const label = `${s.title || name}${required.has(name) ? " (required)" : ""}`;
    const hints = [s.description, s.default !== undefined ? `default ${JSON.stringify(s.default)}` : null,
      s.minimum !== undefined ? `min ${s.minimum}` : null, s.maximum !== undefined ? `max ${s.maximum}` : null].filter(Boolean);
    const hint = hints.join(" · ") || null;
    const attrs = { name: `config-${name}`, "data-config": name, required: required.has(name), autocomplete: "off", spellcheck: "false" };
    let control;
    let read;
    if (Array.isArray(s.enum)) {
      control = h("select", attrs, h("option", { value: "" }, "(default)"), s.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
      read = () => (control.value === "" ? undefined : JSON.parse(control.value));
    } else if (type === "boolean") {
      control = h("select", attrs, h("option", { value: "" }, "(default)"), h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
      read = () => (control.value === "" ? undefined : control.value === "true");
    } else if (type === "integer" || type === "number") {
      control = h("input", { ...attrs, type: "number", step: type === "integer" ? 1 : "any", min: s.minimum, max: s.maximum, placeholder: s.default });
      read = () => (control.value === "" ? undefined : Number(control.value));
    } else if (type === "string") {
      control = h("input", { ...attrs, pattern: s.pattern, placeholder: s.default });
      read = () => (control.value === "" ? undefined : control.value);
    } else {
      control = h("textarea", { ...attrs, rows: 3, class: "mono", placeholder: "JSON" });
      read = () => {
        if (control.value.trim() === "") return undefined;
        try {
          return JSON.parse(control.value);
        } catch (e) {
          throw Object.assign(new Error(`config.${name}: not JSON (${e.message})`), { code: "invalid_json" });
        }
      };
    }
    readers.push([name, read]);
    return field(label, control, hint)[0];
  });
  return {
    fields,
    value: () => {
      const out = {};
      for (const [name, read] of readers) {
        const v = read();
        if (v !== undefined) out[name] = v;
      }
      return out;
    },
  };
}

/** `#/connections/new`: package version, name, origin, credentials, config, schedule. */
export async function newConnectionPage(el, signal) {
  const status = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "card wide", "aria-labelledby": "new-connection-title" },
    h("h1", { id: "new-connection-title" }, "New connection"), h("p", { class: "muted" }, "Loading the built packages…"), status);
  replace(el, form);
  const versions = await builtVersions(signal);
  if (versions.length === 0) {
    replace(form, h("h1", { id: "new-connection-title" }, "New connection"),
      h("p", { class: "empty" }, "No built package versions yet. ", h("a", { href: "#/packages" }, "Upload a package and start a build"), " first."));
    return;
  }
  const [pkgField, pkgSelect] = field("Package version",
    h("select", { name: "package" }, versions.map((v, i) => h("option", { value: String(i) }, `${v.name} ${v.version}`))),
    "Only versions with a successful build are listed.");
  const [nameField, nameInput] = field("Connection name", h("input", { name: "name", required: true, autocomplete: "off" }));
  const [originField, originInput] = field("Origin", h("input", { name: "origin", type: "url", required: true, placeholder: "https://api.example.com", spellcheck: "false" }),
    "The only origin the package may send requests to (https://host).");
  const creds = h("fieldset", { class: "field" });
  const config = h("fieldset", { class: "field" });
  const [scheduleField, scheduleSelect] = field("Schedule", h("select", { name: "schedule" }, SCHEDULES.map(([v, label]) => h("option", { value: v }, label))),
    "Scheduled runs sync every sync of the package; Run now works either way.");
  const button = h("button", { type: "submit", class: "primary" }, "Create connection");
  let credsOf = null;
  let configOf = null;
  const pick = () => {
    const def = versions[Number(pkgSelect.value)].definition;
    credsOf = credentialFields(def.auth);
    replace(creds, h("legend", {}, `Credentials (${def.auth.type})`), credsOf.fields);
    configOf = configFields(def.config);
    replace(config, h("legend", {}, "Configuration"),
      configOf.fields.length ? configOf.fields : h("p", { class: "muted" }, "This package has no configuration."));
  };
  pkgSelect.addEventListener("change", pick);
  pick();
  replace(form, h("h1", { id: "new-connection-title" }, "New connection"), pkgField, nameField, originField, creds, config, scheduleField,
    h("div", { class: "actions" }, button, h("a", { href: "#/connections", class: "button" }, "Cancel")), status);
  nameInput.focus();

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = versions[Number(pkgSelect.value)];
    try {
      const body = {
        name: nameInput.value.trim(),
        package: v.name,
        version: v.version,
        origin: originInput.value.trim(),
        credentials: credsOf.value(),
        config: configOf.value(),
      };
      if (scheduleSelect.value) body.scheduleIntervalSeconds = Number(scheduleSelect.value);
      const conn = await withProgress(status, button, "Creating the connection", async () => (await call("POST", `${C}/connections`, body)).data);
      location.hash = `#/connections/${conn.id}`;
    } catch (err) {
      replace(status, errorView(err));
    }
  });
}

const CONNECTION_TABS = [
  ["runs", "Runs"],
  ["logs", "Logs"],
  ["deliveries", "Deliveries"],
];

/** Waits for a run to end, updating the progress label; returns the run. */
async function waitRun(run, setLabel) {
  const started = Date.now();
  while (!RUN_ENDED.has(run.status)) {
    setLabel(`${run.sync ? `Running ${run.sync}` : `Running ${run.kind}`} (${run.status}, ${run.recordsCommitted} records committed)`);
    await sleep(Date.now() - started < 10000 ? 500 : 1500);
    run = await get(`${C}/runs/${q(run.id)}`);
  }
  return run;
}

function runResult(run, what) {
  if (run.status === "succeeded") {
    return h("p", { class: "ok", role: "status" }, `${what} succeeded: ${run.recordsCommitted} records committed in `, duration(run.durationMs), ".");
  }
  return h("div", { class: "error", role: "alert" }, h("strong", {}, `${what} failed`), " — category ", h("code", {}, run.failureCategory || "unknown"),
    run.failureKind ? [" (", h("code", {}, run.failureKind), ")"] : null, ". The run's own messages are in the Logs tab.");
}

/** `#/connections/{id}/{runs|logs|deliveries}[/{runId}]`: one connection. */
export async function connectionPage(el, signal, id, tab, runId) {
  tab = CONNECTION_TABS.some(([t]) => t === tab) ? tab : "runs";
  const title = h("h1", {}, "Connection");
  const statusSlot = h("span");
  const buttons = {
    reconnect: h("button", { type: "button", class: "primary", hidden: true }, "Reconnect"),
    test: h("button", { type: "button" }, "Test connection"),
    del: h("button", { type: "button", class: "danger" }, "Delete"),
  };
  const facts = h("dl", { class: "facts" });
  const progress = h("div", { "aria-live": "polite", class: "connection-progress" });
  const syncs = h("div");
  const panel = h("section", { class: "panel", "aria-label": CONNECTION_TABS.find(([t]) => t === tab)[1] });
  replace(
    el,
    h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / "),
    h("div", { class: "title-row" }, title, statusSlot, h("span", { class: "spacer" }), buttons.reconnect, buttons.test, buttons.del),
    progress,
    facts,
    syncs,
    h("nav", { class: "tabs", "aria-label": "Connection sections" },
      CONNECTION_TABS.map(([t, label]) => h("a", { href: `#/connections/${id}/${t}`, "aria-current": t === tab ? "page" : false }, label))),
    panel,
  );

  let conn = await get(`${C}/connections/${q(id)}`, { signal });
  const render = () => {
    title.textContent = conn.name;
    replace(statusSlot, connectionBadge(conn.status));
    buttons.reconnect.hidden = conn.authKind !== "oauth2";
    buttons.reconnect.textContent = conn.status === "reauthorization_required" ? "Reconnect" : "Reconnect (OAuth)";
    replace(facts,
      fact("Id", h("code", {}, conn.id)),
      fact("Package", h("a", { href: `#/packages/${q(conn.package)}/${q(conn.version)}` }, h("code", {}, `${conn.package}@${conn.version}`))),
      fact("Origin", conn.origin),
      fact("Credentials", conn.authKind),
      fact("Schedule", schedule(conn.scheduleIntervalSeconds)),
      fact("Config", h("code", {}, JSON.stringify(conn.config))),
      fact("Created", time(conn.createdAt)));
  };
  render();

  buttons.reconnect.addEventListener("click", () => withProgress(progress, buttons.reconnect, "Starting the OAuth sign-in", () => reconnect(id))
    .catch((err) => replace(progress, errorView(err))));
  buttons.test.addEventListener("click", async () => {
    try {
      const run = await withProgress(progress, buttons.test, "Testing the connection (verify in a fresh sandbox)", async () =>
        (await call("POST", `${C}/connections/${q(id)}/test`)).data);
      replace(progress, h("div", { class: "test-result" }, run.status === "succeeded"
        ? h("p", { class: "ok", role: "status" }, "Connection test passed.")
        : runResult(run, "Connection test")));
    } catch (err) {
      replace(progress, errorView(err));
    }
  });
  buttons.del.addEventListener("click", async () => {
    if (!confirm(`Delete connection ${conn.name} with its records, checkpoints and credentials?`)) return;
    try {
      await withProgress(progress, buttons.del, "Deleting", () => call("DELETE", `${C}/connections/${q(id)}`));
      location.hash = "#/connections";
    } catch (err) {
      replace(progress, errorView(err));
    }
  });

  // The package's syncs, each with Run now.
  get(versionPath(conn.package, conn.version), { signal }).then((pv) => {
    const list = (pv.definition && pv.definition.syncs) || [];
    const hooks = (pv.definition && pv.definition.webhooks) || [];
    // Webhooks have no Run now: their senders start them (see the Deliveries tab).
    const hookList = hooks.length === 0 ? [] : [h("h2", { id: "webhooks-title" }, "Webhooks"),
      h("ul", { class: "syncs", "aria-labelledby": "webhooks-title" }, hooks.map((w) => h("li", { "data-webhook": w.name },
        h("span", {}, h("code", {}, w.name), h("span", { class: "muted small" }, ` ${w.mode}${w.primaryKey ? ` on ${[].concat(w.primaryKey).join(", ")}` : ""}`)))))];
    if (list.length === 0) {
      replace(syncs, hooks.length ? hookList : h("p", { class: "muted" }, "The package version has no syncs (or no successful build)."));
      return;
    }
    replace(syncs, ...hookList, h("h2", { id: "syncs-title" }, "Syncs"), h("ul", { class: "syncs", "aria-labelledby": "syncs-title" }, list.map((s) => {
      const run = h("button", { type: "button", "aria-label": `Run now ${s.name}` }, "Run now");
      run.addEventListener("click", async () => {
        try {
          const done = await withProgress(progress, run, `Starting ${s.name}`, async (setLabel) => {
            const { data } = await call("POST", `${C}/connections/${q(id)}/syncs/${q(s.name)}/runs`);
            return waitRun(data, setLabel);
          });
          replace(progress, runResult(done, `Run of ${s.name}`));
        } catch (err) {
          replace(progress, errorView(err));
        }
      });
      return h("li", { "data-sync": s.name },
        h("span", {}, h("code", {}, s.name), h("span", { class: "muted small" }, ` ${s.mode}${s.primaryKey ? ` on ${[].concat(s.primaryKey).join(", ")}` : ""}`)),
        run);
    })));
  }).catch((err) => {
    if (err.name !== "AbortError") replace(syncs, errorView(err));
  });

  const refresh = async () => {
    conn = await get(`${C}/connections/${q(id)}`, { signal });
    render();
  };
  if (tab === "logs") await Promise.all([logsTab(panel, signal, id, runId), poll(signal, 5000, refresh)]);
  else if (tab === "deliveries") await Promise.all([deliveriesTab(panel, signal, id), poll(signal, 5000, refresh)]);
  else await runsTab(panel, signal, id, refresh);
}

function fact(label, value) {
  return [h("div", {}, h("dt", {}, label), h("dd", {}, value))];
}

/** Runs, newest first (polled), each with a link to its logs. */
async function runsTab(el, signal, id, refresh) {
  const table = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el, table);
  let seen = "";
  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", `${C}/connections/${q(id)}/runs?limit=50`, undefined, { signal });
    await refresh();
    const now = JSON.stringify(data);
    if (now === seen) return; // unchanged: keep keyboard focus
    seen = now;
    if (data.length === 0) {
      replace(table, h("p", { class: "empty" }, "No runs yet: use Run now on a sync, or Test connection."));
      return;
    }
    replace(table, h("table", { class: "grid", "aria-label": "Runs" },
      h("thead", {}, h("tr", {}, ["Run", "Status", "Started", "Duration", "Records committed", "Failure", "Logs"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.map((r) => h("tr", { "data-id": r.id, "data-sync": r.sync || "" },
        h("td", {}, r.kind === "sync" ? h("code", {}, r.sync) : r.kind === "verify" ? "connection test" : `${r.kind}${r.sync ? ` ${r.sync}` : ""}`,
          r.attempt > 1 ? h("span", { class: "muted small" }, ` attempt ${r.attempt}`) : null),
        h("td", {}, badge(r.status)),
        h("td", {}, time(r.startedAt)),
        h("td", {}, duration(r.durationMs)),
        h("td", { class: "num" }, r.recordsCommitted.toLocaleString("en-US")),
        h("td", {}, failure(r)),
        h("td", {}, h("a", { href: `#/connections/${id}/logs/${r.id}`, "aria-label": `Logs of run ${r.id.slice(0, 8)}` }, "Logs")))))));
  });
}

/** The recorded log lines: of one run, or of all the connection's runs (polled). */
async function logsTab(el, signal, id, runId) {
  const [pickField, pick] = field("Run", h("select", { name: "run" }, h("option", { value: "" }, "All runs of this connection")),
    "Messages the package logged with ctx.log (kept 30 days).");
  const lines = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el, h("div", { class: "toolbar" }, pickField), lines);
  pick.addEventListener("change", () => {
    location.hash = `#/connections/${id}/logs${pick.value ? `/${pick.value}` : ""}`;
  });
  call("GET", `${C}/connections/${q(id)}/runs?limit=100`, undefined, { signal }).then(({ data }) => {
    for (const r of data) {
      pick.append(h("option", { value: r.id }, `${r.kind === "sync" ? r.sync : r.kind === "verify" ? "connection test" : r.kind} · ${r.status} · ${new Date(r.createdAt).toLocaleString()}`));
    }
    pick.value = runId || "";
  }).catch(() => {});
  const path = runId ? `${C}/runs/${q(runId)}/logs` : `${C}/connections/${q(id)}/logs`;
  let seen = -1;
  await poll(signal, POLL_MS, async () => {
    const all = await connectAll(path, signal);
    if (all.length === seen) return;
    seen = all.length;
    if (all.length === 0) {
      replace(lines, h("p", { class: "empty" }, runId ? "This run logged nothing." : "No log lines yet."));
      return;
    }
    const shown = all.slice(-1000);
    replace(lines,
      all.length > shown.length ? h("p", { class: "muted" }, `The last ${shown.length} of ${all.length} lines.`) : null,
      h("table", { class: "grid logs", "aria-label": "Logs" },
        h("thead", {}, h("tr", {}, ["Time", "Level", runId ? null : "Run", "Message"].filter(Boolean).map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, shown.map((l) => h("tr", { class: `log-${l.level}` },
          h("td", { class: "nowrap" }, time(l.ts)),
          h("td", { class: "nowrap" }, h("span", { class: `badge s-log-${l.level}` }, l.level)),
          runId ? null : h("td", {}, h("a", { href: `#/connections/${id}/logs/${l.runId}` }, h("code", { class: "small" }, l.runId.slice(0, 8)))),
          h("td", { class: "mono message" }, l.message))))));
  });
}

/** `#/packages`: upload a tarball, every package version with its latest build. */
export async function packagesPage(el, signal) {
  const [fileField, fileInput] = field("Package tarball (.tgz)", h("input", { type: "file", name: "tarball", accept: ".tgz,.tar.gz,application/gzip" }),
    "tar -C DIR --exclude=node_modules -czf pkg.tgz . — package.json and a lockfile at the root; versions are immutable.");
  const send = h("button", { type: "submit", class: "primary" }, "Upload");
  const form = h("form", { class: "command" }, fileField, send);
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el,
    h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / "),
    h("h1", {}, "Packages"), form, status, body);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = fileInput.files[0];
    if (!file) {
      replace(status, errorView({ code: "missing_file", message: "choose a .tgz file first" }));
      return;
    }
    try {
      const { status: code, data } = await withProgress(status, send, `Uploading ${file.name} (${bytes(file.size)})`, () =>
        call("POST", `${C}/packages`, file));
      fileInput.value = "";
      location.hash = `#/packages/${q(data.name)}/${q(data.version)}`;
      if (code === 200) alertNote(`${data.name} ${data.version} was already uploaded with the same bytes.`);
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  let seen = "";
  await poll(signal, 3000, async () => {
    const packages = await connectAll(`${C}/packages`, signal);
    const rows = [];
    for (const p of packages) {
      for (const v of p.versions) {
        const pv = await get(versionPath(p.name, v), { signal });
        const { data: builds } = await call("GET", `${versionPath(p.name, v)}/builds?limit=1`, undefined, { signal });
        rows.push({ pv, build: builds[0] || null });
      }
    }
    const now = JSON.stringify(rows);
    if (now === seen) return;
    seen = now;
    if (rows.length === 0) {
      replace(body, h("p", { class: "empty" }, "No packages yet: upload a .tgz above (or sbx connect package upload DIR)."));
      return;
    }
    replace(body, h("table", { class: "grid", "aria-label": "Packages" },
      h("thead", {}, h("tr", {}, ["Package", "Version", "Size", "Uploaded", "Latest build", "Syncs"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map(({ pv, build }) => h("tr", { "data-package": pv.name, "data-version": pv.version },
        h("td", {}, h("a", { href: `#/packages/${q(pv.name)}/${q(pv.version)}` }, pv.name)),
        h("td", {}, pv.version),
        h("td", {}, bytes(pv.size)),
        h("td", {}, time(pv.createdAt)),
        h("td", {}, build ? badge(build.status) : h("span", { class: "muted" }, "not built")),
        h("td", {}, pv.definition ? pv.definition.syncs.map((s) => s.name).join(", ") : h("span", { class: "muted" }, "—")))))));
  });
}

/** A short-lived confirmation line in the alerts area. */
function alertNote(text) {
  document.getElementById("alerts").append(h("p", { class: "ok note", role: "status" }, text));
}

/** `#/packages/{name}/{version}[/{buildId}]`: the version, Start build, builds and a build's log. */
export async function packageVersionPage(el, signal, name, version, buildId) {
  const path = versionPath(name, version);
  const start = h("button", { type: "button", class: "primary" }, "Start build");
  const progress = h("div", { "aria-live": "polite" });
  const facts = h("dl", { class: "facts" });
  const builds = h("div");
  const logBox = h("section", { class: "build-log", "aria-label": "Build log" });
  replace(el,
    h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / ", h("a", { href: "#/packages" }, "Packages"), " / "),
    h("div", { class: "title-row" }, h("h1", {}, `${name} ${version}`), h("span", { class: "spacer" }), start),
    progress, facts, h("h2", {}, "Builds"), builds, logBox);

  const renderVersion = (pv) => {
    const def = pv.definition;
    replace(facts,
      fact("SHA-256", h("code", { class: "small" }, pv.sha256.slice(0, 16))),
      fact("Size", bytes(pv.size)),
      fact("Entry", h("code", {}, pv.entry)),
      fact("Uploaded", time(pv.createdAt)),
      fact("Auth", def ? def.auth.type : "— (not built)"),
      fact("Syncs", def ? def.syncs.map((s) => `${s.name} (${s.mode})`).join(", ") : "—"),
      fact("Verify", def ? (def.hasVerify ? "yes" : "no") : "—"));
  };
  renderVersion(await get(path, { signal }));

  const showLog = async (id) => {
    const b = await get(`${C}/builds/${q(id)}`, { signal });
    replace(logBox, h("h2", {}, "Build log ", h("code", { class: "small" }, b.id.slice(0, 8)), " ", badge(b.status)),
      b.failure ? h("div", { class: "error", role: "alert" }, h("strong", {}, "build failed"), " — ", b.failure) : null,
      h("pre", { class: "terminal", tabindex: "0", "aria-label": "Build log output" }, b.log || (RUN_ENDED.has(b.status) ? "(empty)" : "(waiting for output…)")));
    const pre = logBox.querySelector("pre");
    pre.scrollTop = pre.scrollHeight;
    return b;
  };

  start.addEventListener("click", async () => {
    try {
      const b = await withProgress(progress, start, "Building (npm ci in a fresh sandbox)", async (setLabel) => {
        let { data: build } = await call("POST", `${path}/builds`);
        history.replaceState(null, "", `#/packages/${q(name)}/${q(version)}/${build.id}`);
        buildId = build.id;
        while (!RUN_ENDED.has(build.status)) {
          setLabel(`Building (${build.status})`);
          await sleep(1000);
          build = await showLog(build.id);
          seen = ""; // the builds table too
        }
        return build;
      });
      await showLog(b.id);
      renderVersion(await get(path, { signal }));
      replace(progress, b.status === "succeeded"
        ? h("p", { class: "ok", role: "status" }, "Build succeeded: the version can be used by connections. ", h("a", { href: "#/connections/new" }, "New connection"))
        : h("div", { class: "error", role: "alert" }, h("strong", {}, "build failed"), " — ", b.failure || "see the build log"));
    } catch (err) {
      replace(progress, errorView(err));
    }
  });

  let seen = "";
  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", `${path}/builds?limit=20`, undefined, { signal });
    const now = JSON.stringify(data.map((b) => [b.id, b.status]));
    const changed = now !== seen;
    seen = now;
    if (!buildId && data[0]) buildId = data[0].id;
    const shown = data.find((b) => b.id === buildId);
    if (!changed) {
      // unchanged: keep keyboard focus in the table
    } else if (data.length === 0) {
      replace(builds, h("p", { class: "empty" }, "Not built yet: Start build installs the dependencies from the lockfile and reads the definition."));
    } else {
      replace(builds, h("table", { class: "grid", "aria-label": "Builds" },
        h("thead", {}, h("tr", {}, ["Build", "Status", "Started", "Finished", "Log"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, data.map((b) => h("tr", { "data-id": b.id },
          h("td", {}, h("code", { class: "small" }, b.id.slice(0, 8))),
          h("td", {}, badge(b.status)),
          h("td", {}, time(b.createdAt)),
          h("td", {}, time(b.finishedAt)),
          h("td", {}, h("a", { href: `#/packages/${q(name)}/${q(version)}/${b.id}`, "aria-label": `Log of build ${b.id.slice(0, 8)}` }, "Log")))))));
    }
    if (buildId && (!shown || !logBox.firstChild || !RUN_ENDED.has(shown.status) || logBox.dataset.build !== `${buildId}:${shown.status}`)) {
      const b = await showLog(buildId);
      logBox.dataset.build = `${b.id}:${b.status}`;
    }
  });
}
