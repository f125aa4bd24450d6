-- The node that runs each sandbox. Rows from before nodes were recorded have ''
-- and are adopted by the first node that registers (a single node: itself).
ALTER TABLE sandboxes ADD COLUMN node_id text NOT NULL DEFAULT '';
CREATE INDEX sandboxes_node_active ON sandboxes (node_id) WHERE active;
-- When another node failed this node's sandboxes over after its lease ran out;
-- NULL until then, and again once the node registers anew.
ALTER TABLE nodes ADD COLUMN failed_over_ms bigint;
