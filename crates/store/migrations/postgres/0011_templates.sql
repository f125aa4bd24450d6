-- Templates (issue 17): an image booted, started and snapshotted, so that a
-- create is a clone. `spec` is the template's definition as JSON (the store
-- does not read it); `snapshot_id` the READY snapshot creates clone (kept
-- through a rebuild until the new one is READY); `generation` orders writes
-- (conditional updates, like sandbox rows).
CREATE TABLE templates (
    workspace     text NOT NULL,
    name          text NOT NULL,
    spec          text NOT NULL,
    status        text NOT NULL,
    error         text,
    image_ref     text NOT NULL,
    snapshot_id   text,
    generation    bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    PRIMARY KEY (workspace, name)
);
-- Which template a sandbox was created from (shown as its `template`).
CREATE TABLE sandbox_templates (
    sandbox_id text PRIMARY KEY,
    template   text NOT NULL
);
