// `#/sandboxes/{id}/{tab}`: status and lifecycle actions, then one of the
// tabs: a terminal (xterm.js on a shell in the sandbox), processes with live output, files, snapshots.

import { b64text, call, get, ndjson } from "./api.js";
import { alertError, badge, bytes, errorView, field, h, replace, sleep, time, withProgress } from "./dom.js";
import { poll, snapshotTable } from "./list.js";
import { filesTab } from "./files.js";
import { previewTab } from "./preview.js";
import { terminalTab } from "./terminal.js";

const TABS = [
  ["terminal", "Terminal"],
  ["processes", "Processes"],
  ["files", "Files"],
  ["snapshots", "Snapshots"],
  ["preview", "Preview"],
];

/** The detail page of one sandbox. */
export async function detailPage(el, signal, id, tab) {
  tab = TABS.some(([t]) => t === tab) ? tab : "terminal";
  const title = h("h1", {}, "Sandbox");
  const statusSlot = h("span");
  const facts = h("dl", { class: "facts" });
  const usage = h("div", { class: "usage", "aria-label": "Usage of the last 10 minutes" });
  const progress = h("div", { "aria-live": "polite" });
  const buttons = {
    pause: h("button", { type: "button" }, "Pause"),
    resume: h("button", { type: "button" }, "Resume"),
    destroy: h("button", { type: "button", class: "danger" }, "Destroy"),
  };
  const panel = h("section", { class: "panel", "aria-label": TABS.find(([t]) => t === tab)[1] });
  replace(
    el,
    h("p", { class: "crumbs" }, h("a", { href: "#/sandboxes" }, "Sandboxes"), " / "),
    h("div", { class: "title-row" }, title, statusSlot, h("span", { class: "spacer" }), buttons.pause, buttons.resume, buttons.destroy),
    progress,
    facts,
    usage,
    h("nav", { class: "tabs", "aria-label": "Sandbox sections" },
      TABS.map(([t, label]) => h("a", { href: `#/sandboxes/${id}/${t}`, "aria-current": t === tab ? "page" : false }, label))),
    panel,
  );

  let sandbox = await get(`/v1/sandboxes/${id}`, { signal });
  const render = () => {
    title.textContent = sandbox.name || "(unnamed)";
    replace(statusSlot, badge(sandbox.status));
    const net = sandbox.network;
    const network = net && net.policy
      ? `${net.policy.mode}${net.policy.allow ? ` (${net.policy.allow.length} rules)` : ""}; ${net.allowed} allowed, ${net.denied} denied`
      : "—";
    replace(facts,
      fact("Id", h("code", {}, sandbox.id)),
      fact("Shape", `${sandbox.resources.vcpu} vCPU / ${sandbox.resources.memoryMb} MiB`),
      fact("Created", time(sandbox.createdAt)),
      fact("Started", time(sandbox.startedAt)),
      sandbox.endedAt ? fact("Ended", time(sandbox.endedAt)) : null,
      fact("Active runtime", `${Math.round((sandbox.activeRuntimeMs || 0) / 1000)} s of ${Math.round((sandbox.activeRuntimeLimitMs || 0) / 60000)} min`),
      fact("Network", network),
      fact("Secrets", (sandbox.secrets || []).join(", ") || "none"),
      sandbox.snapshotId ? fact("Cloned from", h("code", {}, sandbox.snapshotId.slice(0, 8))) : null,
      sandbox.error ? fact("Error", h("span", { class: "error-text" }, sandbox.error)) : null,
    );
    buttons.pause.disabled = sandbox.status !== "RUNNING";
    buttons.resume.disabled = sandbox.status !== "PAUSED";
    buttons.destroy.disabled = ["TERMINATED", "TERMINATING"].includes(sandbox.status);
  };
  render();
  const refreshUsage = async () => {
    let m;
    try {
      m = await get(`/v1/sandboxes/${id}/metrics`, { signal });
    } catch (err) {
      // An ended sandbox has no metrics (404): no charts, the rest of the page stays.
      if (err.status === 404) return replace(usage);
      throw err;
    }
    const samples = m.samples || [];
    const last = samples[samples.length - 1];
    const limit = m.memoryMb * 1024 * 1024;
    replace(usage,
      usageChart("CPU", samples.map((s) => s.cpuPercent), 100, last ? `${last.cpuPercent.toFixed(1)} %` : "no sample yet"),
      usageChart("Memory", samples.map((s) => s.memoryBytes), limit, last ? `${bytes(last.memoryBytes)} of ${bytes(limit)}` : "no sample yet"),
    );
  };
  const refresh = async () => {
    sandbox = await get(`/v1/sandboxes/${id}`, { signal });
    render();
    await refreshUsage();
  };
  await refreshUsage();

  const lifecycle = (button, label, work) => button.addEventListener("click", async () => {
    try {
      await withProgress(progress, button, label, work);
      await refresh();
    } catch (err) {
      replace(progress, errorView(err));
    }
  });
  lifecycle(buttons.pause, "Pausing", () => call("POST", `/v2/sandboxes/${id}/pause`));
  lifecycle(buttons.resume, "Resuming", () => call("POST", `/v2/sandboxes/${id}/resume`));
  buttons.destroy.addEventListener("click", async () => {
    if (!confirm(`Destroy sandbox ${sandbox.name || id}? Its processes and files are lost.`)) return;
    try {
      await withProgress(progress, buttons.destroy, "Destroying", async () => {
        await call("DELETE", `/v2/sandboxes/${id}`);
        for (let i = 0; i < 60; i++) {
          const s = await get(`/v2/sandboxes/${id}`);
          if (s.status === "TERMINATED" || s.status === "FAILED") return;
          await sleep(500);
        }
      });
      location.hash = "#/sandboxes";
    } catch (err) {
      replace(progress, errorView(err));
    }
  });

  const tabs = { terminal: terminalTab, processes: processesTab, files: filesTab, snapshots: snapshotsTab, preview: previewTab };
  tabs[tab](panel, signal, id).catch((err) => {
    if (!signal.aborted && err.name !== "AbortError") alertError(err);
  });
  await poll(signal, 2000, refresh);
}

