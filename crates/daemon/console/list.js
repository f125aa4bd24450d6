// Pages: the sandboxes list (live status), the create form, snapshots with clone and
// delete. The Connect pages are in connect.js.

import { call, get, q } from "./api.js";
import { alertError, badge, bytes, errorView, field, h, replace, sleep, time, withProgress } from "./dom.js";
import { parseMounts } from "./volumes.js";

export const POLL_MS = 2000;
const ENDED = new Set(["TERMINATED", "FAILED"]);

/** Repeats `tick` every `ms` until the signal aborts; errors are shown once per streak. */
export async function poll(signal, ms, tick) {
  let failing = false;
  while (!signal.aborted) {
    try {
      await tick();
      failing = false;
    } catch (err) {
      if (signal.aborted || err.name === "AbortError") return;
      if (!failing) alertError(err);
      failing = true;
    }
    await sleep(ms);
  }
}

/** Every sandbox, newest first (all pages). */
async function allSandboxes(signal) {
  const items = [];
  let cursor = "";
  for (;;) {
    const path = `/v2/sandboxes?limit=250${cursor ? `&cursor=${q(cursor)}` : ""}`;
    const { data, page } = await call("GET", path, undefined, { signal });
    items.push(...data);
    if (!page || !page.hasMore) return items;
    cursor = page.cursor;
  }
}

