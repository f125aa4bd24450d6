-- 3: several nodes on one database (cluster mode; on SQLite there is only ever one).
-- Runs and builds record the node that executes them (NULL: a single node), so that a
-- starting node fails only its own unfinished work, and the node that declares another
-- lost fails that node's. At most one queued-or-running run per sync, decided by the
-- database: two nodes' schedulers, or Run now on two nodes, cannot both start one.
-- Blobs keep package tarballs and built artifacts, so that any node can run any package.
ALTER TABLE runs ADD COLUMN node_id TEXT;
ALTER TABLE builds ADD COLUMN node_id TEXT;
-- Only a crash between two daemons' recoveries could have left two; keep the newest.
UPDATE runs SET status = 'failed',
    finished_at = CAST(ROUND(unixepoch('now', 'subsec') * 1000) AS INTEGER),
    failure_category = 'platform', failure_kind = 'daemon_restart'
WHERE kind = 'sync' AND status IN ('queued', 'running')
  AND seq NOT IN (SELECT MAX(seq) FROM runs WHERE kind = 'sync' AND status IN ('queued', 'running')
                  GROUP BY workspace, connection_id, sync);
CREATE UNIQUE INDEX runs_one_active_sync ON runs (workspace, connection_id, sync)
    WHERE kind = 'sync' AND status IN ('queued', 'running');
CREATE TABLE blobs (
    key TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    created_at INTEGER NOT NULL
);
