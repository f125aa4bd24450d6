// Types of @sbx/connect, the SDK for sbx Connect packages. Hand-written; they
// describe index.mjs. See README.md for the rules behind each field.

// ---------------------------------------------------------------- JSON values

export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

// -------------------------------------------------------------- JSON Schema

/** The JSON Schema subset understood by the SDK; other keywords are rejected. */
export interface JsonSchema {
  type?: JsonSchemaType | JsonSchemaType[];
  properties?: { [name: string]: JsonSchema };
  required?: string[];
  enum?: JsonPrimitive[];
  items?: JsonSchema;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  default?: JsonValue;
  description?: string;
  title?: string;
  additionalProperties?: boolean;
}
export type JsonSchemaType = "object" | "string" | "number" | "integer" | "boolean" | "array" | "null";

/** Anything with a parse(value) that returns the parsed value or throws (zod and alike). */
export interface Parser<T> {
  parse(value: unknown): T;
}

// -------------------------------------------------------------------- auth

export type Auth =
  | { type: "apiKey"; header: string }
  | { type: "apiKey"; query: string }
  | { type: "bearer" }
  | { type: "basic" }
  | {
      type: "oauth2";
      authorizeUrl: string;
      tokenUrl: string;
      scopes?: string[];
      /** Defaults to true. */
      pkce?: boolean;
    };

// --------------------------------------------------------------------- ctx

export type LogLevel = "debug" | "info" | "warn" | "error";
/** Only `String(message)` is kept; `fields` is accepted and dropped. */
export type LogFunction = (message: unknown, fields?: unknown) => Promise<void>;

export interface FetchInit extends Omit<RequestInit, "method"> {
  method?: string;
  /** false: no retry at all for this request. Default true. */
  retry?: boolean;
}

export type Pagination =
  | {
      type: "cursor";
      /** Query parameter that carries the cursor. */
      param: string;
      /** Dot path of the next cursor in the body, e.g. "meta.next_cursor". */
      from: string;
      /** Cursor of the first request (e.g. from a checkpoint); none by default. */
      start?: string | number;
    }
  | { type: "link" }
  | { type: "page"; param?: string; start?: number; stopWhenEmpty?: boolean }
  | { type: "offset"; param?: string; limitParam?: string; limit?: number; start?: number };

export interface PaginateOptions<Body = unknown> {
  /** Dot path of the array of items in each page's body; the body itself when omitted. */
  items?: string;
  next: Pagination;
  /** Stop after this many requests. */
  maxPages?: number;
  /** Checked against each page's whole body. */
  schema?: JsonSchema | Parser<Body>;
  /** Request options for every page (method, headers, retry, signal); GET with `Accept: application/json` by default. */
  init?: FetchInit;
}

/** One page of items. `next` is where the following page starts: a cursor, page number, offset or URL; null when known to be the end. */
export type Page<Item> = Item[] & { readonly next: string | number | null };

export interface Context<Config = JsonObject> {
  /** The connection's settings, validated, with defaults applied. Frozen. */
  readonly config: Readonly<Config>;
  /** Aborts a little before the job's time limit, or when the platform stops the job. */
  readonly signal: AbortSignal;
  /** One HTTP request through the platform's broker, which adds the credentials. */
  fetch(pathOrUrl: string | URL, init?: FetchInit): Promise<Response>;
  /** fetch + status check (HttpError) + JSON parse + optional schema check (SchemaError). */
  json<T = any>(path: string | URL, schema?: JsonSchema | Parser<T>, init?: FetchInit): Promise<T>;
  /** One array of items per page. */
  paginate<Item = any>(path: string | URL, options: PaginateOptions): AsyncGenerator<Page<Item>, void, undefined>;
  readonly log: { readonly [L in LogLevel]: LogFunction };
}

// ------------------------------------------------------------------ syncs

export type Batch<Record extends JsonObject = JsonObject, Checkpoint extends JsonObject = JsonObject> =
  | { records: Record[]; checkpoint?: Checkpoint }
  | { checkpoint: Checkpoint };

