-- Orrery's persistence plane on PostgreSQL: what a worker must carry to
-- admit a waiting queued run, the capability string of its workflow and
-- version ("workflow:<name>@<version>"). Entries from before this
-- migration have '' and any worker admits them, as an older binary did.
ALTER TABLE queued_runs ADD COLUMN needs TEXT NOT NULL DEFAULT '';
