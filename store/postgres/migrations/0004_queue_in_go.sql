-- Orrery's persistence plane on PostgreSQL, version 4: effects and timers
-- are claimed and reaped by statements the Go code builds from one queue
-- descriptor (queue.go), so the per-queue SQL functions of versions 1 and 2
-- are no longer called. A binary of version 3 or older refuses a schema at
-- version 4, so no running process can still need them.
DROP FUNCTION IF EXISTS claim_effects(text, text[], integer, bigint, bigint);
DROP FUNCTION IF EXISTS claim_effects(text, integer, bigint, bigint);
DROP FUNCTION IF EXISTS claim_timers(text, integer, bigint, bigint);
DROP FUNCTION IF EXISTS reap_effects(bigint);
DROP FUNCTION IF EXISTS reap_timers(bigint);
