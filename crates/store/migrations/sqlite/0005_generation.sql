-- 5: a compare-and-set version on the rows whose state machines several actors
-- drive: every update names the generation it read and bumps it, so that an
-- update based on a stale read changes nothing and fails as a conflict.
ALTER TABLE sandboxes ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
