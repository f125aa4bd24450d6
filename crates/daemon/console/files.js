// The file browser of a sandbox: list (/v1 fs/list), open directories, upload
// (PUT /v2 files), download (GET /v2 files), make directories, delete.

import { call, q, request } from "./api.js";
import { bytes, errorView, field, h, replace, time, withProgress } from "./dom.js";

function join(dir, name) {
  return dir.endsWith("/") ? `${dir}${name}` : `${dir}/${name}`;
}

function parent(dir) {
  const cut = dir.replace(/\/+$/, "").lastIndexOf("/");
  return cut <= 0 ? "/" : dir.slice(0, cut);
}

/** Renders the browser into `el`, starting at /tmp. */
export async function filesTab(el, signal, id) {
  let dir = "/tmp";
  const [pathField, pathInput] = field("Directory", h("input", { name: "dir", class: "mono", spellcheck: "false", value: dir }));
  const go = h("button", { type: "submit" }, "Open");
  const up = h("button", { type: "button" }, "Up");
  const nav = h("form", { class: "command" }, pathField, go, up);
  const [uploadField, fileInput] = field("Upload a file into this directory", h("input", { type: "file", name: "upload" }));
  const send = h("button", { type: "submit", class: "primary" }, "Upload");
  const upload = h("form", { class: "command" }, uploadField, send);
  const [mkdirField, mkdirInput] = field("New directory", h("input", { name: "mkdir", autocomplete: "off", spellcheck: "false" }));
  const mkdir = h("form", { class: "command" }, mkdirField, h("button", { type: "submit" }, "Create"));
  const status = h("div", { "aria-live": "polite" });
  const listing = h("div");
  replace(el, nav, h("div", { class: "split" }, upload, mkdir), status, listing);

  const load = async (next) => {
    try {
      const { data } = await call("GET", `/v1/sandboxes/${id}/fs/list?path=${q(next)}`, undefined, { signal });
      dir = next;
      pathInput.value = dir;
      render(data);
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorView(err));
    }
  };

  const render = (entries) => {
    replace(status);
    if (entries.length === 0) {
      replace(listing, h("p", { class: "empty" }, `${dir} is empty.`));
      return;
    }
    replace(listing, h("table", { class: "grid", "aria-label": `Files in ${dir}` },
      h("thead", {}, h("tr", {}, ["Name", "Size", "Mode", "Modified", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, entries.map((f) => {
        const name = f.kind === "dir"
          ? h("button", { type: "button", class: "link" }, `${f.name}/`)
          : h("span", {}, f.kind === "symlink" ? `${f.name} →` : f.name);
        if (f.kind === "dir") name.addEventListener("click", () => load(f.path));
        const del = h("button", { type: "button", class: "danger", "aria-label": `Delete ${f.name}` }, "Delete");
        del.addEventListener("click", async () => {
          if (!confirm(`Delete ${f.path}${f.kind === "dir" ? " and everything in it" : ""}?`)) return;
          try {
            await call("POST", `/v1/sandboxes/${id}/fs/remove?path=${q(f.path)}&recursive=true`);
            await load(dir);
          } catch (err) {
            replace(status, errorView(err));
          }
        });
        const download = f.kind === "file"
          ? h("a", { class: "button", href: `/v2/sandboxes/${id}/files?path=${q(f.path)}`, download: f.name, "aria-label": `Download ${f.name}` }, "Download")
          : null;
        return h("tr", { "data-path": f.path },
          h("td", {}, name),
          h("td", {}, f.kind === "dir" ? "" : bytes(f.size)),
          h("td", {}, h("code", {}, f.mode)),
          h("td", {}, time(f.modifiedAt)),
          h("td", { class: "actions" }, download, del));
      }))));
  };

  nav.addEventListener("submit", (ev) => {
    ev.preventDefault();
    load(pathInput.value.trim() || "/");
  });
  up.addEventListener("click", () => load(parent(dir)));
  upload.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = fileInput.files[0];
    if (!file) {
      replace(status, errorView({ code: "missing_file", message: "choose a file first" }));
      return;
    }
    try {
      await withProgress(status, send, `Uploading ${file.name} (${bytes(file.size)})`, () =>
        request("PUT", `/v2/sandboxes/${id}/files?path=${q(join(dir, file.name))}`, file));
      fileInput.value = "";
      await load(dir);
      replace(status, h("p", { class: "ok" }, `Uploaded ${join(dir, file.name)}.`));
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  mkdir.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = mkdirInput.value.trim();
    if (!name) return;
    try {
      await call("POST", `/v1/sandboxes/${id}/fs/mkdir?path=${q(join(dir, name))}`);
      mkdirInput.value = "";
      await load(dir);
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  await load(dir);
}
