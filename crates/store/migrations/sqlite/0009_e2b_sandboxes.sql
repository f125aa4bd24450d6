-- What the E2B API adds to a sandbox (template, metadata, end time, auto-pause,
-- envd and traffic access tokens), one row per sandbox with the sandbox's id.
-- `metadata` is a JSON object of strings. `generation` orders writes: end time
-- and auto-pause change by compare-and-set, so that two nodes (or the timeout
-- sweep and a connect) never both act on one expiry.
CREATE TABLE e2b_sandboxes (
    id                    TEXT PRIMARY KEY,
    workspace             TEXT NOT NULL,
    template_id           TEXT NOT NULL,
    metadata              TEXT NOT NULL,
    end_at_ms             INTEGER NOT NULL,
    auto_pause            INTEGER NOT NULL,
    envd_access_token     TEXT NOT NULL,
    allow_internet_access INTEGER NOT NULL,
    allow_public_traffic  INTEGER NOT NULL DEFAULT 1,
    traffic_access_token  TEXT,
    generation            INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX e2b_sandboxes_workspace ON e2b_sandboxes (workspace);
CREATE INDEX e2b_sandboxes_end ON e2b_sandboxes (end_at_ms);
