-- 2: several nodes on one database (cluster mode). Runs and builds record the node that
-- executes them (NULL: a single node), so that a starting node fails only its own
-- unfinished work, and the node that declares another lost fails that node's. At most
-- one queued-or-running run per sync, decided by the database: two nodes' schedulers,
-- or Run now on two nodes, cannot both start one. Blobs keep package tarballs and built
-- artifacts, so that any node can run any package.
ALTER TABLE connect_runs ADD COLUMN node_id text;
ALTER TABLE connect_builds ADD COLUMN node_id text;
-- Only a crash between two daemons' recoveries could have left two; keep the newest.
UPDATE connect_runs SET status = 'failed', finished_at = now(),
    failure_category = 'platform', failure_kind = 'daemon_restart'
WHERE kind = 'sync' AND status IN ('queued', 'running')
  AND seq NOT IN (SELECT MAX(seq) FROM connect_runs WHERE kind = 'sync' AND status IN ('queued', 'running')
                  GROUP BY workspace, connection_id, sync);
CREATE UNIQUE INDEX connect_runs_one_active_sync ON connect_runs (workspace, connection_id, sync)
    WHERE kind = 'sync' AND status IN ('queued', 'running');
CREATE TABLE connect_blobs (
    key        text PRIMARY KEY,
    data       bytea NOT NULL,
    created_at timestamptz NOT NULL
);
