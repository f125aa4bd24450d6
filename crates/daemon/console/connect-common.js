// Shared pieces of the Connect pages: the API prefix, lists, badges, the config and
// credential form controls (create and edit), and run results.

import { call, q } from "./api.js";
import { field, h } from "./dom.js";

export const C = "/v1/connect";
export const RUN_ENDED = new Set(["succeeded", "failed"]);
export const CONNECTION_STATUS = {
  active: "Active",
  reauthorization_required: "Reauthorization required",
  disabled: "Disabled",
};
export const SCHEDULES = [
  ["", "Run now only (no schedule)"],
  ["900", "Every 15 minutes"],
  ["3600", "Every hour"],
  ["21600", "Every 6 hours"],
  ["86400", "Every day"],
];

/** Every item of a Connect list (follows `page.cursor`). */
export async function connectAll(path, signal, maxPages = 20) {
  const items = [];
  let cursor = "";
  for (let i = 0; i < maxPages; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const { data, page } = await call("GET", `${path}${sep}limit=1000${cursor ? `&cursor=${q(cursor)}` : ""}`, undefined, { signal });
    items.push(...data);
    if (!page || !page.hasMore) break;
    cursor = page.cursor;
  }
  return items;
}

export const versionPath = (name, version) => `${C}/packages/${q(name)}/versions/${q(version)}`;

export function connectionBadge(status) {
  return h("span", { class: `badge s-${status}` }, CONNECTION_STATUS[status] || status);
}

