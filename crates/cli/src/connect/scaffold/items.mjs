// The items sync, apart from the connector definition so that it can be tested
// with plain `node --test` (test/items.test.mjs): it only uses the ctx it is given.

/**
 * Reads `/v1/items` page by page from the checkpoint's cursor on, yielding each
 * page's items as records, then the cursor to resume from as the checkpoint.
 * The API answers `{data: [...], meta: {next_cursor}}`; change the path and the
 * fields to your API's.
 */
export async function* itemsSync(ctx, checkpoint) {
  let cursor = checkpoint?.cursor ?? null;
  const pages = ctx.paginate(`/v1/items?limit=${ctx.config.pageSize}`, {
    items: "data",
    next: { type: "cursor", param: "cursor", from: "meta.next_cursor", start: cursor ?? undefined },
  });
  for await (const page of pages) {
    yield { records: page };
    // page.next: the cursor after this page (null after the last one).
    cursor = page.next ?? cursor;
  }
  await ctx.log.info(`read up to cursor ${cursor}`);
  yield { checkpoint: { cursor } };
}