export type SyncRun<Config, Checkpoint extends JsonObject> = (
  ctx: Context<Config>,
  checkpoint: Checkpoint | null,
) => AsyncIterable<Batch<JsonObject, Checkpoint>>;

export type Sync<Config = JsonObject, Checkpoint extends JsonObject = JsonObject> =
  | { mode: "append" | "replace"; run: SyncRun<Config, Checkpoint> }
  | {
      mode: "merge";
      /** The field that identifies a record, or several fields for a composite key. */
      primaryKey: string | string[];
      run: SyncRun<Config, Checkpoint>;
    };

// ---------------------------------------------------------------- webhooks

/** One webhook delivery as a handler sees it. */
export interface Delivery<Body = any> {
  /** The delivery id: the sender's (`webhook-id` or the configured id header), else one sbx made. */
  readonly id: string;
  /** When sbx stored the delivery, RFC 3339. */
  readonly receivedAt: string;
  /** The headers sbx passes on (lower-case names); never signature, cookie or credential headers. */
  readonly headers: Readonly<{ [name: string]: string }>;
  /** The raw body as UTF-8 text. */
  readonly body: string;
  /** The raw body's bytes (the handler's own copy). */
  readonly bytes: Uint8Array;
  /** The body parsed as JSON; undefined when it is not JSON. */
  readonly json: Body | undefined;
}

/** What a webhook handler gives back: records, committed whole with the delivery. No checkpoint. */
export type WebhookBatch<Record extends JsonObject = JsonObject> = { records: Record[] };

export type WebhookHandle<Config> = (
  ctx: Context<Config>,
  delivery: Delivery,
) => WebhookBatch | void | Promise<WebhookBatch | void> | AsyncIterable<WebhookBatch>;

export type Webhook<Config = JsonObject> =
  | { mode: "append" | "replace"; handle: WebhookHandle<Config> }
  | {
      mode: "merge";
      /** The field that identifies a record, or several fields for a composite key. */
      primaryKey: string | string[];
      handle: WebhookHandle<Config>;
    };

export interface OAuthHooks<Config = JsonObject> {
  /** Runs once after the user authorized; its JSON result is recorded with the OAuth run (nothing else reads it today). */
  afterAuthorize?(ctx: Context<Config>): Promise<JsonValue | void> | JsonValue | void;
}

export interface ConnectorDefinition<Config = JsonObject> {
  auth: Auth;
  config?: JsonSchema;
  /** One small authenticated request that throws when access is wrong. */
  verify(ctx: Context<Config>): Promise<unknown> | unknown;
  oauth?: OAuthHooks<Config>;
  /** At least one sync, unless the package defines webhooks. */
  syncs?: { [name: string]: Sync<Config, any> };
  /** Webhook handlers, by name (a name cannot also be a sync's). */
  webhooks?: { [name: string]: Webhook<Config> };
}

export type Connector<Config = JsonObject> = Readonly<ConnectorDefinition<Config>>;

/** Validates the definition (throws a TypeError saying what is wrong) and returns it frozen. Export it as the entry's default. */
export function defineConnector<Config = JsonObject>(definition: ConnectorDefinition<Config>): Connector<Config>;

// ------------------------------------------------------------------ errors

/** A non-2xx answer to ctx.json or ctx.paginate. Carries no response body. */
export class HttpError extends Error {
  readonly name: "HttpError";
  readonly status: number;
  readonly method: string;
  readonly url: string;
}

/** A body that is not JSON or does not match the schema. `issues` lists where. */
export class SchemaError extends Error {
  readonly name: "SchemaError";
  readonly issues: string[];
}

/**
 * The platform got no HTTP answer it can hand over. `bad_response`: the status was outside
 * 200..599; `request_too_large`: refused before sending (over 16 MiB as a protocol line).
 */
export class FetchError extends Error {
  readonly name: "FetchError";
  readonly code: "denied" | "network" | "timeout" | "reauthorization_required" | "too_large" | "unsupported_encoding" | "request_too_large" | "bad_response";
  readonly retryable: boolean;
  readonly method: string;
  readonly url: string;
}
