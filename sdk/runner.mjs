// The in-sandbox runner of a Connect job:
//
//   node /opt/sbx-connect/runner.mjs --proxy 127.0.0.1:3128 --target sbx-job.internal:1
//
// It opens the job channel (docs/connect/job-protocol.md) before any package
// code exists in the process, says hello, reads the job, makes the specifier
// `@sbx/connect` resolve to this directory's index.mjs, imports the package
// entry and runs the job. Everything the host needs goes over the channel;
// stdout and stderr are discarded by the host and never used here.
//
// The package runs in this same process, so keeping the channel and the
// host's answers away from it is defence in depth only (the sandbox and the
// broker are the boundary): the socket lives in module-private state, and
// the globals used below are captured before the package is imported.

import { Buffer } from "node:buffer";
import { registerHooks } from "node:module";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { Channel, LineTooLong, openChannel, stringifyWellFormed } from "./lib/channel.mjs";
import { createContext } from "./lib/ctx.mjs";
import { defineConnector, describeDefinition, isDefinition, isDefinitionError } from "./lib/definition.mjs";
import { FetchError, HttpError } from "./lib/errors.mjs";
import { applyDefaults } from "./lib/schema.mjs";

const exit = process.exit.bind(process);
const onProcess = process.on.bind(process);
const argv = [...process.argv];
const jsonStringify = JSON.stringify;
const jsonParse = JSON.parse;
const byteLength = Buffer.byteLength.bind(Buffer);
const perfNow = performance.now.bind(performance);
const nativeSetTimeout = globalThis.setTimeout;
const nativeSetImmediate = globalThis.setImmediate;
const NativeAbortController = globalThis.AbortController;
const NativeDOMException = globalThis.DOMException;
const objectHasOwn = Object.hasOwn;
const asyncIteratorSymbol = Symbol.asyncIterator;

const SDK_URL = new URL("./index.mjs", import.meta.url).href;

// Logs: the host stops recording after a message over 4 KiB or 1 MiB in a
// run. The runner never decides for the host; it only avoids sending what
// the host cannot use: a message is cut to 16 Ki UTF-16 units (still over
// 4 KiB however the host counts it, so the host still sees an oversize
// message), forwarding stops after such a message, and after 4 MiB (over 1 Mi
// characters in any unit). This also keeps every log line far below 16 MiB.
const LOG_CUT_UNITS = 16 * 1024;
const LOG_STOP_BYTES = 4 * 1024 * 1024;

// The runner's own explanations (a definition or import error) stay well below
// the host's 4 KiB per message, so recording never stops because of them.
const NOTE_CUT_UNITS = 2000;

const EXIT_BAD_ARGS = 2;
const EXIT_NO_CHANNEL = 3;

/** A failure that is the package's doing; `kind` goes into `fail`. */
class PackageFailure extends Error {
  constructor(kind) {
    super(kind);
    this.kind = kind;
  }
}

/** A job message the runner cannot run: a host bug, reported as `protocol`. */
class BadJob extends Error {}

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** An error's name and message for a log line, cut short; never throws. */
function describeError(error) {
  let text;
  try {
    text = error instanceof Error ? `${error.name}: ${error.message}` : `a thrown ${typeof error}`;
  } catch {
    text = "an error that cannot be shown";
  }
  return text.length > NOTE_CUT_UNITS ? `${text.slice(0, NOTE_CUT_UNITS)}…` : text;
}

/**
 * The fail kind of an error the package threw: `http_<status>` for an
 * HttpError (the status only: the run carries no message), else `threw`.
 */
function thrownKind(error) {
  if (error instanceof HttpError && Number.isInteger(error.status) && error.status >= 100 && error.status <= 599) {
    return `http_${error.status}`;
  }
  return "threw";
}

function parseArgs(list) {
  const out = {};
  for (let i = 0; i < list.length; i += 2) {
    if (list[i] === "--proxy") out.proxy = list[i + 1];
    else if (list[i] === "--target") out.target = list[i + 1];
    else throw new Error(`unknown argument ${list[i]}`);
  }
  if (!out.proxy || !out.target) throw new Error("--proxy and --target are required");
  return out;
}

