// The sandbox page's Terminal tab: xterm.js (vendored, see vendor/VERSIONS) on
// GET /v1/sandboxes/{id}/terminal, a WebSocket to a login shell on a PTY in the
// sandbox. Binary frames are the terminal's bytes both ways; text frames are
// JSON control messages (resize from here; ready, exit and error from sbxd).
// The shell outlives the socket: its pid is kept in sessionStorage, so a
// dropped socket or a page reload reattaches to the same shell, whose recent
// output sbxd replays.

import { Terminal } from "./xterm.mjs";
import { FitAddon } from "./addon-fit.mjs";
import { get } from "./api.js";
import { h, replace } from "./dom.js";

const pidKey = (id) => `sbx-terminal-pid:${id}`;
/** Reconnect delays (ms), then the last one over and over. */
const BACKOFF = [250, 500, 1000, 2000, 4000];

/** The Terminal tab of sandbox `id` in `el` until `signal` aborts. */
export async function terminalTab(el, signal, id) {
  const state = h("p", { class: "term-state", "aria-live": "polite" }, "Connecting…");
  const box = h("div", { class: "xterm-box" });
  replace(el, state, box);
  const stopStyles = adoptInlineStyles(box);
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
    fontSize: 14,
    // Room below the baseline: underscores are not clipped.
    lineHeight: 1.2,
    scrollback: 5000,
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  term.focus();
  const encoder = new TextEncoder();
  let pid = sessionStorage.getItem(pidKey(id));
  let ws = null;
  let tries = 0;
  let ended = false;
  let timer = null;

  const setState = (kind, text) => {
    state.dataset.state = kind;
    state.textContent = text;
  };
  const showSize = () => {
    box.dataset.size = `${term.rows} ${term.cols}`;
  };
  showSize();

  const connect = () => {
    if (signal.aborted) return;
    const q = new URLSearchParams({ cols: term.cols, rows: term.rows });
    if (pid) q.set("pid", pid);
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const sock = new WebSocket(`${scheme}//${location.host}/v1/sandboxes/${id}/terminal?${q}`);
    sock.binaryType = "arraybuffer";
    ws = sock;
    let ready = false;
    sock.addEventListener("message", (ev) => {
      if (typeof ev.data !== "string") {
        term.write(new Uint8Array(ev.data));
        return;
      }
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (msg.type === "ready") {
        const reattached = pid === String(msg.pid);
        ready = true;
        tries = 0;
        pid = String(msg.pid);
        sessionStorage.setItem(pidKey(id), pid);
        // sbxd replays the shell's recent output: start from a clean screen.
        if (reattached) term.reset();
        setState("connected", `Connected to the shell (pid ${pid}).`);
      } else if (msg.type === "exit") {
        ended = true;
        pid = null;
        sessionStorage.removeItem(pidKey(id));
        setState("ended", `The shell exited${msg.code === null || msg.code === undefined ? "" : ` with code ${msg.code}`}. Press Enter for a new one.`);
      } else if (msg.type === "error") {
        term.write(`\r\n\x1b[31m${msg.code}: ${msg.message}\x1b[0m\r\n`);
      }
    });
    sock.addEventListener("close", () => {
      if (signal.aborted || ws !== sock || ended) return;
      reconnect(ready);
    });
  };

  // Why the socket closed is not visible to a page: ask about the sandbox.
  const reconnect = async (wasReady) => {
    let sandbox = null;
    try {
      sandbox = await get(`/v1/sandboxes/${id}`, { signal });
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 404) {
        setState("gone", "This sandbox no longer exists.");
        return;
      }
    }
    if (sandbox && sandbox.status !== "RUNNING") {
      const why = ["TERMINATED", "FAILED", "TERMINATING"].includes(sandbox.status)
        ? `The sandbox is ${sandbox.status}: it has no terminal any more.`
        : `The sandbox is ${sandbox.status}: the terminal reconnects when it is RUNNING.`;
      setState("not-running", why);
      if (["TERMINATED", "FAILED"].includes(sandbox.status)) return;
    } else {
      // A reattach refused while the sandbox runs: that shell is gone.
      if (!wasReady && pid && tries >= 1) {
        pid = null;
        sessionStorage.removeItem(pidKey(id));
      }
      setState("reconnecting", "Disconnected; reconnecting…");
    }
    const delay = BACKOFF[Math.min(tries, BACKOFF.length - 1)];
    tries += 1;
    timer = setTimeout(connect, delay);
  };

  term.onData((data) => {
    if (ended) {
      if (data.includes("\r")) {
        ended = false;
        term.reset();
        setState("connecting", "Starting a new shell…");
        connect();
      }
      return;
    }
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
  });
  term.onResize(({ cols, rows }) => {
    showSize();
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
  });
  const resizer = new ResizeObserver(() => fit.fit());
  resizer.observe(box);

  signal.addEventListener("abort", () => {
    clearTimeout(timer);
    resizer.disconnect();
    if (ws) ws.close();
    term.dispose();
    stopStyles();
  });
  connect();
}

/**
 * xterm.js puts its dimensions and colours in <style> elements, which the
 * console's Content-Security-Policy (style-src 'self', no inline styles)
 * refuses. Script-made <style> elements are never ours otherwise, so
 * document.createElement("style") makes an inert <sbx-style> element
 * instead (hidden by style.css), and adoptInlineStyles applies its text as
 * a constructed stylesheet, which the policy allows (it is not markup).
 */
const INERT_STYLE = "sbx-style";
const createElement = Document.prototype.createElement;
Document.prototype.createElement = function (tag, options) {
  const name = String(tag).toLowerCase() === "style" ? INERT_STYLE : tag;
  return createElement.call(this, name, options);
};

/** Applies the text of every inert style element under `root`, kept in step; returns the undo. */
function adoptInlineStyles(root) {
  const sheets = new Map();
  const isStyle = (node) => node && node.nodeName && node.nodeName.toLowerCase() === INERT_STYLE;
  const sync = (el) => {
    let sheet = sheets.get(el);
    if (!sheet) {
      sheet = new CSSStyleSheet();
      sheets.set(el, sheet);
      document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    }
    sheet.replaceSync(el.textContent || "");
  };
  const styleOf = (node) => {
    if (isStyle(node)) return node;
    return node && isStyle(node.parentNode) ? node.parentNode : null;
  };
  const observer = new MutationObserver((records) => {
    for (const r of records) {
      for (const n of r.addedNodes) {
        if (isStyle(n)) sync(n);
        else if (n.querySelectorAll) n.querySelectorAll(INERT_STYLE).forEach(sync);
      }
      const target = styleOf(r.target);
      if (target) sync(target);
    }
  });
  observer.observe(root, { childList: true, subtree: true, characterData: true });
  root.querySelectorAll(INERT_STYLE).forEach(sync);
  return () => {
    observer.disconnect();
    const mine = new Set(sheets.values());
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !mine.has(s));
  };
}
