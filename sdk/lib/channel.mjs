// The job channel: one TCP stream through the in-sandbox proxy (HTTP CONNECT),
// then newline-delimited JSON both ways (docs/connect/job-protocol.md).

import { Buffer } from "node:buffer";
import net from "node:net";

export const MAX_LINE_BYTES = 16 * 1024 * 1024;

const netConnect = net.connect;
const bufferConcat = Buffer.concat.bind(Buffer);
const bufferByteLength = Buffer.byteLength.bind(Buffer);
const jsonParse = JSON.parse;
const jsonStringify = JSON.stringify;
const nativeSetTimeout = globalThis.setTimeout;
const nativeClearTimeout = globalThis.clearTimeout;

const reflectApply = Reflect.apply;
const toWellFormed = String.prototype.toWellFormed;
const objectEntries = Object.entries;
const isArray = Array.isArray;

/**
 * JSON.stringify, except that lone UTF-16 surrogates (a truncated emoji in an
 * API's JSON, say) become U+FFFD. JSON.stringify writes them as "\udXXX"
 * escapes, which strict UTF-8 parsers (serde_json on the host) reject: that
 * would turn a package's odd data into a platform protocol failure. Throws
 * like JSON.stringify (cycles, BigInt).
 */
export function stringifyWellFormed(value) {
  const json = jsonStringify(value);
  // Fast path: JSON.stringify escapes only lone surrogates this way (a real
  // pair is written as is), so no "\ud8".."\udf" means nothing to fix. The
  // test may also match an escaped backslash followed by "ud8…"; the slow
  // path then changes nothing.
  if (json === undefined || !/\\ud[89a-f]/i.test(json)) return json;
  return jsonStringify(value, (_key, v) => {
    if (typeof v === "string") return reflectApply(toWellFormed, v, []);
    if (v !== null && typeof v === "object" && !isArray(v)) {
      const out = {};
      for (const [k, x] of objectEntries(v)) out[reflectApply(toWellFormed, k, [])] = x;
      return out;
    }
    return v;
  });
}

/** A message line would exceed the protocol's 16 MiB. */
export class LineTooLong extends Error {}

/** Splits "host:port" (IPv6 as "[::1]:port"). */
export function splitHostPort(text) {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(text ?? "");
  if (!m) throw new Error(`expected host:port, got ${JSON.stringify(text)}`);
  return { host: m[1], port: Number(m[2]) };
}

/**
 * Connects to the proxy, asks it to CONNECT to `target`, and resolves to a
 * Channel once the proxy answered `HTTP/1.1 200`.
 */
export function openChannel(proxy, target, { timeoutMs = 10_000 } = {}) {
  const { host, port } = splitHostPort(proxy);
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host, port });
    socket.setNoDelay(true);
    let head = Buffer.alloc(0);
    const timer = nativeSetTimeout(() => fail(new Error("the proxy did not answer CONNECT in time")), timeoutMs);
    function fail(error) {
      nativeClearTimeout(timer);
      socket.destroy();
      reject(error);
    }
    function onData(chunk) {
      head = bufferConcat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) {
        if (head.length > 16 * 1024) fail(new Error("the proxy's answer to CONNECT is too long"));
        return;
      }
      const statusLine = head.subarray(0, head.indexOf("\r\n")).toString("latin1");
      if (!statusLine.startsWith("HTTP/1.1 200")) return fail(new Error(`the proxy refused CONNECT: ${statusLine}`));
      nativeClearTimeout(timer);
      socket.off("data", onData);
      socket.off("error", fail);
      socket.off("close", onEarlyClose);
      socket.pause();
      // Bytes after the header already belong to the channel.
      resolve(new Channel(socket, head.subarray(end + 4)));
    }
    function onEarlyClose() {
      fail(new Error("the proxy closed the connection during CONNECT"));
    }
    socket.on("data", onData);
    socket.on("error", fail);
    socket.on("close", onEarlyClose);
    socket.on("connect", () => {
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    });
  });
}

export class Channel {
  #socket;
  #pending = [];
  #pendingBytes = 0;
  #onMessage = null;
  #onError = null;
  #closed = false;

  #leftover;

  // The socket arrives paused (see openChannel): nothing is read until
  // listen() says where messages go, so none can be lost in between.
  constructor(socket, leftover) {
    this.#socket = socket;
    this.#leftover = leftover;
  }

  /**
   * Starts reading. handlers.message(obj) for each line received;
   * handlers.error(kind) once when the channel is lost ("closed") or the host
   * broke the framing ("protocol").
   */
  listen({ message, error }) {
    this.#onMessage = message;
    this.#onError = error;
    const socket = this.#socket;
    socket.on("data", (chunk) => this.#receive(chunk));
    socket.on("error", () => this.#lost());
    socket.on("close", () => this.#lost());
    if (this.#leftover.length > 0) this.#receive(this.#leftover);
    this.#leftover = null;
    socket.resume();
  }

  #receive(chunk) {
    if (this.#closed) return;
    let start = 0;
    let newline;
    while ((newline = chunk.indexOf(10, start)) !== -1) {
      this.#pending.push(chunk.subarray(start, newline));
      const line = bufferConcat(this.#pending).toString("utf8");
      this.#pending = [];
      this.#pendingBytes = 0;
      start = newline + 1;
      let message;
      try {
        message = jsonParse(line);
      } catch {
        return this.#protocolError();
      }
      if (message === null || typeof message !== "object" || typeof message.t !== "string") return this.#protocolError();
      this.#onMessage?.(message);
      if (this.#closed) return;
    }
    if (start < chunk.length) {
      this.#pending.push(chunk.subarray(start));
      this.#pendingBytes += chunk.length - start;
      if (this.#pendingBytes > MAX_LINE_BYTES) this.#protocolError();
    }
  }

  #protocolError() {
    this.#socket.pause();
    this.#onError?.("protocol");
  }

  #lost() {
    if (this.#closed) return;
    this.#closed = true;
    this.#onError?.("closed");
  }

  /** Serialises one message; throws LineTooLong above 16 MiB. */
  static encode(message) {
    return Channel.line(stringifyWellFormed(message));
  }

  /** Checks the size of an already serialised message and adds the newline. */
  static line(json) {
    if (bufferByteLength(json, "utf8") + 1 > MAX_LINE_BYTES) throw new LineTooLong();
    return json + "\n";
  }

  /**
   * Writes one line. Resolves once the socket can take more (waits for
   * 'drain' when its buffer is full), so a producer that awaits each send
   * never piles up unbounded memory.
   */
  write(line) {
    if (this.#closed) return Promise.reject(new Error("channel closed"));
    if (this.#socket.write(line)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onDrain = () => {
        this.#socket.off("close", onClose);
        resolve();
      };
      const onClose = () => {
        this.#socket.off("drain", onDrain);
        reject(new Error("channel closed"));
      };
      this.#socket.once("drain", onDrain);
      this.#socket.once("close", onClose);
    });
  }

  send(message) {
    return this.write(Channel.encode(message));
  }

  /** Flushes what was written and closes; resolves when done or after `capMs`. */
  end(capMs = 2000) {
    return new Promise((resolve) => {
      if (this.#closed) return resolve();
      const timer = nativeSetTimeout(resolve, capMs);
      this.#socket.end(() => {
        nativeClearTimeout(timer);
        resolve();
      });
    });
  }
}
