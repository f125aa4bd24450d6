-- 4: webhook connections. A connection whose package defines webhooks gets one delivery
-- token per webhook (only its SHA-256 is kept: the URL is the credential), optional
-- signature settings with a sealed secret, and an inbox of deliveries. A delivery is
-- stored before it is answered 202 and moves from pending to committed in the same
-- transaction as its records (or to failed, with a category and a kind word: never a
-- message). One row per sender delivery id and connection: a replay finds it and is dropped.
CREATE TABLE webhook_settings (
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    scheme TEXT NOT NULL,
    signature_header TEXT,
    signature_prefix TEXT,
    id_header TEXT,
    secret BLOB NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (workspace, connection_id)
);
CREATE TABLE webhook_tokens (
    token_hash TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    webhook TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (workspace, connection_id, webhook)
);
CREATE TABLE webhook_deliveries (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    webhook TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    body BLOB NOT NULL,
    headers TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    finished_at INTEGER,
    records_committed INTEGER NOT NULL DEFAULT 0,
    failure_category TEXT,
    failure_kind TEXT,
    run_id TEXT,
    UNIQUE (workspace, connection_id, sender_id)
);
CREATE INDEX webhook_deliveries_by_connection ON webhook_deliveries (workspace, connection_id, seq);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (status, next_attempt_at);
