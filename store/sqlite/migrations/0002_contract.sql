-- Orrery store, schema version 2: the persistence contract of issue 7.
--
-- SQLite cannot alter a CHECK constraint, so the tables whose CHECK changed
-- (worlds, timers) are rebuilt: create the new table, copy, drop the old
-- one, rename. The migration runner (schema.go) turns foreign keys off
-- around the transaction for this, checks them (PRAGMA foreign_key_check)
-- before it commits, and provides two things this file relies on:
-- temp.migration_clock (the store clock at Open, one row) and the SQL
-- function orrery_sha256(blob).

-- worlds: the status is an operator's decision, active | paused | archived.
-- The old 'fenced' status was a trap nobody could leave; a fenced world
-- becomes paused, with the reason recorded, and its lease is released (a
-- world that is not active holds no lease).
CREATE TABLE worlds_v2 (
	id                   TEXT    NOT NULL PRIMARY KEY,
	universe             TEXT    NOT NULL,
	status               TEXT    NOT NULL CHECK (status IN ('active', 'paused', 'archived')),
	status_reason        TEXT    NOT NULL DEFAULT '',
	status_changed_at    INTEGER,
	parent_world         TEXT    NOT NULL DEFAULT '',
	parent_snapshot_hash TEXT    NOT NULL DEFAULT '',
	forked_at_height     INTEGER NOT NULL DEFAULT 0,
	created_at           INTEGER NOT NULL,
	inbox_cursor         INTEGER NOT NULL DEFAULT 0,
	baseline_height      INTEGER
) WITHOUT ROWID;
INSERT INTO worlds_v2 (id, universe, status, status_reason, status_changed_at, parent_world, parent_snapshot_hash,
	forked_at_height, created_at, inbox_cursor, baseline_height)
SELECT id, universe,
	CASE status WHEN 'fenced' THEN 'paused' ELSE status END,
	CASE status WHEN 'fenced' THEN 'schema 2: the stored status fenced no longer exists; paused instead' ELSE '' END,
	CASE status WHEN 'fenced' THEN (SELECT now FROM temp.migration_clock) END,
	parent_world, parent_snapshot_hash, forked_at_height, created_at, inbox_cursor, baseline_height
FROM worlds;
DROP TABLE worlds;
ALTER TABLE worlds_v2 RENAME TO worlds;
CREATE INDEX worlds_by_universe ON worlds (universe, id);

UPDATE leases SET holder = '', expires_at = MIN(expires_at, (SELECT now FROM temp.migration_clock))
WHERE holder != '' AND world IN (SELECT id FROM worlds WHERE status != 'active');

-- event_keys: the stored record's eventType and payload SHA-256 travel with
-- its key, so a duplicate that differs is reported (Appended.Conflict), also
-- after compaction removed the event. Keys of events compacted before this
-- version have neither (NULL: nothing to compare).
DROP TRIGGER event_keys_immutable_update;
ALTER TABLE event_keys ADD COLUMN event_type TEXT;
ALTER TABLE event_keys ADD COLUMN payload_sha256 BLOB;
UPDATE event_keys SET (event_type, payload_sha256) = (
	SELECT e.event_type, orrery_sha256(e.payload) FROM events e
	WHERE e.stream = event_keys.stream AND e.run_seq = event_keys.run_seq);
CREATE TRIGGER event_keys_immutable_update BEFORE UPDATE ON event_keys
BEGIN
	SELECT RAISE(ABORT, 'orrery: journal records are immutable');
END;

-- effects: operator retries, claims by kind, per-world listing. A done row
-- keeps its params now, since a retry runs the effect again.
ALTER TABLE effects ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN retry_reason TEXT NOT NULL DEFAULT '';
DROP INDEX effects_pending;
CREATE INDEX effects_pending_by_kind ON effects (kind, seq) WHERE state = 'pending';
CREATE INDEX effects_queued_by_world ON effects (world, seq) WHERE state IN ('pending', 'inflight');

-- timers: the unclaimed state is 'scheduled' (due or not).
CREATE TABLE timers_v2 (
	intent_hash   TEXT    NOT NULL PRIMARY KEY,
	world         TEXT    NOT NULL REFERENCES worlds (id),
	deliver_at    INTEGER NOT NULL,
	payload       BLOB,
	state         TEXT    NOT NULL CHECK (state IN ('scheduled', 'claimed', 'delivered')),
	attempt       INTEGER NOT NULL DEFAULT 0,
	claimed_by    TEXT    NOT NULL DEFAULT '',
	claim_expires INTEGER,
	inbox_seq     INTEGER,
	completed_at  INTEGER
);
INSERT INTO timers_v2 (intent_hash, world, deliver_at, payload, state, attempt, claimed_by, claim_expires, inbox_seq, completed_at)
SELECT intent_hash, world, deliver_at, payload, CASE state WHEN 'due' THEN 'scheduled' ELSE state END,
	attempt, claimed_by, claim_expires, inbox_seq, completed_at
FROM timers;
DROP TABLE timers;
ALTER TABLE timers_v2 RENAME TO timers;
CREATE INDEX timers_due ON timers (deliver_at, intent_hash) WHERE state = 'scheduled';
CREATE INDEX timers_claimed ON timers (claim_expires) WHERE state = 'claimed';
CREATE INDEX timers_completed ON timers (completed_at) WHERE state = 'delivered';
CREATE INDEX timers_queued_by_world ON timers (world, deliver_at, intent_hash) WHERE state IN ('scheduled', 'claimed');

-- workers: the inventory the orchestrator reads.
CREATE TABLE workers (
	id           TEXT    NOT NULL PRIMARY KEY,
	capacity     INTEGER NOT NULL,
	draining     INTEGER NOT NULL DEFAULT 0,
	heartbeat_at INTEGER NOT NULL,
	started_at   INTEGER NOT NULL
) WITHOUT ROWID;
