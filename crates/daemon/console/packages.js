// Connect packages: upload a tarball, the versions, and builds with their logs.

import { call, get, q } from "./api.js";
import { badge, bytes, errorView, field, h, replace, sleep, time, withProgress } from "./dom.js";
import { POLL_MS, poll } from "./list.js";
import { C, RUN_ENDED, connectAll, fact, versionPath } from "./connect-common.js";

/** `#/packages`: upload a tarball, every package version with its latest build. */
export async function packagesPage(el, signal) {
  const [fileField, fileInput] = field("Package tarball (.tgz)", h("input", { type: "file", name: "tarball", accept: ".tgz,.tar.gz,application/gzip" }),
    "tar -C DIR --exclude=node_modules -czf pkg.tgz . — package.json and a lockfile at the root; versions are immutable.");
  const send = h("button", { type: "submit", class: "primary" }, "Upload");
  const form = h("form", { class: "command" }, fileField, send);
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(el,
    h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / "),
    h("h1", {}, "Packages"), form, status, body);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = fileInput.files[0];
    if (!file) {
      replace(status, errorView({ code: "missing_file", message: "choose a .tgz file first" }));
      return;
    }
    try {
      const { status: code, data } = await withProgress(status, send, `Uploading ${file.name} (${bytes(file.size)})`, () =>
        call("POST", `${C}/packages`, file));
      fileInput.value = "";
      location.hash = `#/packages/${q(data.name)}/${q(data.version)}`;
      if (code === 200) alertNote(`${data.name} ${data.version} was already uploaded with the same bytes.`);
    } catch (err) {
      replace(status, errorView(err));
    }
  });
  let seen = "";
  await poll(signal, 3000, async () => {
    const packages = await connectAll(`${C}/packages`, signal);
    const rows = [];
    for (const p of packages) {
      for (const v of p.versions) {
        const pv = await get(versionPath(p.name, v), { signal });
        const { data: builds } = await call("GET", `${versionPath(p.name, v)}/builds?limit=1`, undefined, { signal });
        rows.push({ pv, build: builds[0] || null });
      }
    }
    const now = JSON.stringify(rows);
    if (now === seen) return;
    seen = now;
    if (rows.length === 0) {
      replace(body, h("p", { class: "empty" }, "No packages yet: upload a .tgz above (or sbx connect package upload DIR)."));
      return;
    }
    replace(body, h("table", { class: "grid", "aria-label": "Packages" },
      h("thead", {}, h("tr", {}, ["Package", "Version", "Size", "Uploaded", "Latest build", "Syncs"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map(({ pv, build }) => h("tr", { "data-package": pv.name, "data-version": pv.version },
        h("td", {}, h("a", { href: `#/packages/${q(pv.name)}/${q(pv.version)}` }, pv.name)),
        h("td", {}, pv.version),
        h("td", {}, bytes(pv.size)),
        h("td", {}, time(pv.createdAt)),
        h("td", {}, build ? badge(build.status) : h("span", { class: "muted" }, "not built")),
        h("td", {}, pv.definition ? pv.definition.syncs.map((s) => s.name).join(", ") : h("span", { class: "muted" }, "—")))))));
  });
}

/** A short-lived confirmation line in the alerts area. */
function alertNote(text) {
  document.getElementById("alerts").append(h("p", { class: "ok note", role: "status" }, text));
}

/** `#/packages/{name}/{version}[/{buildId}]`: the version, Start build, builds and a build's log. */
export async function packageVersionPage(el, signal, name, version, buildId) {
  const path = versionPath(name, version);
  const start = h("button", { type: "button", class: "primary" }, "Start build");
  const progress = h("div", { "aria-live": "polite" });
  const facts = h("dl", { class: "facts" });
  const builds = h("div");
  const logBox = h("section", { class: "build-log", "aria-label": "Build log" });
  replace(el,
    h("p", { class: "crumbs" }, h("a", { href: "#/connections" }, "Connections"), " / ", h("a", { href: "#/packages" }, "Packages"), " / "),
    h("div", { class: "title-row" }, h("h1", {}, `${name} ${version}`), h("span", { class: "spacer" }), start),
    progress, facts, h("h2", {}, "Builds"), builds, logBox);

  const renderVersion = (pv) => {
    const def = pv.definition;
    replace(facts,
      fact("SHA-256", h("code", { class: "small" }, pv.sha256.slice(0, 16))),
      fact("Size", bytes(pv.size)),
      fact("Entry", h("code", {}, pv.entry)),
      fact("Uploaded", time(pv.createdAt)),
      fact("Auth", def ? def.auth.type : "— (not built)"),
      fact("Syncs", def ? def.syncs.map((s) => `${s.name} (${s.mode})`).join(", ") : "—"),
      fact("Verify", def ? (def.hasVerify ? "yes" : "no") : "—"));
  };
  renderVersion(await get(path, { signal }));

  const showLog = async (id) => {
    const b = await get(`${C}/builds/${q(id)}`, { signal });
    replace(logBox, h("h2", {}, "Build log ", h("code", { class: "small" }, b.id.slice(0, 8)), " ", badge(b.status)),
      b.failure ? h("div", { class: "error", role: "alert" }, h("strong", {}, "build failed"), " — ", b.failure) : null,
      h("pre", { class: "terminal", tabindex: "0", "aria-label": "Build log output" }, b.log || (RUN_ENDED.has(b.status) ? "(empty)" : "(waiting for output…)")));
    const pre = logBox.querySelector("pre");
    pre.scrollTop = pre.scrollHeight;
    return b;
  };

  start.addEventListener("click", async () => {
    try {
      const b = await withProgress(progress, start, "Building (npm ci in a fresh sandbox)", async (setLabel) => {
        let { data: build } = await call("POST", `${path}/builds`);
        history.replaceState(null, "", `#/packages/${q(name)}/${q(version)}/${build.id}`);
        buildId = build.id;
        while (!RUN_ENDED.has(build.status)) {
          setLabel(`Building (${build.status})`);
          await sleep(1000);
          build = await showLog(build.id);
          seen = ""; // the builds table too
        }
        return build;
      });
      await showLog(b.id);
      renderVersion(await get(path, { signal }));
      replace(progress, b.status === "succeeded"
        ? h("p", { class: "ok", role: "status" }, "Build succeeded: the version can be used by connections. ", h("a", { href: "#/connections/new" }, "New connection"))
        : h("div", { class: "error", role: "alert" }, h("strong", {}, "build failed"), " — ", b.failure || "see the build log"));
    } catch (err) {
      replace(progress, errorView(err));
    }
  });

  let seen = "";
  await poll(signal, POLL_MS, async () => {
    const { data } = await call("GET", `${path}/builds?limit=20`, undefined, { signal });
    const now = JSON.stringify(data.map((b) => [b.id, b.status]));
    const changed = now !== seen;
    seen = now;
    if (!buildId && data[0]) buildId = data[0].id;
    const shown = data.find((b) => b.id === buildId);
    if (!changed) {
      // unchanged: keep keyboard focus in the table
    } else if (data.length === 0) {
      replace(builds, h("p", { class: "empty" }, "Not built yet: Start build installs the dependencies from the lockfile and reads the definition."));
    } else {
      replace(builds, h("table", { class: "grid", "aria-label": "Builds" },
        h("thead", {}, h("tr", {}, ["Build", "Status", "Started", "Finished", "Log"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, data.map((b) => h("tr", { "data-id": b.id },
          h("td", {}, h("code", { class: "small" }, b.id.slice(0, 8))),
          h("td", {}, badge(b.status)),
          h("td", {}, time(b.createdAt)),
          h("td", {}, time(b.finishedAt)),
          h("td", {}, h("a", { href: `#/packages/${q(name)}/${q(version)}/${b.id}`, "aria-label": `Log of build ${b.id.slice(0, 8)}` }, "Log")))))));
    }
    if (buildId && (!shown || !logBox.firstChild || !RUN_ENDED.has(shown.status) || logBox.dataset.build !== `${buildId}:${shown.status}`)) {
      const b = await showLog(buildId);
      logBox.dataset.build = `${b.id}:${b.status}`;
    }
  });
}
