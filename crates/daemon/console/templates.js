// `#/templates`: the tenant's templates (an image booted, its start command
// run until a ready check passes, then snapshotted, so a create is a clone;
// see docs/templates.md): the list with each build's status, a create form,
// rebuild and delete. Creating from one is a field of the create form (list.js).

import { call, get, q } from "./api.js";
import { actionButton, badge, errorView, field, h, replace, time } from "./dom.js";
import { poll, POLL_MS } from "./list.js";

/** `#/templates`: the list (polled: builds move BUILDING → READY or FAILED) and the form. */
export async function templatesPage(el, signal) {
  const [nameField, nameInput] = field("Name", h("input", { name: "template-name", required: true, maxlength: 128, autocomplete: "off", placeholder: "web" }));
  const [imageField, imageSelect] = field("Image", h("select", { name: "template-image" }, h("option", { value: "" }, "Default image")));
  const [startField, startInput] = field("Start command", h("input", { name: "start-command", class: "mono", spellcheck: "false", autocomplete: "off", placeholder: "python3 -m http.server 8000" }),
    "Run in the background with sh -c; leave empty for none.");
  const [checkField, checkSelect] = field("Ready when", h("select", { name: "ready-kind" },
    h("option", { value: "" }, "started"),
    h("option", { value: "port" }, "a port accepts connections"),
    h("option", { value: "command" }, "a command exits 0")));
  const [portField, portInput] = field("Port", h("input", { name: "ready-port", type: "number", min: 1, max: 65535, value: 8000 }));
  const [cmdField, cmdInput] = field("Ready command", h("input", { name: "ready-command", class: "mono", spellcheck: "false", autocomplete: "off" }));
  const [timeoutField, timeoutInput] = field("Ready timeout (s)", h("input", { name: "ready-timeout", type: "number", min: 1, max: 1800, value: 60 }));
  portField.hidden = true;
  cmdField.hidden = true;
  checkSelect.addEventListener("change", () => {
    portField.hidden = checkSelect.value !== "port";
    cmdField.hidden = checkSelect.value !== "command";
  });
  const createStatus = h("div", { "aria-live": "polite" });
  const createButton = h("button", { type: "submit", class: "primary" }, "Create template");
  const form = h("form", { class: "card", "aria-labelledby": "new-template-title" },
    h("h2", { id: "new-template-title" }, "New template"), nameField, imageField, startField, checkField, portField, cmdField, timeoutField,
    h("div", { class: "actions" }, createButton), createStatus);
  const status = h("div", { "aria-live": "polite" });
  const table = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el, h("h1", {}, "Templates"), status, table, form);
  let seen = "";

  get("/v1/images", { signal }).then(({ images }) => {
    for (const i of images.slice(1)) imageSelect.append(h("option", { value: `${i.name}:${i.tag}` }, `${i.name}:${i.tag}`));
  }).catch(() => {});

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: nameInput.value.trim() };
    if (timeoutInput.value) body.readyTimeoutSecs = Number(timeoutInput.value);
    if (imageSelect.value) body.image = imageSelect.value;
    if (startInput.value.trim()) body.startCommand = startInput.value.trim();
    if (checkSelect.value === "port") body.readyCheck = { port: Number(portInput.value) };
    if (checkSelect.value === "command") body.readyCheck = { command: cmdInput.value };
    createButton.disabled = true;
    try {
      await call("POST", "/v1/templates", body);
      replace(createStatus, h("p", { class: "muted" }, `Template ${body.name} is building: its status is in the list.`));
      form.reset();
      timeoutInput.value = 60;
      portInput.value = 8000;
      portField.hidden = true;
      cmdField.hidden = true;
      seen = "";
    } catch (err) {
      replace(createStatus, errorView(err));
    } finally {
      createButton.disabled = false;
    }
  });

  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", "/v1/templates", undefined, { signal });
    const now = JSON.stringify(data.templates.map((t) => [t.name, t.status, t.updatedAt]));
    if (now === seen && table.firstChild) return; // unchanged: keep focus
    seen = now;
    if (data.templates.length === 0) {
      replace(table, h("p", { class: "empty" }, "No templates yet."));
      return;
    }
    replace(table, h("table", { class: "grid", "aria-label": "Templates" },
      h("thead", {}, h("tr", {}, ["Name", "Image", "Start command", "Status", "Updated", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, data.templates.map((t) => templateRow(t, status, () => { seen = ""; })))));
  });
}

function templateRow(t, status, changed) {
  const act = (label, cls, work) => actionButton(label, cls, status, work, changed);
  const rebuild = act("Rebuild", "", () => call("POST", `/v1/templates/${q(t.name)}/rebuild`));
  const del = act("Delete", "danger", async () => {
    if (!confirm(`Delete template ${t.name} and its snapshot?`)) return;
    await call("DELETE", `/v1/templates/${q(t.name)}`);
  });
  const state = h("td", {}, badge(t.status),
    t.error ? h("div", { class: "error-text" }, t.error) : null,
    t.status === "BUILDING" && t.creatable ? h("div", { class: "muted" }, "the previous build still serves creates") : null);
  return h("tr", { "data-name": t.name },
    h("td", {}, t.name),
    h("td", {}, h("code", { title: t.imageRef }, t.image || "default")),
    h("td", {}, t.startCommand ? h("code", {}, t.startCommand) : h("span", { class: "muted" }, "—")),
    state,
    h("td", {}, time(t.updatedAt)),
    h("td", { class: "actions" }, rebuild, del));
}
