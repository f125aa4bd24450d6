-- 1: the schema of the first Connect runtime; times are RFC 3339 text (ms, Z).
CREATE TABLE packages (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (workspace, name)
);
CREATE TABLE package_versions (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    entry TEXT NOT NULL,
    created_at TEXT NOT NULL,
    build_id TEXT,
    definition TEXT,
    PRIMARY KEY (workspace, name, version)
);
CREATE TABLE builds (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    log TEXT NOT NULL DEFAULT '',
    artifact_dir TEXT,
    failure TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX builds_by_version ON builds (workspace, name, version, created_at);
CREATE TABLE connections (
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
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX connections_by_workspace ON connections (workspace, created_at);
CREATE TABLE oauth_pending (
    state TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    verifier TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    kind TEXT NOT NULL,
    sync TEXT,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    records_committed INTEGER NOT NULL DEFAULT 0,
    failure_category TEXT,
    failure_kind TEXT,
    result TEXT
);
CREATE INDEX runs_by_connection ON runs (workspace, connection_id, created_at);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE logs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    run_id TEXT NOT NULL,
    connection_id TEXT,
    ts TEXT NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX logs_by_run ON logs (workspace, run_id, id);
CREATE INDEX logs_by_connection ON logs (workspace, connection_id, id);
CREATE INDEX logs_by_ts ON logs (ts);
CREATE TABLE sync_state (
    id INTEGER PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    sync TEXT NOT NULL,
    checkpoint TEXT,
    updated_at TEXT NOT NULL,
    UNIQUE (workspace, connection_id, sync)
);
CREATE TABLE records (
    seq INTEGER PRIMARY KEY,
    dataset INTEGER NOT NULL,
    key TEXT,
    data TEXT NOT NULL
);
CREATE INDEX records_by_dataset ON records (dataset, seq);
CREATE UNIQUE INDEX records_by_key ON records (dataset, key) WHERE key IS NOT NULL;
