-- 2: a compare-and-set version on the rows whose state machines several sbxd
-- drive: every update names the generation it read and bumps it, so that an
-- update based on a stale read changes nothing and fails as a conflict.
ALTER TABLE sandboxes ADD COLUMN generation bigint NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN generation bigint NOT NULL DEFAULT 0;
