-- 1: the whole single-node schema of SQLite's versions 1-4, in PostgreSQL types.
-- Times are milliseconds since the epoch (bigint), as in SQLite, so that both
-- backends round-trip the same values and page with the same cursors; ids are uuid;
-- JSON documents are text, as written by serde_json.
CREATE TABLE sandboxes (
    id               uuid PRIMARY KEY,
    workspace        text NOT NULL,
    name             text NOT NULL,
    status           text NOT NULL,
    vcpu             bigint NOT NULL,
    memory_mb        bigint NOT NULL,
    environment      text NOT NULL,
    secrets          text NOT NULL,
    snapshot_id      uuid,
    image_ref        text NOT NULL,
    created_at_ms    bigint NOT NULL,
    started_at_ms    bigint,
    ended_at_ms      bigint,
    error            text,
    active_ms        bigint NOT NULL DEFAULT 0,
    running_since_ms bigint,
    network          text,
    active           boolean NOT NULL
);
CREATE UNIQUE INDEX sandboxes_active_name ON sandboxes (workspace, name) WHERE active;
CREATE INDEX sandboxes_list ON sandboxes (workspace, created_at_ms DESC, id DESC);
CREATE INDEX sandboxes_status ON sandboxes (status);

CREATE TABLE snapshots (
    id               uuid PRIMARY KEY,
    workspace        text NOT NULL,
    name             text,
    source_sandbox   uuid NOT NULL,
    status           text NOT NULL,
    vcpu             bigint NOT NULL,
    memory_mb        bigint NOT NULL,
    environment      text NOT NULL,
    secrets          text NOT NULL,
    image_ref        text NOT NULL,
    source_image_id  text NOT NULL,
    compatibility_id text NOT NULL,
    stored_bytes     bigint NOT NULL DEFAULT 0,
    created_at_ms    bigint NOT NULL,
    updated_at_ms    bigint NOT NULL,
    expires_at_ms    bigint NOT NULL,
    error            text,
    network          text
);
CREATE INDEX snapshots_list ON snapshots (workspace, created_at_ms DESC, id DESC);
CREATE INDEX snapshots_name ON snapshots (workspace, name);
CREATE INDEX snapshots_status ON snapshots (status);

CREATE TABLE secrets (
    workspace     text NOT NULL,
    name          text NOT NULL,
    nonce         bytea NOT NULL,
    ciphertext    bytea NOT NULL,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    PRIMARY KEY (workspace, name)
);

CREATE TABLE api_keys (
    id            uuid PRIMARY KEY,
    workspace     text NOT NULL,
    env           text,
    name          text,
    digest        text NOT NULL UNIQUE,
    created_at_ms bigint NOT NULL,
    revoked_at_ms bigint
);

CREATE TABLE idempotency (
    tenant        text NOT NULL,
    path          text NOT NULL,
    key           text NOT NULL,
    fingerprint   text NOT NULL,
    owner         uuid NOT NULL,
    created_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    status        integer,
    body          bytea,
    PRIMARY KEY (tenant, path, key)
);
CREATE INDEX idempotency_expiry ON idempotency (expires_at_ms);
