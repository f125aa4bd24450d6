// The console shell: session bootstrap, sign-in, navigation (hash routes) and pages.
// Plain ES modules with no dependencies: nothing to vendor or build, and the
// files are embedded in sbxd as they are.

import { ApiError, call, get, setCsrf } from "./api.js";
import { alertError, clearAlerts, errorView, field, h, replace } from "./dom.js";
import { createPage, sandboxesPage, snapshotsPage } from "./list.js";
import { connectionPage, connectionsPage, finishOauth, newConnectionPage } from "./connect.js";
import { editConnectionPage } from "./connection-edit.js";
import { packagesPage, packageVersionPage } from "./packages.js";
import { detailPage } from "./detail.js";
import { volumesPage } from "./volumes.js";
import { imagesPage } from "./images.js";
import { templatesPage } from "./templates.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const signOutButton = document.getElementById("sign-out");
const who = document.getElementById("who");
let pageAbort = null;
let signedIn = false;

/** The pages, by the first segment of the hash route. */
function resolve(hash) {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  switch (parts[0] || "sandboxes") {
    case "sandboxes":
      if (parts[1] === "new") return ["sandboxes", (el, signal) => createPage(el, signal)];
      if (parts[1]) return ["sandboxes", (el, signal) => detailPage(el, signal, parts[1], parts[2])];
      return ["sandboxes", sandboxesPage];
    case "snapshots":
      return ["snapshots", snapshotsPage];
    case "volumes":
      return ["volumes", volumesPage];
    case "images":
      return ["images", imagesPage];
    case "templates":
      return ["templates", templatesPage];
    case "connections":
      if (parts[1] === "new") return ["connections", newConnectionPage];
      if (parts[1] && parts[2] === "edit") return ["connections", (el, signal) => editConnectionPage(el, signal, parts[1])];
      if (parts[1]) return ["connections", (el, signal) => connectionPage(el, signal, parts[1], parts[2], parts[3])];
      return ["connections", connectionsPage];
    case "packages":
      if (parts[1] && parts[2]) return ["packages", (el, signal) => packageVersionPage(el, signal, parts[1], parts[2], parts[3])];
      return ["packages", packagesPage];
    default:
      return ["", notFoundPage];
  }
}

function route() {
  if (!signedIn) return;
  if (pageAbort) pageAbort.abort();
  pageAbort = new AbortController();
  clearAlerts();
  const [section, page] = resolve(location.hash);
  for (const a of nav.querySelectorAll("a")) {
    if (a.dataset.nav === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  main.replaceChildren();
  const signal = pageAbort.signal;
  Promise.resolve(page(main, signal)).catch((err) => {
    if (!signal.aborted && err.name !== "AbortError") alertError(err);
  });
  const heading = main.querySelector("h1");
  (heading || main).setAttribute("tabindex", "-1");
  (heading || main).focus({ preventScroll: true });
}

function notFoundPage(el) {
  replace(el, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/sandboxes" }, "Back to sandboxes")));
}

function showApp(session) {
  signedIn = true;
  nav.hidden = false;
  signOutButton.hidden = session.dev;
  who.textContent = session.dev ? "dev mode (no sign-in)" : "signed in";
  // Back from an OAuth provider (`/?code=…&state=…`): finish the sign-in first.
  finishOauth().then((err) => {
    route();
    if (err) alertError(err);
  });
}

function showSignIn(message) {
  signedIn = false;
  if (pageAbort) pageAbort.abort();
  setCsrf(null);
  nav.hidden = true;
  signOutButton.hidden = true;
  who.textContent = "";
  clearAlerts();
  const [keyField, keyInput] = field(
    "API key",
    h("input", { type: "password", name: "key", autocomplete: "current-password", required: true, spellcheck: "false" }),
    "A signing key sbxd accepts (signkey-…). It stays in sbxd's memory; the browser keeps only a session cookie.",
  );
  const status = h("div", { id: "sign-in-status", "aria-live": "polite" }, message ? h("p", { class: "muted" }, message) : null);
  const button = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h("form", { class: "card narrow", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in to sbx"), keyField, button, status);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    button.disabled = true;
    try {
      const { data } = await call("POST", "/console/session", { key: keyInput.value });
      setCsrf(data.csrfToken);
      keyInput.value = "";
      // The cookie is Secure off loopback: over plain HTTP the browser drops it.
      await get("/console/session").catch((err) => {
        if (err.status === 401) {
          err.message = "signed in, but the browser did not keep the session cookie (sbxd marks it Secure when it does not listen on loopback: open the console over HTTPS)";
        }
        throw err;
      });
      if (!location.hash) location.hash = "#/sandboxes";
      showApp(data);
    } catch (err) {
      replace(status, errorView(err));
      keyInput.focus();
    } finally {
      button.disabled = false;
    }
  });
  replace(main, form);
  keyInput.focus();
}

signOutButton.addEventListener("click", async () => {
  try {
    await call("DELETE", "/console/session");
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) {
      alertError(err);
      return;
    }
  }
  showSignIn("Signed out.");
});

// Any 401 (expired session, revoked key) brings the sign-in form back.
document.addEventListener("sbx:unauthorized", () => showSignIn("Your session has ended; sign in again."));
window.addEventListener("hashchange", route);

async function boot() {
  try {
    const session = await get("/console/session");
    setCsrf(session.csrfToken);
    showApp(session);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) showSignIn();
    else replace(main, h("h1", {}, "sbx console"), errorView(err));
  }
}

boot();
