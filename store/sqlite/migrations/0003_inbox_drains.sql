-- An inbox dedupe key completes when the world's cursor passes its item,
-- and its retention starts then. Schema 2 wrote that moment into every
-- key's row (completed_at), which made each world cycle rewrite one row
-- and two partial indexes per drained item: scattered B-tree pages, the
-- largest share of a cycle's WAL frames. From here a cycle records the
-- cursor move itself, one row appended in time order:
--
--   inbox_drains(world, upto, drained_at): at drained_at, the cursor of
--   world moved to upto, completing every key with seq <= upto not
--   completed before.
--
-- A key's completion time is the drained_at of the first drain whose upto
-- reaches its seq; SweepDedupe removes a world's keys up to the largest
-- upto among its drains older than the retention, then those drains.
CREATE TABLE inbox_drains (
	world      TEXT    NOT NULL,
	upto       INTEGER NOT NULL,
	drained_at INTEGER NOT NULL
);

-- The keys completed under schema 2 keep a drain each, dated by the last
-- completion of their world: a later date than some of them had, so they
-- are kept a little longer, never swept early.
INSERT INTO inbox_drains (world, upto, drained_at)
	SELECT world, MAX(seq), MAX(completed_at) FROM inbox_dedupe
	WHERE completed_at IS NOT NULL GROUP BY world;

DROP INDEX inbox_dedupe_pending;
DROP INDEX inbox_dedupe_completed;
ALTER TABLE inbox_dedupe DROP COLUMN completed_at;
