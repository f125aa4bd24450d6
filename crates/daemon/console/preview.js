// The Preview tab of a sandbox: whether its preview URLs
// (`{port}-{id}.{domain}`) answer and who may call them (GET/PUT/DELETE
// /v1/sandboxes/{id}/preview), and a link to a port's URL.

import { call, get } from "./api.js";
import { errorView, field, h, replace, withProgress } from "./dom.js";

/** Renders the preview settings of sandbox `id` into `el`. */
export async function previewTab(el, signal, id) {
  const state = h("div", { "aria-live": "polite" });
  const buttons = {
    public: h("button", { type: "button" }, "Public"),
    token: h("button", { type: "button" }, "Token only"),
    off: h("button", { type: "button", class: "danger" }, "Off"),
  };
  const [portField, portInput] = field("Port", h("input", { name: "preview-port", type: "number", min: "1", max: "65535", value: "8000" }),
    "A server listening on this port inside the sandbox (on 0.0.0.0 or 127.0.0.1).");
  const show = h("button", { type: "submit", class: "primary" }, "Show URL");
  const form = h("form", { class: "command" }, portField, show);
  const link = h("div", { class: "preview-link" });
  const status = h("div", { "aria-live": "polite" });
  replace(el, state, h("div", { class: "title-row" }, buttons.public, buttons.token, buttons.off), form, link, status);

  const render = (p) => {
    const who = !p.enabled ? "off: preview URLs answer 404"
      : p.public ? "public: anyone with the URL may call"
        : "token only: requests must carry the token header (browsers cannot send it; use Public to open a URL in a browser)";
    replace(state,
      h("p", {}, h("strong", {}, "Preview URLs: "), who),
      p.token ? h("p", {}, `${p.tokenHeader}: `, h("code", { class: "mono" }, p.token)) : null,
      p.domain ? null : h("p", { class: "error-text" }, "sbxd serves no preview domain (start it with --e2b-domain)."));
    buttons.public.disabled = p.enabled && p.public;
    buttons.token.disabled = p.enabled && !p.public;
    buttons.off.disabled = !p.enabled;
  };
  const load = async () => render(await get(`/v1/sandboxes/${id}/preview`, { signal }));
  const change = (button, label, method, body) => button.addEventListener("click", async () => {
    try {
      const p = await withProgress(status, button, label, async () => (await call(method, `/v1/sandboxes/${id}/preview`, body)).data);
      replace(status);
      render(p);
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  change(buttons.public, "Making preview URLs public", "PUT", { public: true });
  change(buttons.token, "Requiring the token", "PUT", { public: false });
  change(buttons.off, "Turning preview URLs off", "DELETE");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const p = await get(`/v1/sandboxes/${id}/preview?port=${encodeURIComponent(portInput.value.trim())}`, { signal });
      render(p);
      if (!p.host) return replace(link, h("p", {}, "Turn preview URLs on first."));
      // Same scheme as the console: sbxd serves both on one listener.
      const url = `${location.protocol}//${p.host}/`;
      replace(link, h("p", {}, h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, url)));
    } catch (err) {
      replace(link, errorView(err));
    }
  });
  await load();
}
