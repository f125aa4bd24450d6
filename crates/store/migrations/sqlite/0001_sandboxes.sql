CREATE TABLE sandboxes (
    id            TEXT PRIMARY KEY,
    workspace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    status        TEXT NOT NULL,
    vcpu          INTEGER NOT NULL,
    memory_mb     INTEGER NOT NULL,
    environment   TEXT NOT NULL,
    secrets       TEXT NOT NULL,
    snapshot_id   TEXT,
    image_ref     TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    ended_at_ms   INTEGER,
    error         TEXT,
    active_ms     INTEGER NOT NULL DEFAULT 0,
    running_since_ms INTEGER,
    active        INTEGER NOT NULL
);
CREATE UNIQUE INDEX sandboxes_active_name ON sandboxes (workspace, name) WHERE active = 1;
CREATE INDEX sandboxes_list ON sandboxes (workspace, created_at_ms DESC, id DESC);
CREATE INDEX sandboxes_status ON sandboxes (status);