function checkJob(job) {
  const need = (ok, what) => {
    if (!ok) throw new BadJob(what);
  };
  need(["describe", "verify", "oauth", "sync", "webhook"].includes(job.kind), "kind");
  need(typeof job.entry === "string" && job.entry.startsWith("/"), "entry");
  need(Number.isFinite(job.deadlineMs) && job.deadlineMs > 0, "deadlineMs");
  if (job.kind === "describe") return;
  need(isPlainObject(job.config), "config");
  const retry = job.retry;
  need(isPlainObject(retry) && ["maxAttempts", "baseDelayMs", "maxDelayMs", "maxRetryAfterMs"].every((k) => Number.isFinite(retry[k]) && retry[k] >= 0), "retry");
  if (job.kind === "oauth") need(typeof job.oauthStep === "string", "oauthStep");
  if (job.kind === "webhook") {
    need(typeof job.sync === "string", "sync");
    const d = job.delivery;
    need(isPlainObject(d) && typeof d.id === "string" && typeof d.receivedAt === "string" && typeof d.body === "string" && isPlainObject(d.headers), "delivery");
  }
  if (job.kind === "sync") {
    need(typeof job.sync === "string", "sync");
    need(job.checkpoint === null || job.checkpoint === undefined || isPlainObject(job.checkpoint), "checkpoint");
  }
  if (job.kind === "sync" || job.kind === "webhook") {
    const limits = job.limits;
    need(isPlainObject(limits) && ["maxBatches", "maxRecordsPerBatch", "maxRecordBytes", "maxOutputBytes", "maxCheckpointBytes"].every((k) => Number.isInteger(limits[k]) && limits[k] >= 0), "limits");
  }
}

class Runner {
  #channel;
  #jobArrived;
  #onJob;
  #job = null;
  #finished = false; // done/fail sent (or being sent): nothing else goes out
  #stopping = false; // host said abort: only logs still go out, then exit
  #controller = new NativeAbortController();
  #pendingFetches = new Map();
  #nextFetchId = 1;
  #logBytes = 0;
  #logsStopped = false;