const SVG = "http://www.w3.org/2000/svg";

/** A labelled sparkline of `values` (0..max), newest on the right, with the current value. */
function usageChart(label, values, max, now) {
  const [w, hgt] = [200, 36];
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${label}: ${now}`);
  // One sample draws as a flat segment: a single point would not show.
  if (values.length === 1) values = [values[0], values[0]];
  if (values.length > 0) {
    const step = values.length > 1 ? w / (values.length - 1) : 0;
    const y = (v) => (hgt - 1 - (Math.min(Math.max(v / (max || 1), 0), 1) * (hgt - 2))).toFixed(1);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", values.map((v, i) => `${(i * step).toFixed(1)},${y(v)}`).join(" "));
    svg.append(line);
  }
  return h("figure", { class: "usage-chart", "data-metric": label.toLowerCase() },
    h("figcaption", {}, h("span", { class: "usage-label" }, label), " ", h("span", { class: "usage-now" }, now)),
    svg);
}

function fact(name, value) {
  return h("div", {}, h("dt", {}, name), h("dd", {}, value));
}

/** Background processes: start one, list them, follow one's live output, signal. */
async function processesTab(el, signal, id) {
  const [cmdField, input] = field("Start a background process", h("input", { name: "process-command", autocomplete: "off", spellcheck: "false", class: "mono", placeholder: "for i in 1 2 3; do echo $i; sleep 1; done" }),
    "Runs with /bin/sh -c and keeps running after this page closes.");
  const start = h("button", { type: "submit", class: "primary" }, "Start");
  const form = h("form", { class: "command" }, cmdField, start);
  const status = h("div", { "aria-live": "polite" });
  const table = h("div");
  const outputTitle = h("h2", {}, "Output");
  const output = h("pre", { class: "terminal", role: "log", "aria-live": "polite", "aria-label": "Process output", tabindex: "0" });
  const outputBox = h("section", { class: "output", hidden: true }, outputTitle, output);
  replace(el, form, status, table, outputBox);
  let follow = null;

  const watch = (p) => {
    if (follow) follow.abort();
    follow = new AbortController();
    const mine = follow;
    signal.addEventListener("abort", () => mine.abort());
    outputBox.hidden = false;
    outputTitle.textContent = `Output of ${p.command.join(" ")}`;
    output.replaceChildren();
    ndjson(`/v2/sandboxes/${id}/processes/${p.id}/output/stream`, (frame) => {
      if (frame.type === "error") {
        output.append(h("span", { class: "err" }, `\n${frame.error.code}: ${frame.error.message}\n`));
        return;
      }
      output.append(h("span", { class: frame.stream === "stderr" ? "err" : "out" }, b64text(frame.data)));
      output.scrollTop = output.scrollHeight;
    }, mine.signal)
      .then(() => output.append(h("span", { class: "exit" }, "\n[end of output]\n")))
      .catch((err) => {
        if (err.name !== "AbortError") output.append(h("span", { class: "err" }, `\n${err.code}: ${err.message}\n`));
      });
  };

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const cmd = input.value.trim();
    if (!cmd) return;
    try {
      const { data } = await call("POST", `/v2/sandboxes/${id}/processes`, { command: ["/bin/sh", "-c", cmd] });
      input.value = "";
      replace(status);
      watch(data);
    } catch (err) {
      replace(status, errorView(err));
    }
  });

  let seen = "";
  await poll(signal, 2000, async () => {
    const { data } = await call("GET", `/v2/sandboxes/${id}/processes`, undefined, { signal });
    const now = JSON.stringify(data);
    if (now === seen) return; // unchanged: keep keyboard focus where it is
    seen = now;
    if (data.length === 0) {
      replace(table, h("p", { class: "empty" }, "No processes yet."));
      return;
    }
    replace(table, h("table", { class: "grid", "aria-label": "Processes" },
      h("thead", {}, h("tr", {}, ["Command", "State", "Exit", "Started", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.map((p) => {
        const show = h("button", { type: "button" }, "Output");
        show.addEventListener("click", () => watch(p));
        const kill = h("button", { type: "button", class: "danger", disabled: !["RUNNING", "STARTING"].includes(p.state) }, "Kill");
        kill.addEventListener("click", async () => {
          try {
            await call("POST", `/v2/sandboxes/${id}/processes/${p.id}/signals`, { signal: 15 });
          } catch (err) {
            replace(status, errorView(err));
          }
        });
        return h("tr", { "data-id": p.id },
          h("td", {}, h("code", {}, p.command.join(" "))),
          h("td", {}, badge(p.state)),
          h("td", {}, p.exitCode ?? (p.terminationSignal ? `signal ${p.terminationSignal}` : "")),
          h("td", {}, time(p.startedAt)),
          h("td", { class: "actions" }, show, kill));
      }))));
  });
}

/** Take a snapshot (with progress until READY), then the sandbox's snapshots. */
async function snapshotsTab(el, signal, id) {
  const [nameField, nameInput] = field("Snapshot name", h("input", { name: "snapshot-name", autocomplete: "off", placeholder: "optional" }),
    "Saves memory and disk; the sandbox pauses briefly.");
  const take = h("button", { type: "submit", class: "primary" }, "Take snapshot");
  const form = h("form", { class: "command" }, nameField, take);
  const status = h("div", { "aria-live": "polite" });
  const list = h("div");
  replace(el, form, status, list);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = nameInput.value.trim();
    try {
      const snap = await withProgress(status, take, "Taking the snapshot", async (setLabel) => {
        const { data } = await call("POST", `/v2/sandboxes/${id}/snapshots`, name ? { name } : undefined);
        let s = data;
        while (s.status === "CREATING") {
          setLabel(`Saving memory and disk (${s.status})`);
          await sleep(1000);
          s = await get(`/v2/snapshots/${s.id}`);
        }
        return s;
      });
      nameInput.value = "";
      replace(status, h("p", { class: "ok" }, `Snapshot ${snap.name || snap.id} is ${snap.status}.`));
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  await snapshotTable(list, signal, id);
}
