// The build form of `#/images`: a Dockerfile typed here (packed into a
// one-file context tar in the browser) or a context tarball, built by
// `POST /v1/images/build` with its log streamed live (NDJSON: steps, their
// output, then the image or the error). See docs/images.md.

import { q, readNdjson, request } from "./api.js";
import { errorView, field, h, replace } from "./dom.js";

/** A ustar archive of `files` ([name, Uint8Array] pairs). */
export function tarOf(files) {
  const enc = new TextEncoder();
  const blocks = [];
  const put = (buf, off, text, len) => buf.set(enc.encode(text).slice(0, len), off);
  for (const [name, data] of files) {
    const head = new Uint8Array(512);
    put(head, 0, name, 100);
    put(head, 100, "0000644\0", 8);
    put(head, 108, "0000000\0", 8);
    put(head, 116, "0000000\0", 8);
    put(head, 124, `${data.length.toString(8).padStart(11, "0")}\0`, 12);
    put(head, 136, `${Math.floor(Date.now() / 1000).toString(8).padStart(11, "0")}\0`, 12);
    put(head, 148, "        ", 8);
    head[156] = "0".charCodeAt(0);
    put(head, 257, "ustar\0", 6);
    put(head, 263, "00", 2);
    const sum = head.reduce((a, b) => a + b, 0);
    put(head, 148, `${sum.toString(8).padStart(6, "0")}\0 `, 8);
    blocks.push(head, data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  return new Blob(blocks, { type: "application/x-tar" });
}

/** The build card: name and tag, a Dockerfile or a context tarball, the live log. */
export function buildForm(onBuilt) {
  const [nameField, nameInput] = field("Image name and tag", h("input", { name: "build-name", required: true, placeholder: "py-tools:1", autocomplete: "off" }));
  const [fileField, dockerfile] = field("Dockerfile", h("textarea", { name: "dockerfile", rows: 6, class: "mono", spellcheck: "false" },
    "FROM default\nRUN pip install --no-cache-dir requests\nWORKDIR /srv\n"),
    "Used when no context tarball is chosen (then COPY has nothing to copy).");
  const [ctxField, ctxInput] = field("Context tarball (optional)", h("input", { name: "build-context", type: "file", accept: ".tar,.tgz,.gz,application/x-tar,application/gzip" }),
    "A tar (or .tar.gz) with the Dockerfile at its root and the files COPY takes; .dockerignore honoured.");
  const log = h("pre", { class: "terminal", "aria-label": "Build log", "aria-live": "polite", hidden: true });
  const outcome = h("div", { "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary" }, "Build image");
  const form = h("form", { class: "card", "aria-labelledby": "build-image-title" },
    h("h2", { id: "build-image-title" }, "Build from a Dockerfile"), nameField, fileField, ctxField,
    h("div", { class: "actions" }, button), log, outcome);

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const [name, tag = "latest"] = nameInput.value.trim().split(":");
    const body = ctxInput.files[0] || tarOf([["Dockerfile", new TextEncoder().encode(dockerfile.value)]]);
    replace(log);
    replace(outcome);
    log.hidden = false;
    button.disabled = true;
    const line = (text, cls) => {
      log.append(h("span", cls ? { class: cls } : {}, text));
      log.scrollTop = log.scrollHeight;
    };
    try {
      const resp = await request("POST", `/v1/images/build?name=${q(name)}&tag=${q(tag)}`, body);
      await readNdjson(resp, (ev) => {
        if (ev.type === "step") line(`Step ${ev.step}/${ev.of} (line ${ev.line}): ${ev.instruction}${ev.cached ? "  [cached]" : ""}\n`, "prompt");
        else if (ev.type === "output") line(ev.data, ev.stream === "stderr" ? "err" : null);
        else if (ev.type === "result") {
          replace(outcome, h("p", { class: "muted" }, `Built ${ev.image.name}:${ev.image.tag} (${ev.image.digest.slice(0, 19)}).`));
          onBuilt();
        } else if (ev.type === "error") {
          replace(outcome, errorView({ code: ev.code, message: ev.exitCode !== undefined ? `${ev.message} (exit code ${ev.exitCode})` : ev.message }));
        }
      });
    } catch (err) {
      replace(outcome, errorView(err));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}
