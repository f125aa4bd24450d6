-- Dockerfile build cache (issue 17): the key of a build's last step (a chain
-- of sha256 over every instruction, the env it saw and the content of the
-- files it copied) -> the image content it produced, per tenant. A row whose
-- digest is gone from the node is a miss (the build runs again).
CREATE TABLE image_builds (
    workspace     TEXT NOT NULL,
    cache_key     TEXT NOT NULL,
    digest        TEXT NOT NULL,
    size_bytes    INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (workspace, cache_key)
);
