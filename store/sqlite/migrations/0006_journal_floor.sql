-- A stream's compaction floor: compacted_to is the highest runSeq
-- compaction may have removed (every record at or below it is gone; 0:
-- none ever was), compacted_at the latest persistedAt among the removed
-- records (NULL: none). Compact raises both in its own transaction, and a
-- read below compacted_to is refused rather than answered with the
-- records above it: runSeqs may have gaps, so a reader could not tell.
ALTER TABLE streams ADD COLUMN compacted_to INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN compacted_at INTEGER;

-- Compactions before this version left their mark only as idempotency
-- keys without their events: the highest such runSeq is their floor.
-- Every compacted stream has a streams row (Compact writes it).
UPDATE streams SET
	compacted_to = COALESCE((SELECT MAX(k.run_seq) FROM event_keys k
		WHERE k.stream = streams.stream
		AND NOT EXISTS (SELECT 1 FROM events e WHERE e.stream = k.stream AND e.run_seq = k.run_seq)), 0),
	compacted_at = (SELECT MAX(k.persisted_at) FROM event_keys k
		WHERE k.stream = streams.stream
		AND NOT EXISTS (SELECT 1 FROM events e WHERE e.stream = k.stream AND e.run_seq = k.run_seq));
