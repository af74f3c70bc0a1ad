-- Orrery's persistence plane on PostgreSQL, version 3: a world cycle
-- records the move of its inbox cursor once, instead of stamping each
-- drained item's dedupe key.
--
-- An inbox dedupe key completes when the cursor passes its item, and its
-- retention starts then. Version 2 wrote that moment into every drained
-- inbox row (key_drained_at_ns): one new row version and three index
-- entries per drained item, the largest share of a cycle's writes. From
-- here a cycle appends one row:
--
--   inbox_drains(world, lo, hi, drained_at_ns): at drained_at_ns the
--   cursor of world moved from lo to hi, completing the keys of the items
--   with lo < seq <= hi.
--
-- sweep_dedupe retires the keys of the drains older than the retention and
-- deletes those drains.
CREATE TABLE inbox_drains (
    world         text COLLATE "C" NOT NULL,
    lo            bigint NOT NULL,
    hi            bigint NOT NULL,
    drained_at_ns bigint NOT NULL
);
CREATE INDEX inbox_drains_by_time ON inbox_drains (drained_at_ns);

-- The keys completed under version 2 keep a drain per world, dated by its
-- last completion: later than some of them completed, so they are kept a
-- little longer, never swept early.
INSERT INTO inbox_drains (world, lo, hi, drained_at_ns)
    SELECT world, min(seq) - 1, max(seq), max(key_drained_at_ns) FROM inbox
    WHERE key_live AND key_drained_at_ns IS NOT NULL GROUP BY world;

DROP INDEX inbox_keys_drained;
ALTER TABLE inbox DROP COLUMN key_drained_at_ns;

-- As in version 2, with the inbox keys retired drain by drain.
CREATE OR REPLACE FUNCTION sweep_dedupe(retention bigint, off bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer; total integer := 0;
BEGIN
    t := now_ns(off) - retention;
    DELETE FROM effects x USING streams s
        WHERE x.state = 'done' AND x.completed_at_ns <= t
          AND s.stream = x.world AND s.inbox_cursor >= x.inbox_seq;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    DELETE FROM timers x USING streams s
        WHERE x.state = 'delivered' AND x.completed_at_ns <= t
          AND s.stream = x.world AND s.inbox_cursor >= x.inbox_seq;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    DELETE FROM fabric_dedupe x WHERE x.delivered_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    WITH old AS (
        DELETE FROM inbox_drains d WHERE d.drained_at_ns <= t RETURNING d.world, d.lo, d.hi)
    UPDATE inbox x SET key_live = false
        FROM old
        WHERE x.world = old.world AND x.seq > old.lo AND x.seq <= old.hi AND x.key_live;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    RETURN total;
END $$;
