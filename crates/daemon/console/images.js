// `#/images`: the tenant's images: usage against the quota, the list, a
// Dockerfile build with its live log (build.js), import
// of an OCI layout or `docker save` tarball, "Make default" (tags the image
// `default`, which creates that name no image boot) and delete
// (see docs/images.md). Choosing an image is a field of the create form (list.js).

import { call, q } from "./api.js";
import { actionButton, bytes, errorView, field, h, replace, time, withProgress } from "./dom.js";
import { poll, POLL_MS } from "./list.js";
import { buildForm } from "./build.js";

/** `name:tag` as the API and the lists show it. */
export const imageName = (i) => `${i.name}:${i.tag}`;

/** `#/images`: usage, the list (refreshed), an import form, tag and delete buttons. */
export async function imagesPage(el, signal) {
  const [fileField, fileInput] = field("Image tarball", h("input", { name: "image-file", type: "file", required: true, accept: ".tar,application/x-tar" }),
    "An OCI image layout or docker save tarball (docker save IMAGE -o image.tar).");
  const [nameField, nameInput] = field("Name and tag", h("input", { name: "image-name", required: true, placeholder: "py-tools:1", autocomplete: "off" }),
    "name:tag (lowercase letters, digits, '.', '_', '-'); the tag is latest when left out.");
  const importStatus = h("div", { "aria-live": "polite" });
  const importButton = h("button", { type: "submit", class: "primary" }, "Import image");
  const form = h("form", { class: "card", "aria-labelledby": "import-image-title" },
    h("h2", { id: "import-image-title" }, "Import an image"), fileField, nameField,
    h("div", { class: "actions" }, importButton), importStatus);
  const usage = h("p", { class: "muted", "aria-live": "polite" });
  const status = h("div", { "aria-live": "polite" });
  const table = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  let seen = "";
  replace(el, h("h1", {}, "Images"), usage, status, table, buildForm(() => { seen = ""; }), form);

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = fileInput.files[0];
    const [name, tag = "latest"] = nameInput.value.trim().split(":");
    if (!file) return;
    try {
      const { data } = await withProgress(importStatus, importButton, `Importing ${file.name} (${bytes(file.size)})`,
        () => call("POST", `/v1/images?name=${q(name)}&tag=${q(tag)}`, file));
      replace(importStatus, h("p", { class: "muted" }, `Imported ${imageName(data)} (${bytes(data.sizeBytes)}).`));
      form.reset();
      seen = "";
    } catch (err) {
      replace(importStatus, errorView(err));
    }
  });

  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", "/v1/images", undefined, { signal });
    replace(usage, data.quotaBytes
      ? `Images take ${bytes(data.usageBytes)} of this workspace's ${bytes(data.quotaBytes)}.`
      : `Images take ${bytes(data.usageBytes)}.`);
    const now = JSON.stringify(data.images.map((i) => [imageName(i), i.digest]));
    if (now === seen && table.firstChild) return; // unchanged: keep focus
    seen = now;
    replace(table, h("table", { class: "grid", "aria-label": "Images" },
      h("thead", {}, h("tr", {}, ["Image", "Digest", "Size", "Origin", "Created", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.images.map((i) => imageRow(i, status, () => { seen = ""; })))));
  });
}

/** One row: the node's default image has no actions; the tenant's default can be unset. */
function imageRow(i, status, changed) {
  const act = (label, cls, work) => actionButton(label, cls, status, work, changed);
  const isDefault = i.name === "default";
  const actions = [];
  if (i.origin !== "default" && !isDefault) {
    actions.push(act("Make default", "", () => call("POST", `/v1/images/${q(imageName(i))}/tag`, { name: "default" })));
  }
  if (i.origin !== "default") {
    const label = isDefault ? "Use the node's default" : "Delete";
    actions.push(act(label, "danger", async () => {
      if (!isDefault && !confirm(`Delete image ${imageName(i)}?`)) return;
      await call("DELETE", `/v1/images/${q(imageName(i))}`);
    }));
  }
  return h("tr", { "data-name": imageName(i) },
    h("td", {}, imageName(i), isDefault && i.origin !== "default" ? h("span", { class: "muted" }, " (this workspace's default)") : null),
    h("td", {}, h("code", { title: i.digest }, i.digest.slice(0, 19))),
    h("td", {}, i.origin === "default" ? h("span", { class: "muted" }, "—") : bytes(i.sizeBytes)),
    h("td", {}, i.origin),
    h("td", {}, i.origin === "default" ? h("span", { class: "muted" }, "—") : time(i.createdAt)),
    h("td", { class: "actions" }, actions));
}
