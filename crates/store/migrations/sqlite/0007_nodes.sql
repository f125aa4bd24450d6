-- The nodes (sbxd processes) sharing this database, each under a lease it renews by
-- heartbeat. `epoch` is the fencing token: it grows each time a node registers after
-- its lease had run out, so that a node presumed lost cannot act on a stale epoch.
CREATE TABLE nodes (
    id                TEXT PRIMARY KEY,
    advertise_url     TEXT NOT NULL,
    version           TEXT NOT NULL,
    labels            TEXT NOT NULL,
    vcpu_milli        INTEGER NOT NULL,
    memory_mb         INTEGER NOT NULL,
    state             TEXT NOT NULL,
    epoch             INTEGER NOT NULL,
    lease_until_ms    INTEGER NOT NULL,
    last_heartbeat_ms INTEGER NOT NULL,
    registered_at_ms  INTEGER NOT NULL
);
