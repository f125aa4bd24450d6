-- Idempotency claims carry a lease that their owner renews while the request runs.
-- A claim whose lease ran out was left by a process that stopped mid-request; a claim
-- with a live lease belongs to a running process (perhaps another sbxd on the same
-- database) and is waited for. Claims from before this version have no lease (0).
ALTER TABLE idempotency ADD COLUMN lease_until_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX idempotency_owner ON idempotency (owner) WHERE status IS NULL;
