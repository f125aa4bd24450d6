// The Deliveries tab of a connection: its webhook deliveries, newest first (polled),
// with their status, records committed and failure (a category, never a message),
// and a link to the logs of their last job.

import { call, q } from "./api.js";
import { badge, h, replace, time } from "./dom.js";
import { POLL_MS, poll } from "./list.js";

/** Deliveries of connection `id` into `el` until `signal` aborts. */
export async function deliveriesTab(el, signal, id) {
  const table = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el, table);
  let seen = "";
  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", `/v1/connect/connections/${q(id)}/deliveries?limit=50`, undefined, { signal });
    const now = JSON.stringify(data);
    if (now === seen) return; // unchanged: keep keyboard focus
    seen = now;
    if (data.length === 0) {
      replace(table, h("p", { class: "empty" }, "No deliveries yet: set up the webhooks (sbx connect webhooks) and point the sender at their URLs."));
      return;
    }
    replace(table, h("table", { class: "grid", "aria-label": "Deliveries" },
      h("thead", {}, h("tr", {}, ["Webhook", "Delivery", "Status", "Received", "Attempts", "Records committed", "Failure", "Logs"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.map((d) => h("tr", { "data-id": d.id, "data-delivery": d.senderId },
        h("td", {}, h("code", {}, d.webhook)),
        h("td", {}, h("code", {}, d.senderId)),
        h("td", {}, badge(d.status)),
        h("td", {}, time(d.receivedAt)),
        h("td", { class: "num" }, String(d.attempts)),
        h("td", { class: "num" }, d.recordsCommitted.toLocaleString("en-US")),
        h("td", {}, d.failureCategory
          ? h("span", { class: "failure" }, h("code", {}, d.failureCategory), d.failureKind ? h("span", { class: "muted small" }, ` (${d.failureKind})`) : null)
          : h("span", { class: "muted" }, "—")),
        h("td", {}, d.runId ? h("a", { href: `#/connections/${id}/logs/${d.runId}`, "aria-label": `Logs of delivery ${d.senderId}` }, "Logs") : "—"))))));
  });
}
