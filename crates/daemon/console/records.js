// The Records tab of a connection: the committed records of one sync or webhook, a
// page at a time (GET .../syncs/{sync}/records, NDJSON with the next page's cursor in
// x-next-cursor), a filter by primary key (merge datasets), one record as JSON, and
// the sync's last committed checkpoint.

import { get, q, request } from "./api.js";
import { errorView, field, h, replace } from "./dom.js";
import { C } from "./connect-common.js";

/** Records per page. */
const PAGE = 20;

/** The primary key text sbxd keeps for a record (what `?key=` matches). */
function keyOf(record, primaryKey) {
  if (!primaryKey) return null;
  if (Array.isArray(primaryKey)) return JSON.stringify(primaryKey.map((f) => record[f]));
  const v = record[primaryKey];
  return v === undefined || v === null ? null : String(v);
}

/** One page: [records, next cursor or null]. */
async function readPage(id, sync, cursor, key, signal) {
  const params = new URLSearchParams({ limit: String(PAGE) });
  if (cursor) params.set("cursor", cursor);
  if (key) params.set("key", key);
  const resp = await request("GET", `${C}/connections/${q(id)}/syncs/${q(sync)}/records?${params}`, undefined, { signal });
  const text = await resp.text();
  const records = text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  return [records, resp.headers.get("x-next-cursor")];
}

/** A one-line preview of a record. */
function preview(record) {
  const text = JSON.stringify(record);
  return text.length > 140 ? `${text.slice(0, 140)}…` : text;
}

/**
 * Records of connection `id` into `el`: `def` is its package version's definition,
 * `sync` the dataset in the URL (else the first one).
 */
export async function recordsTab(el, signal, id, def, sync) {
  const datasets = [
    ...((def && def.syncs) || []).map((s) => ({ ...s, what: "sync" })),
    ...((def && def.webhooks) || []).map((w) => ({ ...w, what: "webhook" })),
  ];
  if (datasets.length === 0) {
    replace(el, h("p", { class: "empty" }, "The package version has no syncs or webhooks, so no records."));
    return;
  }
  const ds = datasets.find((d) => d.name === sync) || datasets[0];
  const keyed = ds.mode === "merge" && ds.primaryKey;
  const keyName = keyed ? [].concat(ds.primaryKey).join(", ") : null;

  const [pickField, pick] = field("Sync", h("select", { name: "records-sync" },
    datasets.map((d) => h("option", { value: d.name }, `${d.name} (${d.what}, ${d.mode})`))));
  pick.value = ds.name;
  pick.addEventListener("change", () => {
    location.hash = `#/connections/${id}/records/${encodeURIComponent(pick.value)}`;
  });
  const [keyField, keyInput] = field("Primary key", h("input", { name: "records-key", autocomplete: "off", spellcheck: "false", disabled: !keyed,
    placeholder: keyed ? keyName : "" }),
  keyed ? `The value of ${keyName}${Array.isArray(ds.primaryKey) ? " as a JSON array" : ""}.` : `Only merge datasets have a primary key (${ds.name} is ${ds.mode}).`);
  const find = h("button", { type: "submit", disabled: !keyed }, "Find");
  const clear = h("button", { type: "button", hidden: true }, "Show all");
  const filter = h("form", { class: "command records-filter", "aria-label": "Filter by primary key" }, keyField, find, clear);
  const checkpoint = h("section", { class: "checkpoint", "aria-label": "Last committed checkpoint" });
  const list = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const pager = h("div", { class: "actions pager" });
  const view = h("section", { class: "record-json", "aria-label": "Record JSON", hidden: true });
  replace(el, h("div", { class: "toolbar" }, pickField), filter, checkpoint, h("h2", {}, "Records"), list, pager, view);

  get(`${C}/connections/${q(id)}/syncs/${q(ds.name)}/checkpoint`, { signal }).then((d) => {
    replace(checkpoint, h("h2", {}, "Last committed checkpoint"), d.checkpoint === null || d.checkpoint === undefined
      ? h("p", { class: "muted" }, ds.what === "webhook" ? "Webhooks commit no checkpoint." : "None committed yet.")
      : h("pre", { class: "json", tabindex: "0", "aria-label": "Checkpoint JSON" }, JSON.stringify(d.checkpoint, null, 2)));
  }).catch((err) => {
    if (err.name !== "AbortError") replace(checkpoint, errorView(err));
  });

  // The cursors of the pages seen so far: page n starts after cursors[n-1].
  const cursors = [null];
  let pageNo = 0;
  let key = "";
  const show = (record, n) => {
    view.hidden = false;
    replace(view, h("h2", {}, `Record ${n}`, keyed ? [" — key ", h("code", {}, keyOf(record, ds.primaryKey))] : null),
      h("pre", { class: "json", tabindex: "0", "aria-label": "Record JSON text" }, JSON.stringify(record, null, 2)));
    view.scrollIntoView({ block: "nearest" });
  };
  const load = async () => {
    view.hidden = true;
    let records;
    let next;
    try {
      [records, next] = await readPage(id, ds.name, cursors[pageNo], key, signal);
    } catch (err) {
      if (err.name !== "AbortError") replace(list, errorView(err));
      return;
    }
    if (next) cursors[pageNo + 1] = next;
    const first = pageNo * PAGE + 1;
    if (records.length === 0) {
      replace(list, h("p", { class: "empty" }, key ? `No committed record has the key ${key}.` : "No records committed yet."));
    } else {
      replace(list, h("table", { class: "grid", "aria-label": "Records" },
        h("thead", {}, h("tr", {}, ["#", keyed ? `Key (${keyName})` : null, "Record", ""].filter((c) => c !== null).map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, records.map((r, i) => {
          const n = key ? 1 : first + i;
          const open = h("button", { type: "button", class: "link", "aria-label": `View record ${n} as JSON` }, "JSON");
          open.addEventListener("click", () => show(r, n));
          return h("tr", { "data-n": String(n) },
            h("td", { class: "num" }, String(n)),
            keyed ? h("td", {}, h("code", {}, keyOf(r, ds.primaryKey))) : null,
            h("td", { class: "mono message" }, preview(r)),
            h("td", {}, open));
        }))));
    }
    const prev = h("button", { type: "button", disabled: pageNo === 0 }, "Previous page");
    const nextBtn = h("button", { type: "button", disabled: !next }, "Next page");
    prev.addEventListener("click", () => {
      pageNo -= 1;
      load();
    });
    nextBtn.addEventListener("click", () => {
      pageNo += 1;
      load();
    });
    const range = records.length ? `records ${first.toLocaleString("en-US")}–${(first + records.length - 1).toLocaleString("en-US")}` : "no records";
    replace(pager, key ? null : [prev, nextBtn], h("span", { class: "muted page-label", role: "status" },
      key ? `Filtered by key ${key}` : `Page ${pageNo + 1} · ${range}`));
  };
  filter.addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = keyInput.value.trim();
    clear.hidden = !key;
    pageNo = 0;
    load();
  });
  clear.addEventListener("click", () => {
    keyInput.value = "";
    key = "";
    clear.hidden = true;
    pageNo = 0;
    load();
  });
  await load();
}
