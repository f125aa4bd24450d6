CREATE TABLE snapshots (
    id              TEXT PRIMARY KEY,
    workspace       TEXT NOT NULL,
    name            TEXT,
    source_sandbox  TEXT NOT NULL,
    status          TEXT NOT NULL,
    vcpu            INTEGER NOT NULL,
    memory_mb       INTEGER NOT NULL,
    environment     TEXT NOT NULL,
    secrets         TEXT NOT NULL,
    image_ref       TEXT NOT NULL,
    source_image_id TEXT NOT NULL,
    compatibility_id TEXT NOT NULL,
    stored_bytes    INTEGER NOT NULL DEFAULT 0,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    error           TEXT
);
CREATE INDEX snapshots_list ON snapshots (workspace, created_at_ms DESC, id DESC);
CREATE INDEX snapshots_name ON snapshots (workspace, name);
CREATE INDEX snapshots_status ON snapshots (status);
CREATE TABLE secrets (
    workspace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    nonce         BLOB NOT NULL,
    ciphertext    BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (workspace, name)
);
