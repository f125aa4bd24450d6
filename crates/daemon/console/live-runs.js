// Live run progress on a connection's page: every sync run (or webhook delivery job)
// that is queued or running shows its status, time, the records it has sent so far
// (recordsReceived, spooled until its one commit) and records committed so far,
// updated by polling GET /v1/connect/runs/{runId}; when it ends, its result and its
// recorded log lines replace it. Runs started elsewhere (the CLI, the schedule,
// another tab) show up too: the connection's runs are listed every few seconds.

import { call, get, q } from "./api.js";
import { h, replace, time } from "./dom.js";
import { C, RUN_ENDED, runResult } from "./connect-common.js";

/** Poll interval while a run is followed, and while none is. */
const ACTIVE_MS = 1000;
const IDLE_MS = 3000;
/** Log lines shown under an ended run (the Logs tab has them all). */
const LOG_LINES = 50;

function label(run) {
  if (run.kind === "sync") return run.sync;
  if (run.kind === "webhook") return `webhook ${run.sync || ""}`.trim();
  return run.kind;
}

function elapsed(run) {
  const from = Date.parse(run.startedAt || run.createdAt);
  if (Number.isNaN(from)) return "";
  const s = Math.max(0, Math.round((Date.now() - from) / 1000));
  return s < 120 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** The line of a run that has not ended. */
function activeLine(run) {
  // Records are committed all at once when the run ends: before that, the records sent
  // so far (held in the run's spool) are the progress.
  const received = run.recordsReceived === undefined || run.recordsReceived === null ? null
    : `${run.recordsReceived.toLocaleString("en-US")} records received`;
  const words = [`${run.status}`, elapsed(run), received, `${run.recordsCommitted.toLocaleString("en-US")} records committed so far`];
  return h("div", { class: "progress live-run", role: "status", "data-run": run.id, "data-sync": run.sync || "", "data-status": run.status },
    h("span", { class: "spinner", "aria-hidden": "true" }),
    h("span", {}, h("strong", {}, `Run of ${label(run)}`), ` — ${words.filter(Boolean).join(" · ")}`));
}

/** The result of an ended run with its last log lines. */
function endedView(run, logs, id) {
  const shown = logs.slice(-LOG_LINES);
  return h("div", { class: "run-ended", "data-run": run.id, "data-sync": run.sync || "" },
    runResult(run, `Run of ${label(run)}`),
    h("section", { class: "run-logs", "aria-label": `Logs of run ${run.id.slice(0, 8)}` },
      h("h2", {}, "Its logs ", h("a", { class: "small", href: `#/connections/${id}/logs/${run.id}` }, "(all)")),
      shown.length === 0
        ? h("p", { class: "muted" }, "The run logged nothing.")
        : h("table", { class: "grid logs", "aria-label": "Run logs" },
          h("tbody", {}, shown.map((l) => h("tr", { class: `log-${l.level}` },
            h("td", { class: "nowrap" }, time(l.ts)),
            h("td", { class: "nowrap" }, h("span", { class: `badge s-log-${l.level}` }, l.level)),
            h("td", { class: "mono message" }, l.message)))))));
}

/**
 * Follows the connection's runs into `el` until `signal` aborts. Returns `track(run)`,
 * which follows a run just started (no wait for the next listing).
 */
export function liveRuns(el, signal, id) {
  const active = new Map();
  const box = h("div", { class: "live-runs", "aria-live": "polite" });
  const ended = h("div");
  replace(el, box, ended);
  let wake = () => {};
  const nap = (ms) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    wake = () => {
      clearTimeout(t);
      resolve();
    };
  });
  const render = () => replace(box, [...active.values()].map(activeLine));
  const track = (run) => {
    if (RUN_ENDED.has(run.status)) return;
    active.set(run.id, run);
    render();
    wake();
  };
  const finish = async (run) => {
    active.delete(run.id);
    render();
    let logs = [];
    try {
      const { data } = await call("GET", `${C}/runs/${q(run.id)}/logs?limit=1000`, undefined, { signal });
      logs = data;
    } catch (err) {
      if (err.name === "AbortError") return;
    }
    replace(ended, endedView(run, logs, id));
  };

  (async () => {
    let lastList = 0;
    while (!signal.aborted) {
      try {
        if (Date.now() - lastList >= IDLE_MS) {
          lastList = Date.now();
          const { data } = await call("GET", `${C}/connections/${q(id)}/runs?limit=10`, undefined, { signal });
          for (const r of data) {
            if ((r.kind === "sync" || r.kind === "webhook") && !RUN_ENDED.has(r.status)) active.set(r.id, r);
          }
        }
        for (const runId of [...active.keys()]) {
          const run = await get(`${C}/runs/${q(runId)}`, { signal });
          if (RUN_ENDED.has(run.status)) await finish(run);
          else active.set(run.id, run);
        }
        render();
      } catch (err) {
        // A failed poll is retried on the next tick; the tabs show errors already.
        if (signal.aborted || err.name === "AbortError") return;
      }
      await nap(active.size ? ACTIVE_MS : IDLE_MS);
    }
  })();
  return track;
}
