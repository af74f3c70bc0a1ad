-- Orrery's persistence plane on PostgreSQL, version 18: the single-world
-- acquire function goes. The store's front answers Acquire as a batch of
-- one (acquire_leases), so nothing calls it.

DROP FUNCTION acquire(text, text, text, bigint, bigint);
