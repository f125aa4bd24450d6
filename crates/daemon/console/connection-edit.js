// `#/connections/{id}/edit`: change a connection through PATCH /v1/connect/connections/{id}:
// name, config (the package version's schema, validated by sbxd, whose per-property
// errors show next to their fields), schedule, status, and credential rotation (new
// secrets replace the stored ones, which are never shown). An OAuth2 connection whose
// status says reauthorization is required offers Reconnect.

import { call, get, q } from "./api.js";
import { errorView, field, h, replace, withProgress } from "./dom.js";
import {
  C, CONNECTION_STATUS, configErrors, configFields, connectionBadge, credentialFields, reconnect, scheduleSelect, versionPath,
} from "./connect-common.js";

/** The edit form of connection `id`. */
export async function editConnectionPage(el, signal, id) {
  const status = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "card wide", "aria-labelledby": "edit-connection-title", novalidate: true },
    h("h1", { id: "edit-connection-title" }, "Edit connection"), h("p", { class: "muted" }, "Loading…"));
  replace(el, h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / ",
    h("a", { href: `#/connections/${id}` }, "Connection"), " / "), form);
  const conn = await get(`${C}/connections/${q(id)}`, { signal });
  const pv = await get(versionPath(conn.package, conn.version), { signal });
  const def = pv.definition || { auth: { type: conn.authKind }, config: {} };
  el.querySelector(".crumbs a:last-of-type").textContent = conn.name;

  const [nameField, nameInput] = field("Connection name", h("input", { name: "name", required: true, autocomplete: "off", value: conn.name }));
  const configOf = configFields(def.config, conn.config);
  const config = h("fieldset", { class: "field" }, h("legend", {}, `Configuration (${conn.package}@${conn.version})`),
    configOf.fields.length ? configOf.fields : h("p", { class: "muted" }, "This package has no configuration."));
  const [scheduleField, scheduleInput] = field("Schedule", scheduleSelect(conn.scheduleIntervalSeconds),
    "Scheduled runs sync every sync of the package; Run now works either way.");

  // Disabled stops the schedule; reauthorization_required is the platform's to set.
  let statusField = null;
  let statusInput = null;
  if (conn.status !== "reauthorization_required") {
    [statusField, statusInput] = field("Status", h("select", { name: "status" },
      ["active", "disabled"].map((s) => h("option", { value: s }, CONNECTION_STATUS[s]))), "A disabled connection runs no scheduled syncs.");
    statusInput.value = conn.status;
  }

  // Credentials: never shown; new ones replace them only when asked for.
  const credsOf = credentialFields(def.auth);
  const rotate = h("input", { type: "checkbox", name: "rotate", id: "rotate-credentials" });
  const credsBox = h("div", { class: "rotate-fields", hidden: true }, credsOf.fields);
  const oauth = def.auth.type === "oauth2";
  const creds = h("fieldset", { class: "field" }, h("legend", {}, `Credentials (${def.auth.type})`),
    def.auth.type === "none"
      ? h("p", { class: "muted" }, "This package needs no credentials.")
      : [
        h("p", { class: "muted small" }, "The stored credentials are never shown. ",
          oauth ? "A new OAuth client needs signing in again (Reconnect) before the next run." : "New ones replace them at once."),
        h("label", { class: "check", for: rotate.id }, rotate, oauth ? " Replace the OAuth client" : " Replace the credentials"),
        credsBox,
      ]);
  rotate.addEventListener("change", () => {
    credsBox.hidden = !rotate.checked;
    if (rotate.checked) credsBox.querySelector("input")?.focus();
  });

  let reauth = null;
  if (conn.status === "reauthorization_required") {
    const button = h("button", { type: "button", class: "primary" }, "Reconnect");
    button.addEventListener("click", () => withProgress(status, button, "Starting the OAuth sign-in", () => reconnect(id))
      .catch((err) => replace(status, errorView(err))));
    reauth = h("div", { class: "error reauth", role: "alert" }, connectionBadge(conn.status),
      " The provider's sign-in has to be done again before the next run. ", button);
  }

  const save = h("button", { type: "submit", class: "primary" }, "Save changes");
  replace(form, h("h1", { id: "edit-connection-title" }, `Edit ${conn.name}`), reauth, nameField, config, scheduleField, statusField, creds,
    h("div", { class: "actions" }, save, h("a", { href: `#/connections/${id}`, class: "button" }, "Cancel")), status);
  nameInput.focus();

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    configOf.clearErrors();
    replace(status);
    try {
      const body = {
        name: nameInput.value.trim(),
        config: configOf.value(),
        scheduleIntervalSeconds: scheduleInput.value ? Number(scheduleInput.value) : null,
      };
      if (statusInput && statusInput.value !== conn.status) body.status = statusInput.value;
      if (rotate.checked) body.credentials = credsOf.value();
      await withProgress(status, save, "Saving", () => call("PATCH", `${C}/connections/${q(id)}`, body));
      location.hash = `#/connections/${id}`;
    } catch (err) {
      if (err.code === "connect_invalid_config" || err.code === "invalid_json") {
        const [fields, rest] = configErrors(err.message);
        const unplaced = configOf.showErrors(fields);
        const left = [...rest, ...unplaced].filter(Boolean);
        // Everything the fields show, plus what no field can.
        replace(status, fields.size && left.length === 0
          ? h("p", { class: "error-text", role: "status" }, `Not saved: ${err.code} — see the fields marked above.`,
            err.requestId ? h("span", { class: "rid" }, " (request id ", h("code", {}, err.requestId), ")") : null)
          : errorView({ ...err, code: err.code, message: left.join("; ") || err.message, requestId: err.requestId }));
      } else {
        replace(status, errorView(err));
      }
    }
  });
}
