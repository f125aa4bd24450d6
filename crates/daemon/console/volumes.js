// `#/volumes`: the tenant's persistent volumes: list with usage, create, delete
// (see docs/volumes.md). Mounting one is a field of the create form (list.js).

import { call, q } from "./api.js";
import { bytes, errorView, field, h, replace, time, withProgress } from "./dom.js";
import { poll, POLL_MS } from "./list.js";

/** `#/volumes`: the list (refreshed), a create form and delete buttons. */
export async function volumesPage(el, signal) {
  const [nameField, nameInput] = field("Name", h("input", { name: "volume-name", required: true, maxlength: 255, autocomplete: "off" }));
  const [kindField, kindSelect] = field("Kind", h("select", { name: "volume-kind" },
    h("option", { value: "local" }, "local: a filesystem on one node (POSIX, size enforced)"),
    h("option", { value: "s3" }, "s3: objects in the object store (any node; fsync publishes)")));
  const [sizeField, sizeInput] = field("Size (MiB)", h("input", { name: "volume-size", type: "number", min: 16, max: 1048576, value: 1024, required: true }));
  const createStatus = h("div", { "aria-live": "polite" });
  const createButton = h("button", { type: "submit", class: "primary" }, "Create volume");
  const form = h("form", { class: "card", "aria-labelledby": "new-volume-title" },
    h("h2", { id: "new-volume-title" }, "New volume"), nameField, kindField, sizeField,
    h("div", { class: "actions" }, createButton), createStatus);
  const status = h("div", { "aria-live": "polite" });
  const table = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el, h("h1", {}, "Volumes"), status, table, form);
  let seen = "";

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: nameInput.value.trim(), kind: kindSelect.value, sizeMb: Number(sizeInput.value) };
    try {
      await withProgress(createStatus, createButton, "Creating the volume", () => call("POST", "/v1/volumes", body));
      replace(createStatus, h("p", { class: "muted" }, `Volume ${body.name} created.`));
      nameInput.value = "";
      seen = "";
    } catch (err) {
      replace(createStatus, errorView(err));
    }
  });

  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", "/v1/volumes", undefined, { signal });
    const now = JSON.stringify(data.volumes.map((v) => v.id));
    if (now === seen && table.firstChild) return; // unchanged: keep focus
    seen = now;
    if (data.volumes.length === 0) {
      replace(table, h("p", { class: "empty" }, "No volumes yet."));
      return;
    }
    replace(table, h("table", { class: "grid", "aria-label": "Volumes" },
      h("thead", {}, h("tr", {}, ["Name", "Kind", "Size", "Used", "Node", "Created", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.volumes.map((v) => {
        const used = h("td", {}, h("span", { class: "muted" }, "…"));
        // Usage is per volume (a listing of an S3 volume's objects): fetched row by row.
        call("GET", `/v1/volumes/${q(v.name)}`, undefined, { signal })
          .then(({ data: one }) => replace(used, bytes(one.usedBytes)))
          .catch(() => replace(used, h("span", { class: "muted" }, "n/a")));
        const del = h("button", { type: "button", class: "danger" }, "Delete");
        del.addEventListener("click", async () => {
          if (!confirm(`Delete volume ${v.name} and all its data?`)) return;
          try {
            await call("DELETE", `/v1/volumes/${q(v.name)}`);
            del.closest("tr").remove();
            seen = "";
          } catch (err) {
            replace(status, errorView(err));
          }
        });
        return h("tr", { "data-name": v.name },
          h("td", {}, v.name),
          h("td", {}, v.kind),
          h("td", {}, bytes(v.sizeMb * 1024 * 1024)),
          used,
          h("td", {}, v.nodeId || h("span", { class: "muted" }, "any")),
          h("td", {}, time(v.createdAt)),
          h("td", { class: "actions" }, del));
      }))));
  });
}

/** Mount lines ("data:/data", "ref:/ref:ro") as the create request's `volumes`. */
export function parseMounts(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean).map((line) => {
    const ro = line.endsWith(":ro");
    const spec = ro ? line.slice(0, -3) : line;
    const i = spec.indexOf(":");
    return { name: i < 0 ? spec : spec.slice(0, i), path: i < 0 ? "" : spec.slice(i + 1), readOnly: ro };
  });
}