/** `#/sandboxes`: the list with live status. */
export async function sandboxesPage(el, signal) {
  const showEnded = h("input", { type: "checkbox", id: "show-ended" });
  const updated = h("span", { class: "muted", "aria-live": "off" });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(
    el,
    h("div", { class: "title-row" }, h("h1", {}, "Sandboxes"), h("a", { class: "button primary", href: "#/sandboxes/new" }, "New sandbox")),
    h("div", { class: "toolbar" }, h("label", { for: "show-ended" }, showEnded, " Show ended sandboxes"), updated),
    body,
  );
  let last = [];
  const render = () => {
    const rows = last.filter((s) => showEnded.checked || !ENDED.has(s.status));
    if (rows.length === 0) {
      replace(body, h("p", { class: "empty" }, "No sandboxes yet. ", h("a", { href: "#/sandboxes/new" }, "Create one"), "."));
      return;
    }
    replace(
      body,
      h("table", { class: "grid", "aria-label": "Sandboxes" },
        h("thead", {}, h("tr", {}, ["Name", "Status", "Shape", "Created", "Id"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows.map((s) => h("tr", { "data-id": s.id },
          h("td", {}, h("a", { href: `#/sandboxes/${s.id}` }, s.name || "(unnamed)")),
          h("td", {}, badge(s.status), s.error ? h("span", { class: "muted small" }, ` ${s.error}`) : null),
          h("td", {}, `${s.resources.vcpu} vCPU / ${s.resources.memoryMb} MiB`),
          h("td", {}, time(s.createdAt)),
          h("td", {}, h("code", { class: "small" }, s.id.slice(0, 8))),
        ))),
      ),
    );
  };
  showEnded.addEventListener("change", render);
  let seen = "";
  await poll(signal, POLL_MS, async () => {
    last = await allSandboxes(signal);
    // Redraw only on change, so keyboard focus is not lost every poll.
    const now = JSON.stringify(last);
    if (now !== seen) render();
    seen = now;
    updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  });
}

/** Waits until a sandbox leaves STARTING; returns it. */
export async function waitStarted(id, setLabel) {
  for (;;) {
    const s = await get(`/v2/sandboxes/${id}`);
    if (s.status !== "STARTING") return s;
    setLabel(`Booting (${s.status})`);
    await sleep(1000);
  }
}

/** `#/sandboxes/new`: name, shape (of those sbxd offers), secrets and network policy. */
export async function createPage(el, signal) {
  const [nameField, nameInput] = field("Name", h("input", { name: "name", required: true, maxlength: 255, autocomplete: "off" }),
    "Also an idempotency key while the sandbox is active.");
  // The shapes this sbxd offers (`--shapes`; by default 1, 2 or 4 vCPU with 1, 2 or 4 GiB each).
  const offered = await get("/v1/shapes", { signal });
  const shapes = h("fieldset", { class: "field shapes" }, h("legend", {}, "Shape"),
    offered.map(({ vcpu, memoryMb }, i) => h("label", { class: "choice" },
      h("input", { type: "radio", name: "shape", value: `${vcpu}/${memoryMb}`, checked: i === 0 }),
      ` ${vcpu} vCPU, ${memoryMb / 1024} GiB`)));
  const secretsBox = h("fieldset", { class: "field" }, h("legend", {}, "Secrets"), h("p", { class: "muted" }, "Loading secrets…"));
  const [netField, netSelect] = field("Network", h("select", { name: "network" },
    h("option", { value: "" }, "Server default"),
    h("option", { value: "none" }, "None (loopback only)"),
    h("option", { value: "public" }, "Public internet"),
    h("option", { value: "https-only" }, "HTTPS only (port 443)"),
    h("option", { value: "allowlist" }, "Allowlist")));
  const [allowField, allowInput] = field("Allowed hosts", h("textarea", { name: "allow", rows: 3, spellcheck: "false" }),
    "One per line: a hostname (example.com, *.example.com) or a CIDR, optionally with :port.");
  allowField.hidden = true;
  netSelect.addEventListener("change", () => {
    allowField.hidden = netSelect.value !== "allowlist";
  });
  const [imageField, imageSelect] = field("Image", h("select", { name: "image" }, h("option", { value: "" }, "Default image")),
    "The workspace's default image, or one of its images (see the Images page).");
  const [templateField, templateSelect] = field("Template", h("select", { name: "template" }, h("option", { value: "" }, "None: boot the image")),
    "A READY template (see the Templates page): the sandbox is a clone of it, with its image, shape and network.");
  const [mountField, mountInput] = field("Volumes", h("textarea", { name: "volumes", rows: 2, spellcheck: "false" }),
    "One per line: NAME:/path, or NAME:/path:ro read-only (see the Volumes page).");
  const status = h("div", { "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary" }, "Create sandbox");
  const form = h("form", { class: "card", "aria-labelledby": "create-title" },
    h("h1", { id: "create-title" }, "New sandbox"), nameField, templateField, imageField, shapes, secretsBox, netField, allowField, mountField,
    h("div", { class: "actions" }, button, h("a", { href: "#/sandboxes", class: "button" }, "Cancel")), status);
  replace(el, form);
  nameInput.focus();

  get("/v1/images", { signal }).then(({ images }) => {
    for (const i of images.slice(1)) imageSelect.append(h("option", { value: `${i.name}:${i.tag}` }, `${i.name}:${i.tag}`));
  }).catch(() => {}); // the default stays selectable; a create names no image then

  get("/v1/templates", { signal }).then(({ templates }) => {
    for (const t of templates.filter((t) => t.creatable)) templateSelect.append(h("option", { value: t.name }, t.name));
  }).catch(() => {});
  // A clone takes everything but its name from the template: the other fields go.
  const cloneOnly = [imageField, shapes, secretsBox, netField, allowField, mountField];
  templateSelect.addEventListener("change", () => {
    for (const f of cloneOnly) f.hidden = Boolean(templateSelect.value) || (f === allowField && netSelect.value !== "allowlist");
  });

  get("/v1/secrets", { signal }).then((secrets) => {
    replace(secretsBox, h("legend", {}, "Secrets"),
      secrets.length === 0
        ? h("p", { class: "muted" }, "No secrets defined (sbx secret set NAME).")
        : secrets.map((s) => h("label", { class: "choice" }, h("input", { type: "checkbox", name: "secret", value: s.name }), ` ${s.name}`)));
  }).catch((err) => replace(secretsBox, h("legend", {}, "Secrets"), errorView(err)));

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (templateSelect.value) {
      await submit({ name: nameInput.value.trim(), template: templateSelect.value });
      return;
    }
    const [vcpu, memoryMb] = form.querySelector("input[name=shape]:checked").value.split("/").map(Number);
    const body = { name: nameInput.value.trim(), vcpu, memoryMb };
    const secrets = [...form.querySelectorAll("input[name=secret]:checked")].map((c) => c.value);
    if (secrets.length) body.secrets = secrets;
    if (netSelect.value) {
      body.network = { mode: netSelect.value };
      if (netSelect.value === "allowlist") body.network.allow = parseAllow(allowInput.value);
    }
    const volumes = parseMounts(mountInput.value);
    if (volumes.length) body.volumes = volumes;
    if (imageSelect.value) body.image = imageSelect.value;
    await submit(body);
  });

  async function submit(body) {
    try {
      const sandbox = await withProgress(status, button, "Creating the sandbox (booting gVisor)", async (setLabel) => {
        const { data } = await call("POST", "/v1/sandboxes", body);
        return data.status === "STARTING" ? waitStarted(data.id, setLabel) : data;
      });
      location.hash = `#/sandboxes/${sandbox.id}`;
    } catch (err) {
      replace(status, errorView(err));
    }
  }
}

