-- 1: the Connect schema of SQLite's versions 1-2 in PostgreSQL types, beside the main
-- store's tables in the same database: every table is prefixed `connect_`, and
-- `connect_schema_version` records these migrations apart from the main store's.
-- Times are timestamptz; JSON documents are text, as written by serde_json.
CREATE TABLE connect_packages (
    workspace  text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (workspace, name)
);
CREATE TABLE connect_package_versions (
    workspace  text NOT NULL,
    name       text NOT NULL,
    version    text NOT NULL,
    sha256     text NOT NULL,
    size       bigint NOT NULL,
    entry      text NOT NULL,
    created_at timestamptz NOT NULL,
    build_id   text,
    definition text,
    PRIMARY KEY (workspace, name, version)
);
CREATE TABLE connect_builds (
    id           text PRIMARY KEY,
    workspace    text NOT NULL,
    name         text NOT NULL,
    version      text NOT NULL,
    status       text NOT NULL,
    log          text NOT NULL DEFAULT '',
    artifact_dir text,
    failure      text,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz
);
CREATE INDEX connect_builds_by_version ON connect_builds (workspace, name, version, created_at);
CREATE TABLE connect_connections (
    id            text PRIMARY KEY,
    workspace     text NOT NULL,
    name          text NOT NULL,
    package       text NOT NULL,
    version       text NOT NULL,
    config        text NOT NULL,
    origin        text NOT NULL,
    auth_kind     text NOT NULL,
    credentials   bytea NOT NULL,
    status        text NOT NULL,
    schedule_secs bigint,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX connect_connections_by_workspace ON connect_connections (workspace, created_at);
CREATE TABLE connect_oauth_pending (
    state         text PRIMARY KEY,
    workspace     text NOT NULL,
    connection_id text NOT NULL,
    verifier      text NOT NULL,
    redirect_uri  text NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE TABLE connect_runs (
    seq               bigserial PRIMARY KEY,
    id                text NOT NULL UNIQUE,
    workspace         text NOT NULL,
    connection_id     text,
    package           text NOT NULL,
    version           text NOT NULL,
    kind              text NOT NULL,
    sync              text,
    status            text NOT NULL,
    attempt           bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    records_committed bigint NOT NULL DEFAULT 0,
    failure_category  text,
    failure_kind      text,
    result            text
);
CREATE INDEX connect_runs_by_connection ON connect_runs (workspace, connection_id, created_at);
CREATE INDEX connect_runs_by_status ON connect_runs (status);
CREATE TABLE connect_logs (
    id            bigserial PRIMARY KEY,
    workspace     text NOT NULL,
    run_id        text NOT NULL,
    connection_id text,
    ts            timestamptz NOT NULL,
    level         text NOT NULL,
    message       text NOT NULL
);
CREATE INDEX connect_logs_by_run ON connect_logs (workspace, run_id, id);
CREATE INDEX connect_logs_by_connection ON connect_logs (workspace, connection_id, id);
CREATE INDEX connect_logs_by_ts ON connect_logs (ts);
CREATE TABLE connect_sync_state (
    id            bigserial PRIMARY KEY,
    workspace     text NOT NULL,
    connection_id text NOT NULL,
    sync          text NOT NULL,
    checkpoint    text,
    updated_at    timestamptz NOT NULL,
    UNIQUE (workspace, connection_id, sync)
);
CREATE TABLE connect_records (
    seq     bigserial PRIMARY KEY,
    dataset bigint NOT NULL,
    key     text,
    data    text NOT NULL
);
CREATE INDEX connect_records_by_dataset ON connect_records (dataset, seq);
CREATE UNIQUE INDEX connect_records_by_key ON connect_records (dataset, key) WHERE key IS NOT NULL;
