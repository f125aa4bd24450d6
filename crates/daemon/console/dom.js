// Tiny DOM helpers: build elements without innerHTML, show alerts and progress.

/**
 * h("button", {class: "primary", onclick: fn}, "Save") builds an element.
 * Attributes starting with "on" become listeners; `false`/null attributes are skipped.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "value") {
      el.value = value;
    } else if (name === "checked") {
      el.checked = !!value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let uid = 0;
/** A unique element id for label/input pairs. */
export function nextId(prefix) {
  uid += 1;
  return `${prefix}-${uid}`;
}

/** A labelled form field; returns [wrapper, control]. */
export function field(label, control, hint) {
  const id = control.id || nextId("f");
  control.id = id;
  const hintEl = hint ? h("span", { class: "hint", id: `${id}-hint` }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return [h("div", { class: "field" }, h("label", { for: id }, label), control, hintEl), control];
}

/** The error as a block: code, message and request id (for support and logs). */
export function errorView(err) {
  const code = err.code || "error";
  return h(
    "div",
    { class: "error", role: "alert" },
    h("strong", {}, code),
    " — ",
    err.message || String(err),
    err.requestId ? h("span", { class: "rid" }, ` (request id `, h("code", {}, err.requestId), ")") : null,
  );
}

/** Shows an error at the top of the page until dismissed or the page changes. */
export function alertError(err) {
  if (err && err.status === 401) {
    document.dispatchEvent(new CustomEvent("sbx:unauthorized"));
    return;
  }
  const box = document.getElementById("alerts");
  const close = h("button", { type: "button", class: "link", "aria-label": "Dismiss error" }, "×");
  const item = h("div", { class: "alert" }, errorView(err), close);
  close.addEventListener("click", () => item.remove());
  box.append(item);
}

/** Removes every alert (on navigation). */
export function clearAlerts() {
  document.getElementById("alerts").replaceChildren();
}

/** A status word as a coloured badge. */
export function badge(status) {
  return h("span", { class: `badge s-${String(status).toLowerCase()}` }, status);
}

/** "3 s ago"-style relative time with the exact time as a tooltip. */
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const d = new Date(iso);
  return h("time", { datetime: iso, title: d.toLocaleString() }, d.toLocaleString());
}

/** Bytes as a short human string. */
export function bytes(n) {
  if (n === undefined || n === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return `${u === 0 ? v : v.toFixed(1)} ${units[u]}`;
}

/**
 * Runs `work` while showing a live progress line ("Creating… 4 s") in `where`,
 * and disables `button` meanwhile. Returns work's result; rethrows its error.
 */
export async function withProgress(where, button, label, work) {
  const started = Date.now();
  const text = h("span", {}, `${label}…`);
  const line = h("div", { class: "progress", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }), text);
  where.replaceChildren(line);
  const tick = setInterval(() => {
    text.textContent = `${label}… ${Math.round((Date.now() - started) / 1000)} s`;
  }, 500);
  if (button) button.disabled = true;
  try {
    return await work((msg) => {
      label = msg;
    });
  } finally {
    clearInterval(tick);
    if (button) button.disabled = false;
    line.remove();
  }
}

/**
 * A row's action button: runs `work` on click, then `done()`; an error is
 * shown in `status` instead.
 */
export function actionButton(label, cls, status, work, done) {
  const b = h("button", { type: "button", class: cls }, label);
  b.addEventListener("click", async () => {
    try {
      await work();
      done();
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  return b;
}

/** Waits `ms` milliseconds. */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