  constructor(channel) {
    this.#channel = channel;
    this.#jobArrived = new Promise((resolve) => {
      this.#onJob = resolve;
    });
    channel.listen({
      message: (message) => this.#receive(message),
      error: (kind) => {
        if (kind === "protocol") this.#finish({ t: "fail", category: "platform", kind: "protocol" });
        else if (!this.#finished) exit(EXIT_NO_CHANNEL); // the host is gone; nobody to tell
      },
    });
  }

  #receive(message) {
    switch (message.t) {
      case "job":
        if (this.#job !== null) return this.#protocolError();
        this.#job = message;
        this.#onJob(message);
        return;
      case "fetch_result":
      case "fetch_error": {
        // An id nobody waits for is an answer to a request the package gave up
        // on (its signal aborted); dropping it is the expected outcome.
        const resolve = this.#pendingFetches.get(message.id);
        if (resolve) {
          this.#pendingFetches.delete(message.id);
          resolve(message);
        }
        return;
      }
      case "abort":
        this.#abort(message.reason);
        return;
      default:
        this.#protocolError();
    }
  }

  #protocolError() {
    this.#finish({ t: "fail", category: "platform", kind: "protocol" });
  }

  /** Sends one serialised line unless the run is over. */
  #emit(line, { isLog = false } = {}) {
    if (this.#finished || (this.#stopping && !isLog)) return new Promise(() => {}); // the process exits shortly
    return this.#channel.write(line);
  }

  /** Sends the final message once, flushes, exits 0. */
  #finish(message) {
    return this.#finishWithLine(Channel.encode(message));
  }

  async #finishWithLine(line) {
    // After an abort the protocol wants no done/fail, whatever the package does.
    if (this.#finished || this.#stopping) return;
    this.#finished = true;
    try {
      await this.#channel.write(line);
    } catch {
      // The channel is gone; the host treats that as a lost run.
    }
    await this.#channel.end();
    exit(0);
  }

  /** For a bug in the runner itself: the host retries platform failures. */
  failPlatform() {
    return this.#finish({ t: "fail", category: "platform", kind: "runner_error" });
  }

  #failPackage(kind) {
    return this.#finish({ t: "fail", category: "package", kind });
  }

  async #abort(reason) {
    if (this.#stopping || this.#finished) return;
    this.#stopping = true;
    this.#controller.abort(new NativeDOMException(`the host stopped the job (${String(reason)})`, "AbortError"));
    // One turn of the event loop lets abort listeners log why they stopped;
    // then flush and leave without `done`, as the protocol asks.
    await new Promise((resolve) => nativeSetImmediate(resolve));
    this.#finished = true;
    await this.#channel.end(1000);
    exit(0);
  }

  // --- transport used by ctx -------------------------------------------------

  #transport = {
    fetch: (request) =>
      new Promise((resolve, reject) => {
        const id = this.#nextFetchId++;
        let line;
        try {
          line = Channel.encode({ t: "fetch", id, method: request.method, url: request.url, headers: request.headers, body: request.body });
        } catch (error) {
          if (error instanceof LineTooLong) return reject(new FetchError("request_too_large", false, request.method, request.url));
          return reject(error);
        }
        this.#pendingFetches.set(id, resolve);
        this.#emit(line).catch(() => {});
      }),
    log: (level, text) => {
      if (this.#logsStopped) return Promise.resolve();
      let message = text;
      if (message.length > LOG_CUT_UNITS) {
        message = message.slice(0, LOG_CUT_UNITS);
        this.#logsStopped = true;
      }
      this.#logBytes += byteLength(message, "utf8");
      if (this.#logBytes >= LOG_STOP_BYTES) this.#logsStopped = true;
      return this.#emit(Channel.encode({ t: "log", level, message }), { isLog: true }).catch(() => {});
    },
  };

  // --- the job ----------------------------------------------------------------

  async run() {
    await this.#channel.send({ t: "hello", v: 1 });
    const job = await this.#jobArrived;
    const startedAt = perfNow();
    try {
      checkJob(job);
    } catch {
      return this.#protocolError();
    }

    // The deadline counts from the job's arrival; ctx.signal aborts a little
    // earlier so the package can log and stop before the host kills the job.
    const margin = Math.min(5000, Math.max(100, job.deadlineMs * 0.1), job.deadlineMs / 2);
    const abortAt = startedAt + job.deadlineMs - margin;
    nativeSetTimeout(() => {
      this.#controller.abort(new NativeDOMException("the job's time limit is near", "TimeoutError"));
    }, abortAt - perfNow()).unref();

    // From here on package code runs. An exception nobody catches (a throw in
    // a timer callback, a rejected promise nobody awaits) is the package's.
    onProcess("uncaughtException", () => this.#failPackage("threw"));
    onProcess("unhandledRejection", () => this.#failPackage("threw"));
    // A package calling process.exit() would otherwise look like a crashed
    // sandbox, which the host treats as its own failure and retries.
    process.exit = () => {
      this.#failPackage("exited");
    };

    registerHooks({
      resolve(specifier, context, nextResolve) {
        if (specifier === "@sbx/connect") return { url: SDK_URL, format: "module", shortCircuit: true };
        return nextResolve(specifier, context);
      },
    });

    let module;
    try {
      module = await import(pathToFileURL(job.entry).href);
    } catch (error) {
      // defineConnector runs while the entry is imported: its mistakes are the definition's.
      if (isDefinitionError(error)) {
        await this.#transport.log("error", `Invalid connector definition: ${describeError(error).replace(/^TypeError: /, "")}`);
        return this.#failPackage("bad_definition");
      }
      // A missing module, a syntax error, a throw at the top level: the author needs the
      // message, and the log is the only place it can go (the failure carries none).
      await this.#transport.log("error", `Importing the package entry ${job.entry} failed: ${describeError(error)}`);
      return this.#failPackage("import_failed");
    }
    let definition = module.default;
    if (!isDefinition(definition)) {
      try {
        definition = defineConnector(definition);
      } catch (error) {
        // Our own validation message (not the package's error), worth a log line.
        await this.#transport.log("error", `Invalid connector definition: ${describeError(error).replace(/^TypeError: /, "")}`);
        return this.#failPackage("bad_definition");
      }
    }

    if (job.kind === "describe") return this.#finish({ t: "done", result: describeDefinition(definition) });

    const ctx = createContext({
      config: deepFreeze(applyDefaults(definition.config, jsonParse(jsonStringify(job.config)))),
      signal: this.#controller.signal,
      abortAt,
      retry: job.retry,
      transport: this.#transport,
    });

    if (job.kind === "verify") return this.#runHook(() => definition.verify(ctx), { keepResult: false });
    if (job.kind === "oauth") {
      const hook = objectHasOwn(definition.oauth, job.oauthStep) ? definition.oauth[job.oauthStep] : undefined;
      if (typeof hook !== "function") return this.#failPackage("no_such_hook");
      return this.#runHook(() => hook(ctx), { keepResult: true });
    }
    if (job.kind === "webhook") return this.#runWebhook(definition, job, ctx);
    return this.#runSync(definition, job, ctx);
  }

  /**
   * One delivery: `handle(ctx, delivery)` returns `{ records }` (or nothing), or is an async
   * generator yielding `{ records }` batches. No checkpoint: a delivery is committed whole.
   */
  async #runWebhook(definition, job, ctx) {
    const hook = objectHasOwn(definition.webhooks, job.sync) ? definition.webhooks[job.sync] : null;
    if (!hook) return this.#failPackage("no_such_webhook");
    const delivery = makeDelivery(job.delivery);
    const output = new Output(job.limits, hook, { checkpoints: false });
    let result;
    try {
      result = hook.handle(ctx, delivery);
      if (result && typeof result.then === "function") result = await result;
    } catch (error) {
      return this.#failPackage(thrownKind(error));
    }
    if (this.#stopping || this.#finished) return;
    if (result !== undefined && result !== null && typeof result[asyncIteratorSymbol] === "function") {
      const iterator = result[asyncIteratorSymbol]();
      for (;;) {
        let step;
        try {
          step = await iterator.next();
        } catch (error) {
          return this.#failPackage(thrownKind(error));
        }
        if (this.#stopping || this.#finished) return;
        if (step.done) break;
        const failed = await this.#emitBatch(output, step.value);
        if (failed) return failed;
      }
    } else if (result !== undefined && result !== null) {
      const failed = await this.#emitBatch(output, result);
      if (failed) return failed;
    }
    return this.#finish({ t: "done", result: null });
  }

  /** Sends one checked batch; a package failure when it breaks a rule or a limit. */
  async #emitBatch(output, value) {
    let lines;
    try {
      lines = output.accept(value);
    } catch (error) {
      if (error instanceof PackageFailure) return this.#failPackage(error.kind);
      throw error;
    }
    for (const line of lines) await this.#emit(line);
    return null;
  }

  async #runHook(call, { keepResult }) {
    let result;
    try {
      result = await call();
    } catch (error) {
      return this.#failPackage(thrownKind(error));
    }
    if (this.#stopping) return;
    if (!keepResult) return this.#finish({ t: "done", result: null });
    let line;
    try {
      const json = stringifyWellFormed(result === undefined ? null : result);
      if (json === undefined) throw new TypeError("not JSON");
      line = Channel.line(`{"t":"done","result":${json}}`);
    } catch {
      return this.#failPackage("bad_result");
    }
    return this.#finishWithLine(line);
  }

  async #runSync(definition, job, ctx) {
    const sync = objectHasOwn(definition.syncs, job.sync) ? definition.syncs[job.sync] : null;
    if (!sync) return this.#failPackage("no_such_sync");

    let iterator;
    try {
      const iterable = sync.run(ctx, job.checkpoint ? jsonParse(jsonStringify(job.checkpoint)) : null);
      if (!iterable || typeof iterable[asyncIteratorSymbol] !== "function") {
        await this.#transport.log("error", `Invalid connector definition: syncs.${job.sync}.run did not return an async iterable (write it as async *run(ctx, checkpoint))`);
        return this.#failPackage("bad_definition");
      }
      iterator = iterable[asyncIteratorSymbol]();
    } catch (error) {
      return this.#failPackage(thrownKind(error));
    }

    const output = new Output(job.limits, sync);
    // A manual loop rather than for-await: on a limit we stop without calling
    // iterator.return(), so no package `finally` can delay the failure.
    for (;;) {
      let step;
      try {
        step = await iterator.next();
      } catch (error) {
        return this.#failPackage(thrownKind(error));
      }
      if (this.#stopping || this.#finished) return;
      if (step.done) break;
      let lines;
      try {
        lines = output.accept(step.value);
      } catch (error) {
        if (error instanceof PackageFailure) return this.#failPackage(error.kind);
        throw error;
      }
      // Awaiting each write is the backpressure: the generator is not asked
      // for its next batch while the socket's buffer is full.
      for (const line of lines) await this.#emit(line);
    }
    return this.#finish({ t: "done", result: null });
  }
}

/**
 * Checks each yielded value against the job's limits and turns it into
 * protocol lines. Records are serialised once, at yield time, so a package
 * mutating an object after yielding it changes nothing.
 */
class Output {
  #limits;
  #keyFields; // merge: the primary key's field names; otherwise null
  #batches = 0;
  #outputBytes = 0;

  #checkpoints;

  constructor(limits, sync, { checkpoints = true } = {}) {
    this.#limits = limits;
    this.#keyFields = sync.mode === "merge" ? [sync.primaryKey].flat() : null;
    this.#checkpoints = checkpoints;
  }

  accept(value) {
    if (!isPlainObject(value)) throw new PackageFailure("bad_batch");
    const keys = Object.keys(value);
    const allowed = (k) => k === "records" || (this.#checkpoints && k === "checkpoint");
    if (keys.length === 0 || !keys.every(allowed)) throw new PackageFailure("bad_batch");
    const lines = [];
    if (objectHasOwn(value, "records")) {
      const line = this.#records(value.records);
      if (line !== null) lines.push(line);
    }
    if (objectHasOwn(value, "checkpoint")) lines.push(this.#checkpoint(value.checkpoint));
    return lines;
  }

  #records(records) {
    if (!Array.isArray(records)) throw new PackageFailure("bad_batch");
    if (records.length === 0) return null; // nothing to send, no batch used
    const limits = this.#limits;
    // Each limit fails with its own kind; the host logs which limit and its value.
    if (this.#batches + 1 > limits.maxBatches) throw new PackageFailure("max_batches");
    if (records.length > limits.maxRecordsPerBatch) throw new PackageFailure("max_records_per_batch");
    const parts = [];
    for (const record of records) {
      if (!isPlainObject(record)) throw new PackageFailure("bad_batch");
      if (this.#keyFields !== null) {
        // Every key field a string or a number, as the host requires to upsert.
        for (const field of this.#keyFields) {
          const key = objectHasOwn(record, field) ? record[field] : undefined;
          if (!(typeof key === "string" || Number.isFinite(key))) throw new PackageFailure("bad_batch");
        }
      }
      let json;
      try {
        json = stringifyWellFormed(record);
      } catch {
        throw new PackageFailure("bad_batch"); // a cycle or a BigInt
      }
      const bytes = byteLength(json, "utf8");
      if (bytes > limits.maxRecordBytes) throw new PackageFailure("max_record_bytes");
      this.#outputBytes += bytes;
      if (this.#outputBytes > limits.maxOutputBytes) throw new PackageFailure("max_output_bytes");
      parts.push(json);
    }
    this.#batches += 1;
    try {
      return Channel.line(`{"t":"records","records":[${parts.join(",")}]}`);
    } catch (error) {
      if (error instanceof LineTooLong) throw new PackageFailure("max_batch_bytes");
      throw error;
    }
  }

  #checkpoint(checkpoint) {
    if (!isPlainObject(checkpoint)) throw new PackageFailure("bad_batch");
    let json;
    try {
      json = stringifyWellFormed(checkpoint);
    } catch {
      throw new PackageFailure("bad_batch");
    }
    if (byteLength(json, "utf8") > this.#limits.maxCheckpointBytes) throw new PackageFailure("max_checkpoint_bytes");
    try {
      return Channel.line(`{"t":"checkpoint","checkpoint":${json}}`);
    } catch {
      throw new PackageFailure("max_checkpoint_bytes");
    }
  }
}

/**
 * The `delivery` a webhook handler gets: the raw body as text and bytes, the parsed JSON when
 * the body is JSON (else undefined), the delivery id, when sbx received it, and the headers the
 * platform passes on (never the signature or credential headers).
 */
function makeDelivery(wire) {
  const bytes = new Uint8Array(Buffer.from(wire.body, "base64"));
  const body = Buffer.from(bytes).toString("utf8");
  let json;
  try {
    json = jsonParse(body);
  } catch {
    json = undefined;
  }
  // Typed arrays cannot be frozen: `bytes` is the handler's own copy.
  return Object.freeze({
    id: wire.id,
    receivedAt: wire.receivedAt,
    headers: deepFreeze({ ...wire.headers }),
    body,
    bytes,
    json: deepFreeze(json),
  });
}

function deepFreeze(value) {
  if (value !== null && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

async function main() {
  let args;
  try {
    args = parseArgs(argv.slice(2));
  } catch {
    exit(EXIT_BAD_ARGS);
  }
  let channel;
  try {
    channel = await openChannel(args.proxy, args.target);
  } catch {
    exit(EXIT_NO_CHANNEL);
  }
  const runner = new Runner(channel);
  try {
    await runner.run();
  } catch {
    // A bug of the runner itself, not of the package.
    await runner.failPlatform();
  }
}

await main();
