// Error classes that package code sees. They live in their own module so the
// runner, the context and `@sbx/connect` (index.mjs) share one instance of
// each class: `error instanceof HttpError` holds in package code because the
// runner maps the `@sbx/connect` specifier to this very directory.

/** A response with a non-2xx status, raised by ctx.json and ctx.paginate. */
export class HttpError extends Error {
  constructor(status, method, url) {
    // Only the status, method and the URL the package itself asked for: the
    // body may echo request details, and the broker's credentials are never
    // known to the runner anyway.
    super(`${method} ${url} answered HTTP ${status}`);
    this.name = "HttpError";
    this.status = status;
    this.method = method;
    this.url = url;
  }
}

/** A response (or a value) that does not match the schema it was checked against. */
export class SchemaError extends Error {
  constructor(message, issues = [], options = undefined) {
    super(message, options);
    this.name = "SchemaError";
    this.issues = issues;
  }
}

/** The broker got no HTTP answer (`fetch_error` of the job protocol). */
export class FetchError extends Error {
  constructor(code, retryable, method, url) {
    super(`${method} ${url} failed: ${code}`);
    this.name = "FetchError";
    // denied | network | timeout | reauthorization_required | too_large |
    // unsupported_encoding, or
    // `request_too_large` when the runner refused to send the request at all.
    this.code = code;
    this.retryable = retryable;
    this.method = method;
    this.url = url;
  }
}
