-- 3: egress policy (JSON `NetworkPolicy`; NULL = `none`, the behaviour before policies existed).
ALTER TABLE sandboxes ADD COLUMN network TEXT;
ALTER TABLE snapshots ADD COLUMN network TEXT;