export function duration(ms) {
  if (ms === null || ms === undefined) return h("span", { class: "muted" }, "—");
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

export function schedule(seconds) {
  if (!seconds) return "Run now only";
  const known = SCHEDULES.find(([v]) => Number(v) === seconds);
  return known ? known[1] : `Every ${seconds} s`;
}

/** The failure of a run as its category (and kind): runs never carry a message. */
export function failure(run) {
  if (!run.failureCategory) return h("span", { class: "muted" }, "—");
  return h("span", { class: "failure" }, h("code", {}, run.failureCategory), run.failureKind ? h("span", { class: "muted small" }, ` (${run.failureKind})`) : null);
}

/** Starts OAuth for a connection and sends the browser to the provider. */
export async function reconnect(id) {
  const { data } = await call("POST", `${C}/connections/${q(id)}/oauth/start`, { redirectUri: `${location.origin}/` });
  location.assign(data.authorizeUrl);
}


/** One fact of a `dl.facts`. */
export function fact(label, value) {
  return [h("div", {}, h("dt", {}, label), h("dd", {}, value))];
}


/** Form controls for the credentials of an auth kind. */
export function credentialFields(auth) {
  // minlength: sbxd refuses secrets under 8 bytes (they could not be redacted from answers).
  const secret = (label, name, hint) => field(label, h("input", { type: "password", name, required: true, minlength: 8, autocomplete: "off", spellcheck: "false" }), hint);
  const text = (label, name, required, hint) => field(label, h("input", { name, required, autocomplete: "off", spellcheck: "false" }), hint);
  const where = auth.header ? `sent as the ${auth.header} header` : auth.query ? `sent as the ${auth.query} query parameter` : null;
  switch (auth.type) {
    case "apiKey": {
      const [f, key] = secret("API key", "cred-key", where);
      return { fields: [f], value: () => ({ type: "apiKey", key: key.value }) };
    }
    case "bearer": {
      const [f, token] = secret("Bearer token", "cred-token");
      return { fields: [f], value: () => ({ type: "bearer", token: token.value }) };
    }
    case "basic": {
      const [fu, user] = text("Username", "cred-username", true);
      const [fp, pass] = secret("Password", "cred-password");
      return { fields: [fu, fp], value: () => ({ type: "basic", username: user.value, password: pass.value }) };
    }
    case "oauth2": {
      const [fi, id] = text("OAuth client id", "cred-client-id", true);
      const [fs, sec] = field("OAuth client secret", h("input", { type: "password", name: "cred-client-secret", minlength: 8, autocomplete: "off" }), "Optional with PKCE. After creating, Reconnect signs in with the provider.");
      return { fields: [fi, fs], value: () => ({ type: "oauth2", clientId: id.value, clientSecret: sec.value || null }) };
    }
    default:
      return { fields: [h("p", { class: "muted" }, "This package needs no credentials.")], value: () => ({ type: "none" }) };
  }
}

/** The text a control shows for a stored config value. */
function shown(v, kind) {
  if (v === undefined || v === null) return "";
  if (kind === "json") return JSON.stringify(v, null, 2);
  if (kind === "enum") return JSON.stringify(v);
  return String(v);
}

/**
 * Form controls for the top-level properties of a JSON schema, showing `current`'s values
 * (the edit form); `value()` builds the config, `showErrors(fields)` puts the server's
 * per-property errors next to their fields and returns the ones no field shows.
 */
export function configFields(schema, current = {}) {
  const props = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  const readers = [];
  const slots = new Map();
  const fields = Object.entries(props).map(([name, s]) => {
    const type = Array.isArray(s.type) ? s.type.find((t) => t !== "null") : s.type;
    const label = `${s.title || name}${required.has(name) ? " (required)" : ""}`;
    const hints = [s.description, s.default !== undefined ? `default ${JSON.stringify(s.default)}` : null,
      s.minimum !== undefined ? `min ${s.minimum}` : null, s.maximum !== undefined ? `max ${s.maximum}` : null].filter(Boolean);
    const hint = hints.join(" · ") || null;
    const attrs = { name: `config-${name}`, "data-config": name, required: required.has(name), autocomplete: "off", spellcheck: "false" };
    const now = current ? current[name] : undefined;
    let control;
    let read;
    if (Array.isArray(s.enum)) {
      control = h("select", attrs, h("option", { value: "" }, "(default)"), s.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
      control.value = shown(now, "enum");
      read = () => (control.value === "" ? undefined : JSON.parse(control.value));
    } else if (type === "boolean") {
      control = h("select", attrs, h("option", { value: "" }, "(default)"), h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
      control.value = shown(now);
      read = () => (control.value === "" ? undefined : control.value === "true");
    } else if (type === "integer" || type === "number") {
      control = h("input", { ...attrs, type: "number", step: type === "integer" ? 1 : "any", min: s.minimum, max: s.maximum, placeholder: s.default, value: shown(now) });
      read = () => (control.value === "" ? undefined : Number(control.value));
    } else if (type === "string") {
      control = h("input", { ...attrs, pattern: s.pattern, placeholder: s.default, value: shown(now) });
      read = () => (control.value === "" ? undefined : control.value);
    } else {
      control = h("textarea", { ...attrs, rows: 3, class: "mono", placeholder: "JSON" });
      control.value = shown(now, "json");
      read = () => {
        if (control.value.trim() === "") return undefined;
        try {
          return JSON.parse(control.value);
        } catch (e) {
          throw Object.assign(new Error(`config.${name}: not JSON (${e.message})`), { code: "invalid_json" });
        }
      };
    }
    readers.push([name, read]);
    const [wrapper] = field(label, control, hint);
    slots.set(name, { wrapper, control });
    return wrapper;
  });
  const clearErrors = () => {
    for (const { wrapper, control } of slots.values()) {
      wrapper.querySelector(".field-error")?.remove();
      control.removeAttribute("aria-invalid");
      const ids = (control.getAttribute("aria-describedby") || "").split(" ").filter((i) => i && !i.endsWith("-error"));
      if (ids.length) control.setAttribute("aria-describedby", ids.join(" "));
      else control.removeAttribute("aria-describedby");
    }
  };
  return {
    fields,
    value: () => {
      const out = {};
      for (const [name, read] of readers) {
        const v = read();
        if (v !== undefined) out[name] = v;
      }
      return out;
    },
    clearErrors,
    showErrors: (errors) => {
      clearErrors();
      const rest = [];
      let first = null;
      for (const [name, messages] of errors) {
        const slot = slots.get(name);
        if (!slot) {
          rest.push(...messages.map((m) => `config.${name}: ${m}`));
          continue;
        }
        const id = `${slot.control.id}-error`;
        slot.wrapper.append(h("span", { class: "field-error", id, role: "alert" }, messages.join("; ")));
        slot.control.setAttribute("aria-invalid", "true");
        slot.control.setAttribute("aria-describedby", [slot.control.getAttribute("aria-describedby"), id].filter(Boolean).join(" "));
        first = first || slot.control;
      }
      if (first) first.focus();
      return rest;
    },
  };
}

/**
 * The per-property errors of a refused config: sbxd names each value it refused as
 * `config.<property>[...]: <reason>`, several joined by "; ". Returns [Map property →
 * reasons, the message parts that name no property].
 */
export function configErrors(message) {
  const fields = new Map();
  const rest = [];
  for (const part of String(message || "").split(/; (?=config\b)/)) {
    const m = /^config\.([^.[:\s]+)[^:]*: ([\s\S]+)$/.exec(part);
    if (m) fields.set(m[1], [...(fields.get(m[1]) || []), m[2]]);
    else rest.push(part);
  }
  return [fields, rest];
}

/** A schedule select showing `seconds` (an interval not in the list gets its own option). */
export function scheduleSelect(seconds) {
  const options = SCHEDULES.map(([v, label]) => h("option", { value: v }, label));
  if (seconds && !SCHEDULES.some(([v]) => Number(v) === seconds)) options.push(h("option", { value: String(seconds) }, `Every ${seconds} s`));
  const select = h("select", { name: "schedule" }, options);
  select.value = seconds ? String(seconds) : "";
  return select;
}

/** The end of a run as a line: records and duration, or its failure category. */
export function runResult(run, what) {
  if (run.status === "succeeded") {
    return h("p", { class: "ok", role: "status" }, `${what} succeeded: ${run.recordsCommitted} records committed in `, duration(run.durationMs), ".");
  }
  return h("div", { class: "error", role: "alert" }, h("strong", {}, `${what} failed`), " — category ", h("code", {}, run.failureCategory || "unknown"),
    run.failureKind ? [" (", h("code", {}, run.failureKind), ")"] : null, ". The run's own messages are in the Logs tab.");
}
