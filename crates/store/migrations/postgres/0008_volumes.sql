-- Persistent volumes (issue 18, local kind) and the mounts sandboxes took at
-- create. A volume belongs to one tenant; its name is unique there. Mount rows
-- outlive their sandbox (history, and clones of its snapshots mount the same
-- volumes); they go with the volume.
CREATE TABLE volumes (
    id            uuid PRIMARY KEY,
    workspace     text NOT NULL,
    name          text NOT NULL,
    kind          text NOT NULL,
    size_mb       bigint NOT NULL,
    node_id       text NOT NULL,
    created_at_ms bigint NOT NULL,
    UNIQUE (workspace, name)
);
CREATE TABLE volume_mounts (
    sandbox_id uuid NOT NULL,
    volume_id  uuid NOT NULL,
    path       text NOT NULL,
    read_only  boolean NOT NULL,
    PRIMARY KEY (sandbox_id, path)
);
CREATE INDEX volume_mounts_by_volume ON volume_mounts (volume_id);
