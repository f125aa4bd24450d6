-- 3: webhook connections (see sqlite/0004_webhooks.sql for the why of each table).
CREATE TABLE connect_webhook_settings (
    workspace        text NOT NULL,
    connection_id    text NOT NULL,
    scheme           text NOT NULL,
    signature_header text,
    signature_prefix text,
    id_header        text,
    secret           bytea NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (workspace, connection_id)
);
CREATE TABLE connect_webhook_tokens (
    token_hash    text PRIMARY KEY,
    workspace     text NOT NULL,
    connection_id text NOT NULL,
    webhook       text NOT NULL,
    created_at    timestamptz NOT NULL,
    UNIQUE (workspace, connection_id, webhook)
);
CREATE TABLE connect_webhook_deliveries (
    seq               bigserial PRIMARY KEY,
    id                text NOT NULL UNIQUE,
    workspace         text NOT NULL,
    connection_id     text NOT NULL,
    webhook           text NOT NULL,
    sender_id         text NOT NULL,
    status            text NOT NULL,
    attempts          bigint NOT NULL DEFAULT 0,
    body              bytea NOT NULL,
    headers           text NOT NULL,
    received_at       timestamptz NOT NULL,
    next_attempt_at   timestamptz NOT NULL,
    finished_at       timestamptz,
    records_committed bigint NOT NULL DEFAULT 0,
    failure_category  text,
    failure_kind      text,
    run_id            text,
    UNIQUE (workspace, connection_id, sender_id)
);
CREATE INDEX connect_webhook_deliveries_by_connection ON connect_webhook_deliveries (workspace, connection_id, seq);
CREATE INDEX connect_webhook_deliveries_pending ON connect_webhook_deliveries (status, next_attempt_at);
