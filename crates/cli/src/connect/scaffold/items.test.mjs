// Tests of the items sync with a stand-in ctx: `npm test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";
import { itemsSync } from "../src/items.mjs";

/** A ctx whose paginate serves `pages` (cursor i = page i), then an empty last page. */
function fakeCtx(pages) {
  const all = [...pages, []];
  return {
    config: { pageSize: 2 },
    log: { info() {} },
    async *paginate(path, options) {
      assert.equal(path, "/v1/items?limit=2");
      for (let i = Number(options.next.start ?? 0); i < all.length; i++) {
        const page = [...all[i]];
        page.next = i + 1 < all.length ? String(i + 1) : null;
        yield page;
      }
    },
  };
}

async function collect(gen) {
  const out = [];
  for await (const message of gen) out.push(message);
  return out;
}

test("a first run yields every item, then the cursor after them", async () => {
  const out = await collect(itemsSync(fakeCtx([[{ id: 1 }, { id: 2 }], [{ id: 3 }]]), null));
  const records = out.flatMap((m) => m.records ?? []);
  assert.deepEqual(records.map((r) => r.id), [1, 2, 3]);
  assert.deepEqual(out.at(-1), { checkpoint: { cursor: "2" } });
});

test("a run resumes from the checkpoint's cursor", async () => {
  const out = await collect(itemsSync(fakeCtx([[{ id: 1 }, { id: 2 }], [{ id: 3 }]]), { cursor: "1" }));
  assert.deepEqual(out.flatMap((m) => m.records ?? []).map((r) => r.id), [3]);
});
