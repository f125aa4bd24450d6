-- 4: tenants. Rows are scoped by `workspace/env`; rows written before tenants
-- belong to the `default` workspace's `production` environment. Signing keys
-- (digests only) and `Idempotency-Key` claims.
UPDATE sandboxes SET workspace = workspace || '/production' WHERE instr(workspace, '/') = 0;
UPDATE snapshots SET workspace = workspace || '/production' WHERE instr(workspace, '/') = 0;
UPDATE secrets SET workspace = workspace || '/production' WHERE instr(workspace, '/') = 0;
CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,
    workspace     TEXT NOT NULL,
    env           TEXT,
    name          TEXT,
    digest        TEXT NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
);
CREATE TABLE idempotency (
    tenant        TEXT NOT NULL,
    path          TEXT NOT NULL,
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    owner         TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    status        INTEGER,
    body          BLOB,
    PRIMARY KEY (tenant, path, key)
);
CREATE INDEX idempotency_expiry ON idempotency (expires_at_ms);
