-- 2: times become INTEGER milliseconds since the epoch (as PostgreSQL's timestamptz
-- holds them natively), and runs get an explicit `seq` (their old rowid) so that both
-- backends page runs by the same column. SQLite cannot change a column's type: each
-- table with a time is rebuilt and its rows converted. A value that does not parse
-- fails the NOT NULL checks and the whole migration rolls back.

CREATE TABLE packages_new (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (workspace, name)
);
INSERT INTO packages_new (workspace, name, created_at)
SELECT workspace, name, CAST(ROUND(unixepoch(created_at, 'subsec') * 1000) AS INTEGER)
FROM packages;
DROP TABLE packages;
ALTER TABLE packages_new RENAME TO packages;

CREATE TABLE package_versions_new (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    entry TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    build_id TEXT,
    definition TEXT,
    PRIMARY KEY (workspace, name, version)
);
INSERT INTO package_versions_new
    (workspace, name, version, sha256, size, entry, created_at, build_id, definition)
SELECT workspace, name, version, sha256, size, entry,
       CAST(ROUND(unixepoch(created_at, 'subsec') * 1000) AS INTEGER), build_id, definition
FROM package_versions;
DROP TABLE package_versions;
ALTER TABLE package_versions_new RENAME TO package_versions;

CREATE TABLE builds_new (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    log TEXT NOT NULL DEFAULT '',
    artifact_dir TEXT,
    failure TEXT,
    created_at INTEGER NOT NULL,
    finished_at INTEGER
);
INSERT INTO builds_new
    (id, workspace, name, version, status, log, artifact_dir, failure, created_at, finished_at)
SELECT id, workspace, name, version, status, log, artifact_dir, failure,
       CAST(ROUND(unixepoch(created_at, 'subsec') * 1000) AS INTEGER),
       CAST(ROUND(unixepoch(finished_at, 'subsec') * 1000) AS INTEGER)
FROM builds;
DROP TABLE builds;
ALTER TABLE builds_new RENAME TO builds;
CREATE INDEX builds_by_version ON builds (workspace, name, version, created_at);

CREATE TABLE connections_new (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    config TEXT NOT NULL,
    origin TEXT NOT NULL,
    auth_kind TEXT NOT NULL,
    credentials BLOB NOT NULL,
    status TEXT NOT NULL,
    schedule_secs INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
INSERT INTO connections_new
    (id, workspace, name, package, version, config, origin, auth_kind, credentials, status,
     schedule_secs, created_at, updated_at)
SELECT id, workspace, name, package, version, config, origin, auth_kind, credentials, status,
       schedule_secs,
       CAST(ROUND(unixepoch(created_at, 'subsec') * 1000) AS INTEGER),
       CAST(ROUND(unixepoch(updated_at, 'subsec') * 1000) AS INTEGER)
FROM connections;
DROP TABLE connections;
ALTER TABLE connections_new RENAME TO connections;
CREATE INDEX connections_by_workspace ON connections (workspace, created_at);

CREATE TABLE oauth_pending_new (
    state TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    verifier TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO oauth_pending_new (state, workspace, connection_id, verifier, redirect_uri, created_at)
SELECT state, workspace, connection_id, verifier, redirect_uri,
       CAST(ROUND(unixepoch(created_at, 'subsec') * 1000) AS INTEGER)
FROM oauth_pending;
DROP TABLE oauth_pending;
ALTER TABLE oauth_pending_new RENAME TO oauth_pending;

CREATE TABLE runs_new (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    workspace TEXT NOT NULL,
    connection_id TEXT,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    kind TEXT NOT NULL,
    sync TEXT,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    records_committed INTEGER NOT NULL DEFAULT 0,
    failure_category TEXT,
    failure_kind TEXT,
    result TEXT
);
INSERT INTO runs_new
    (seq, id, workspace, connection_id, package, version, kind, sync, status, attempt,
     created_at, started_at, finished_at, records_committed, failure_category, failure_kind, result)
SELECT rowid, id, workspace, connection_id, package, version, kind, sync, status, attempt,
       CAST(ROUND(unixepoch(created_at, 'subsec') * 1000) AS INTEGER),
       CAST(ROUND(unixepoch(started_at, 'subsec') * 1000) AS INTEGER),
       CAST(ROUND(unixepoch(finished_at, 'subsec') * 1000) AS INTEGER),
       records_committed, failure_category, failure_kind, result
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_by_connection ON runs (workspace, connection_id, created_at);
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE logs_new (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    run_id TEXT NOT NULL,
    connection_id TEXT,
    ts INTEGER NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL
);
INSERT INTO logs_new (id, workspace, run_id, connection_id, ts, level, message)
SELECT id, workspace, run_id, connection_id,
       CAST(ROUND(unixepoch(ts, 'subsec') * 1000) AS INTEGER), level, message
FROM logs;
-- AUTOINCREMENT never hands out an id again, even of a deleted line: keep its counter.
DELETE FROM sqlite_sequence WHERE name = 'logs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'logs_new', seq FROM sqlite_sequence WHERE name = 'logs';
DROP TABLE logs;
ALTER TABLE logs_new RENAME TO logs;
CREATE INDEX logs_by_run ON logs (workspace, run_id, id);
CREATE INDEX logs_by_connection ON logs (workspace, connection_id, id);
CREATE INDEX logs_by_ts ON logs (ts);

CREATE TABLE sync_state_new (
    id INTEGER PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    sync TEXT NOT NULL,
    checkpoint TEXT,
    updated_at INTEGER NOT NULL,
    UNIQUE (workspace, connection_id, sync)
);
INSERT INTO sync_state_new (id, workspace, connection_id, sync, checkpoint, updated_at)
SELECT id, workspace, connection_id, sync, checkpoint,
       CAST(ROUND(unixepoch(updated_at, 'subsec') * 1000) AS INTEGER)
FROM sync_state;
DROP TABLE sync_state;
ALTER TABLE sync_state_new RENAME TO sync_state;
