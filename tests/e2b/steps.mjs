// Step helpers shared by the e2b SDK scripts (envd.mjs, preview.mjs,
// cluster.mjs): each prints `ok   <step>` when its step passes; the first
// failure is reported by `report` as `FAIL <step>: <error>`.

/** A failed step: its name and what went wrong. */
export class StepFailure extends Error {
  constructor(step, cause) {
    super(`FAIL ${step}: ${cause?.stack ?? cause}`);
    this.step = step;
    this.cause = cause;
  }
}

/** Runs one named step. */
export async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    throw new StepFailure(name, e);
  }
  console.log(`ok   ${name}`);
}

/** Throws `what` (with `detail` as JSON) unless `cond`. */
export function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
  }
}

/** Checks that two values are equal as JSON. */
export function eq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const b = JSON.stringify(expected);
  check(a === b, `${what}: got ${a}, want ${b}`);
}

/** Prints the failure the way the Rust tests read it (`FAIL ...` on stdout). */
export function report(e) {
  if (e instanceof StepFailure) {
    console.log(`FAIL ${e.step}: ${e.cause?.message ?? e.cause}`);
    console.error(e.cause?.stack ?? String(e.cause));
  } else {
    console.log(`FAIL: ${e?.message ?? e}`);
    console.error(e?.stack ?? String(e));
  }
}
