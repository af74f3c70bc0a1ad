-- Orrery's persistence plane on PostgreSQL, version 16: each stream's
-- compaction floor.
--
-- runSeqs may have gaps, so a reader cannot tell a record compaction
-- removed from one that never existed. compacted_to is the highest runSeq
-- compaction may have removed (every record at or below it is gone; 0:
-- none ever was), compacted_at_ns the latest persistedAt among the removed
-- records (NULL: none). compact raises both in its own transaction, and a
-- read below compacted_to is refused (journal.go) rather than answered
-- with what is left above it.
ALTER TABLE streams ADD COLUMN compacted_to bigint NOT NULL DEFAULT 0,
    ADD COLUMN compacted_at_ns bigint;

-- Compactions before this version left their mark in compacted_keys.
UPDATE streams s SET compacted_to = c.to_seq, compacted_at_ns = c.at_ns
FROM (SELECT k.stream, max(k.run_seq) AS to_seq, max(k.persisted_at_ns) AS at_ns
      FROM compacted_keys k GROUP BY k.stream) c
WHERE s.stream = c.stream;

CREATE OR REPLACE FUNCTION compact(w text, e bigint, retain bigint, off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE b bigint; n integer; at bigint;
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    -- The stream's row is locked before the events (the lock order:
    -- streams, then the rest), since the floor is written after them.
    SELECT x.baseline_height INTO b FROM streams x WHERE x.stream = w FOR UPDATE;
    IF b IS NULL OR b <= retain THEN
        RETURN 0;
    END IF;
    PERFORM set_config('orrery.compaction', 'on', true);
    WITH d AS (
        DELETE FROM events v WHERE v.stream = w AND v.run_seq <= b - retain
        RETURNING v.stream, v.idempotency_key, v.event_id, v.run_seq, v.persisted_at_ns, v.event_type,
            coalesce(v.payload_sha256, sha256(coalesce(v.payload, ''::bytea))) AS h
    ), k AS (
        INSERT INTO compacted_keys (stream, idempotency_key, event_id, run_seq, persisted_at_ns, event_type, payload_sha256)
        SELECT * FROM d ON CONFLICT DO NOTHING
    )
    SELECT count(*), max(d.persisted_at_ns) INTO n, at FROM d;
    PERFORM set_config('orrery.compaction', 'off', true);
    UPDATE streams x SET compacted_to = greatest(x.compacted_to, b - retain),
        compacted_at_ns = greatest(x.compacted_at_ns, at)
    WHERE x.stream = w;
    RETURN n;
END $$;
