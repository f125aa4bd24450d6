-- The nodes (sbxd processes) sharing this database, each under a lease it renews by
-- heartbeat. `epoch` is the fencing token: it grows each time a node registers after
-- its lease had run out, so that a node presumed lost cannot act on a stale epoch.
CREATE TABLE nodes (
    id                text PRIMARY KEY,
    advertise_url     text NOT NULL,
    version           text NOT NULL,
    labels            text NOT NULL,
    vcpu_milli        bigint NOT NULL,
    memory_mb         bigint NOT NULL,
    state             text NOT NULL,
    epoch             bigint NOT NULL,
    lease_until_ms    bigint NOT NULL,
    last_heartbeat_ms bigint NOT NULL,
    registered_at_ms  bigint NOT NULL
);