/** Allowlist lines ("host", "host:443", "10.0.0.0/8") as rules. */
function parseAllow(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean).map((line) => {
    const m = line.match(/^(.*?)(?::(\d+))?$/);
    const target = m[1];
    const rule = target.includes("/") ? { cidr: target } : { host: target };
    if (m[2]) rule.ports = [Number(m[2])];
    return rule;
  });
}

/** `#/snapshots`: every snapshot with clone and delete. */
export async function snapshotsPage(el, signal) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el, h("h1", {}, "Snapshots"), body);
  await snapshotTable(body, signal, null);
}

/** A live table of snapshots (of one sandbox when `sandboxId` is set) with clone and delete. */
export async function snapshotTable(body, signal, sandboxId) {
  const status = h("div", { "aria-live": "polite" });
  const table = h("div");
  replace(body, status, table);
  let openClone = null;
  let seen = "";
  await poll(signal, POLL_MS, async () => {
    if (openClone && document.body.contains(openClone)) return; // do not redraw under the user
    const { data } = await call("GET", "/v2/snapshots?limit=250", undefined, { signal });
    const rows = data.filter((s) => !sandboxId || s.sourceSandboxId === sandboxId);
    const now = JSON.stringify(rows.map((s) => [s.id, s.status, s.storedBytes]));
    if (now === seen && table.isConnected && table.firstChild) return; // unchanged: keep focus
    seen = now;
    if (rows.length === 0) {
      replace(table, h("p", { class: "empty" }, "No snapshots."));
      return;
    }
    replace(table, h("table", { class: "grid", "aria-label": "Snapshots" },
      h("thead", {}, h("tr", {}, ["Name", "Status", "Source", "Size", "Created", "Expires", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((s) => {
        const cloneBtn = h("button", { type: "button", disabled: s.status !== "READY" }, "Clone");
        const delBtn = h("button", { type: "button", class: "danger" }, "Delete");
        const actions = h("td", { class: "actions" }, cloneBtn, delBtn);
        cloneBtn.addEventListener("click", () => {
          openClone = cloneForm(s, status, () => {
            openClone = null;
            seen = ""; // redraw the row on the next poll
          });
          actions.replaceChildren(openClone);
          openClone.querySelector("input").focus();
        });
        delBtn.addEventListener("click", async () => {
          if (!confirm(`Delete snapshot ${s.name || s.id}?`)) return;
          try {
            await call("DELETE", `/v2/snapshots/${s.id}`);
            actions.closest("tr").remove();
          } catch (err) {
            replace(status, errorView(err));
          }
        });
        return h("tr", { "data-id": s.id },
          h("td", {}, s.name || h("span", { class: "muted" }, "(unnamed)")),
          h("td", {}, badge(s.status)),
          h("td", {}, h("a", { href: `#/sandboxes/${s.sourceSandboxId}` }, h("code", { class: "small" }, s.sourceSandboxId.slice(0, 8)))),
          h("td", {}, bytes(s.storedBytes)),
          h("td", {}, time(s.createdAt)),
          h("td", {}, time(s.expiresAt)),
          actions);
      }))));
  });
}

function cloneForm(snapshot, status, done) {
  const [nameField, nameInput] = field("Clone name", h("input", { name: "clone-name", required: true, value: `${snapshot.name || "clone"}-${Date.now() % 100000}` }));
  const go = h("button", { type: "submit", class: "primary" }, "Create clone");
  const cancel = h("button", { type: "button" }, "Cancel");
  const form = h("form", { class: "inline" }, nameField, go, cancel);
  cancel.addEventListener("click", () => {
    done();
    form.replaceWith(h("span", { class: "muted" }, "…"));
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const sandbox = await withProgress(status, go, "Cloning (restoring the snapshot)", async (setLabel) => {
        const { data } = await call("POST", "/v2/sandboxes", { name: nameInput.value.trim(), snapshotId: snapshot.id });
        return data.status === "STARTING" ? waitStarted(data.id, setLabel) : data;
      });
      done();
      location.hash = `#/sandboxes/${sandbox.id}`;
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  return form;
}
