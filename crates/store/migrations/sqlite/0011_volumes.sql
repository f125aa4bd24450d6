-- Persistent volumes (issue 18, local kind) and the mounts sandboxes took at
-- create. A volume belongs to one tenant; its name is unique there. Mount rows
-- outlive their sandbox (history, and clones of its snapshots mount the same
-- volumes); they go with the volume.
CREATE TABLE volumes (
    id            TEXT PRIMARY KEY,
    workspace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    size_mb       INTEGER NOT NULL,
    node_id       TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (workspace, name)
);
CREATE TABLE volume_mounts (
    sandbox_id TEXT NOT NULL,
    volume_id  TEXT NOT NULL,
    path       TEXT NOT NULL,
    read_only  INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, path)
);
CREATE INDEX volume_mounts_by_volume ON volume_mounts (volume_id);
