// Connect connections: the list, the create form, and one connection's page (Runs,
// Logs, Records and Deliveries tabs, Run now with live progress, Test connection,
// Reconnect, Edit, delete). Packages are in packages.js, the edit form in
// connection-edit.js.

import { call, get, q } from "./api.js";
import { badge, errorView, field, h, replace, time, withProgress } from "./dom.js";
import { POLL_MS, poll } from "./list.js";
import { deliveriesTab } from "./deliveries.js";
import { recordsTab } from "./records.js";
import { liveRuns } from "./live-runs.js";
import {
  C, SCHEDULES, configFields, connectAll, connectionBadge, credentialFields, duration, fact, failure, reconnect, runResult,
  schedule, versionPath,
} from "./connect-common.js";

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
  ["records", "Records"],
  ["deliveries", "Deliveries"],
];

/** `#/connections/{id}/{runs|logs|records|deliveries}[/{runId|sync}]`: one connection. */
export async function connectionPage(el, signal, id, tab, sub) {
  tab = CONNECTION_TABS.some(([t]) => t === tab) ? tab : "runs";
  const title = h("h1", {}, "Connection");
  const statusSlot = h("span");
  const buttons = {
    reconnect: h("button", { type: "button", class: "primary", hidden: true }, "Reconnect"),
    edit: h("a", { class: "button", href: `#/connections/${id}/edit` }, "Edit"),
    test: h("button", { type: "button" }, "Test connection"),
    del: h("button", { type: "button", class: "danger" }, "Delete"),
  };
  const facts = h("dl", { class: "facts" });
  const progress = h("div", { "aria-live": "polite", class: "connection-progress" });
  const live = h("div", { class: "connection-live" });
  const syncs = h("div");
  const panel = h("section", { class: "panel", "aria-label": CONNECTION_TABS.find(([t]) => t === tab)[1] });
  replace(
    el,
    h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / "),
    h("div", { class: "title-row" }, title, statusSlot, h("span", { class: "spacer" }), buttons.reconnect, buttons.edit, buttons.test, buttons.del),
    progress,
    live,
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
  const track = liveRuns(live, signal, id);

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

  // The package's syncs, each with Run now (its progress shows live above).
  const definition = get(versionPath(conn.package, conn.version), { signal }).then((pv) => pv.definition);
  definition.then((def) => {
    const list = (def && def.syncs) || [];
    const hooks = (def && def.webhooks) || [];
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
          const started = await withProgress(progress, run, `Starting ${s.name}`, async () =>
            (await call("POST", `${C}/connections/${q(id)}/syncs/${q(s.name)}/runs`)).data);
          replace(progress);
          track(started);
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
  if (tab === "logs") await Promise.all([logsTab(panel, signal, id, sub), poll(signal, 5000, refresh)]);
  else if (tab === "deliveries") await Promise.all([deliveriesTab(panel, signal, id), poll(signal, 5000, refresh)]);
  else if (tab === "records") await Promise.all([recordsTab(panel, signal, id, await definition, sub), poll(signal, 5000, refresh)]);
  else await runsTab(panel, signal, id, refresh);
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

