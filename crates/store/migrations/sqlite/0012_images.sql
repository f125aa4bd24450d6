-- Custom images (issue 17). A tenant's `name:tag` points at a content digest;
-- the read-only rootfs of a digest lives once on the node that made it
-- (`node_id`), shared by every tenant that has a name for that digest.
CREATE TABLE images (
    workspace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    tag           TEXT NOT NULL,
    digest        TEXT NOT NULL,
    size_bytes    INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    config        TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (workspace, name, tag)
);
CREATE INDEX images_by_digest ON images (digest);
