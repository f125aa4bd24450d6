-- What the E2B API adds to a sandbox (template, metadata, end time, auto-pause,
-- envd and traffic access tokens), one row per sandbox with the sandbox's id.
-- `metadata` is a JSON object of strings. `generation` orders writes: end time
-- and auto-pause change by compare-and-set, so that two nodes (or the timeout
-- sweep and a connect) never both act on one expiry.
CREATE TABLE e2b_sandboxes (
    id                    uuid PRIMARY KEY,
    workspace             text NOT NULL,
    template_id           text NOT NULL,
    metadata              text NOT NULL,
    end_at_ms             bigint NOT NULL,
    auto_pause            boolean NOT NULL,
    envd_access_token     text NOT NULL,
    allow_internet_access boolean NOT NULL,
    allow_public_traffic  boolean NOT NULL DEFAULT true,
    traffic_access_token  text,
    generation            bigint NOT NULL DEFAULT 0
);
CREATE INDEX e2b_sandboxes_workspace ON e2b_sandboxes (workspace);
CREATE INDEX e2b_sandboxes_end ON e2b_sandboxes (end_at_ms);
