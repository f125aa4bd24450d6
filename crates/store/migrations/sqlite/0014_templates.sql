-- Templates (issue 17): an image booted, started and snapshotted, so that a
-- create is a clone. `spec` is the template's definition as JSON (the store
-- does not read it); `snapshot_id` the READY snapshot creates clone (kept
-- through a rebuild until the new one is READY); `generation` orders writes
-- (conditional updates, like sandbox rows).
CREATE TABLE templates (
    workspace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    spec          TEXT NOT NULL,
    status        TEXT NOT NULL,
    error         TEXT,
    image_ref     TEXT NOT NULL,
    snapshot_id   TEXT,
    generation    INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (workspace, name)
);
-- Which template a sandbox was created from (shown as its `template`).
CREATE TABLE sandbox_templates (
    sandbox_id TEXT PRIMARY KEY,
    template   TEXT NOT NULL
);
