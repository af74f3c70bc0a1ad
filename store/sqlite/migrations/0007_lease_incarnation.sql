-- A lease records its holder's incarnation (one lifetime of the process
-- under the worker id), so that a restarted process under the same worker
-- id takes its worlds over at a new epoch instead of sharing the old
-- process's. took_over says the lease was taken from the incarnation
-- displaced, of the same worker, which held it last (unexpired or
-- expired) and may not take it back while it is unexpired.
-- Leases from before are the empty incarnation's, taken free.
ALTER TABLE leases ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
ALTER TABLE leases ADD COLUMN took_over INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN displaced TEXT NOT NULL DEFAULT '';
