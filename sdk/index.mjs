// @sbx/connect: the SDK for Connect packages.
//
// At run time the platform provides this module: the runner makes the
// specifier `@sbx/connect` resolve to this file, so a package and the runner
// share one instance (and `instanceof HttpError` works). Packages must not
// list `@sbx/connect` as a dependency.

export { defineConnector } from "./lib/definition.mjs";
export { FetchError, HttpError, SchemaError } from "./lib/errors.mjs";
