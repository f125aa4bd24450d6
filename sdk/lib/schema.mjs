// The JSON Schema subset used for connector config and for checking responses
// in ctx.json / ctx.paginate. Deliberately small: every keyword listed here is
// enforced, and any other keyword is rejected when the schema is checked, so an
// author never believes a constraint holds that nobody checks.

const KEYWORDS = new Set([
  "type", "properties", "required", "enum", "items", "minimum", "maximum",
  "minLength", "maxLength", "pattern", "default", "description", "title",
  "additionalProperties",
]);
const TYPES = new Set(["object", "string", "number", "integer", "boolean", "array", "null"]);
const MAX_ISSUES = 10;

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isJsonScalar = (v) => v === null || ["string", "number", "boolean"].includes(typeof v);

/**
 * Checks that `schema` is a well-formed schema of the subset. Throws a
 * TypeError naming the offending location (`where`) otherwise.
 */
export function checkSchema(schema, where = "schema") {
  if (!isPlainObject(schema)) throw new TypeError(`${where} must be an object`);
  for (const key of Object.keys(schema)) {
    if (!KEYWORDS.has(key)) throw new TypeError(`${where}: unsupported keyword "${key}"`);
  }
  if ("type" in schema) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (types.length === 0 || !types.every((t) => TYPES.has(t))) {
      throw new TypeError(`${where}.type must be one of ${[...TYPES].join(", ")} (or an array of them)`);
    }
  }
  if ("properties" in schema) {
    if (!isPlainObject(schema.properties)) throw new TypeError(`${where}.properties must be an object`);
    for (const [name, sub] of Object.entries(schema.properties)) checkSchema(sub, `${where}.properties.${name}`);
  }
  if ("required" in schema && !(Array.isArray(schema.required) && schema.required.every((r) => typeof r === "string"))) {
    throw new TypeError(`${where}.required must be an array of strings`);
  }
  if ("enum" in schema && !(Array.isArray(schema.enum) && schema.enum.length > 0 && schema.enum.every(isJsonScalar))) {
    throw new TypeError(`${where}.enum must be a non-empty array of strings, numbers, booleans or null`);
  }
  if ("items" in schema) checkSchema(schema.items, `${where}.items`);
  for (const key of ["minimum", "maximum"]) {
    if (key in schema && !Number.isFinite(schema[key])) throw new TypeError(`${where}.${key} must be a finite number`);
  }
  for (const key of ["minLength", "maxLength"]) {
    if (key in schema && !(Number.isInteger(schema[key]) && schema[key] >= 0)) {
      throw new TypeError(`${where}.${key} must be a non-negative integer`);
    }
  }
  if ("pattern" in schema) {
    if (typeof schema.pattern !== "string") throw new TypeError(`${where}.pattern must be a string`);
    try {
      new RegExp(schema.pattern, "u");
    } catch {
      throw new TypeError(`${where}.pattern is not a valid regular expression`);
    }
  }
  for (const key of ["description", "title"]) {
    if (key in schema && typeof schema[key] !== "string") throw new TypeError(`${where}.${key} must be a string`);
  }
  if ("additionalProperties" in schema && typeof schema.additionalProperties !== "boolean") {
    throw new TypeError(`${where}.additionalProperties must be a boolean (schemas are not supported here)`);
  }
  if ("default" in schema) {
    const issues = validate(schema, schema.default);
    if (issues.length > 0) throw new TypeError(`${where}.default does not match its own schema: ${issues[0]}`);
  }
}

function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function matchesType(type, value) {
  switch (type) {
    case "object": return isPlainObject(value);
    case "array": return Array.isArray(value);
    case "integer": return Number.isInteger(value);
    case "number": return typeof value === "number" && Number.isFinite(value);
    case "null": return value === null;
    default: return typeof value === type; // string, boolean
  }
}

/**
 * Validates `value` against a (checked) schema. Returns a list of issues such
 * as `$.data[3].id: expected string, got integer`; empty when valid. Stops
 * after a few issues: the first ones are what an author needs.
 */
export function validate(schema, value, path = "$", issues = []) {
  if (issues.length >= MAX_ISSUES) return issues;
  if ("type" in schema) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => matchesType(t, value))) {
      issues.push(`${path}: expected ${types.join(" or ")}, got ${typeOf(value)}`);
      return issues; // further checks would only repeat the same problem
    }
  }
  if ("enum" in schema && !schema.enum.some((e) => e === value)) {
    issues.push(`${path}: must be one of ${JSON.stringify(schema.enum)}`);
  }
  if (typeof value === "number") {
    if ("minimum" in schema && value < schema.minimum) issues.push(`${path}: must be >= ${schema.minimum}`);
    if ("maximum" in schema && value > schema.maximum) issues.push(`${path}: must be <= ${schema.maximum}`);
  }
  if (typeof value === "string") {
    // Length in code points, as JSON Schema defines it.
    const length = [...value].length;
    if ("minLength" in schema && length < schema.minLength) issues.push(`${path}: must be at least ${schema.minLength} characters`);
    if ("maxLength" in schema && length > schema.maxLength) issues.push(`${path}: must be at most ${schema.maxLength} characters`);
    if ("pattern" in schema && !new RegExp(schema.pattern, "u").test(value)) issues.push(`${path}: must match /${schema.pattern}/`);
  }
  if (isPlainObject(value)) {
    for (const name of schema.required ?? []) {
      if (!Object.hasOwn(value, name)) issues.push(`${path}: missing required property "${name}"`);
    }
    const properties = schema.properties ?? {};
    for (const [name, sub] of Object.entries(value)) {
      if (Object.hasOwn(properties, name)) validate(properties[name], sub, `${path}.${name}`, issues);
      else if (schema.additionalProperties === false) issues.push(`${path}: unexpected property "${name}"`);
    }
  }
  if (Array.isArray(value) && schema.items) {
    for (let i = 0; i < value.length && issues.length < MAX_ISSUES; i++) validate(schema.items, value[i], `${path}[${i}]`, issues);
  }
  return issues.slice(0, MAX_ISSUES);
}

/**
 * Returns a copy of `value` with the `default` of every missing property of
 * an object schema filled in (recursively into objects that are present).
 */
export function applyDefaults(schema, value) {
  if (!isPlainObject(value) || !isPlainObject(schema.properties)) return value;
  const out = { ...value };
  for (const [name, sub] of Object.entries(schema.properties)) {
    if (!Object.hasOwn(out, name)) {
      if ("default" in sub) out[name] = structuredClone(sub.default);
    } else {
      out[name] = applyDefaults(sub, out[name]);
    }
  }
  return out;
}
