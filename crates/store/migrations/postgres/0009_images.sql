-- Custom images (issue 17). A tenant's `name:tag` points at a content digest;
-- the read-only rootfs of a digest lives once on the node that made it
-- (`node_id`), shared by every tenant that has a name for that digest.
CREATE TABLE images (
    workspace     text NOT NULL,
    name          text NOT NULL,
    tag           text NOT NULL,
    digest        text NOT NULL,
    size_bytes    bigint NOT NULL,
    origin        text NOT NULL,
    config        text NOT NULL,
    node_id       text NOT NULL,
    created_at_ms bigint NOT NULL,
    PRIMARY KEY (workspace, name, tag)
);
CREATE INDEX images_by_digest ON images (digest);
