-- Orrery store, schema version 1.
--
-- Times are int64 Unix nanoseconds of the store clock; NULL where a time is
-- absent. Blobs are NULL for a nil byte slice and zero-length for an empty
-- one, so both round-trip. Every seq and epoch is a positive int64.

-- worlds: one row per world. inbox_cursor is the seq of the last drained
-- inbox item; baseline_height is the active snapshot's height (NULL: no
-- baseline).
CREATE TABLE worlds (
	id                   TEXT    NOT NULL PRIMARY KEY,
	universe             TEXT    NOT NULL,
	status               TEXT    NOT NULL CHECK (status IN ('active', 'fenced', 'archived')),
	parent_world         TEXT    NOT NULL DEFAULT '',
	parent_snapshot_hash TEXT    NOT NULL DEFAULT '',
	forked_at_height     INTEGER NOT NULL DEFAULT 0,
	created_at           INTEGER NOT NULL,
	inbox_cursor         INTEGER NOT NULL DEFAULT 0,
	baseline_height      INTEGER
) WITHOUT ROWID;
CREATE INDEX worlds_by_universe ON worlds (universe, id);

-- streams: the floor of a stream's head: a fork's or seed's snapshot
-- height, or the head a compaction found before removing events. The head
-- is the higher of this floor and the stream's highest runSeq in events
-- (journal.go, headQuery), so an append writes only its events and keys,
-- and runSeq never goes back.
CREATE TABLE streams (
	stream TEXT    NOT NULL PRIMARY KEY,
	head   INTEGER NOT NULL
) WITHOUT ROWID;

-- events: the journal. Immutable (triggers below); rows leave it only
-- through compaction.
CREATE TABLE events (
	stream           TEXT    NOT NULL,
	run_seq          INTEGER NOT NULL,
	event_id         TEXT    NOT NULL,
	idempotency_key  TEXT    NOT NULL,
	event_type       TEXT    NOT NULL,
	emitted_at       INTEGER,
	persisted_at     INTEGER NOT NULL,
	step_id          TEXT    NOT NULL,
	logical_attempt  INTEGER NOT NULL,
	engine_attempt   INTEGER NOT NULL,
	plan_id          TEXT    NOT NULL,
	plan_version     INTEGER NOT NULL,
	payload          BLOB,
	PRIMARY KEY (stream, run_seq)
);
CREATE INDEX events_by_persisted_at ON events (stream, persisted_at);

-- event_keys: the dedupe authority, (stream, idempotencyKey) -> the first
-- append's metadata. Kept when compaction removes the event itself, so a
-- retried append of a compacted event is still answered, not re-inserted.
CREATE TABLE event_keys (
	stream          TEXT    NOT NULL,
	idempotency_key TEXT    NOT NULL,
	event_id        TEXT    NOT NULL,
	run_seq         INTEGER NOT NULL,
	persisted_at    INTEGER NOT NULL,
	PRIMARY KEY (stream, idempotency_key)
) WITHOUT ROWID;

-- compaction_gate: Compact writes (stream, upto) here, deletes the events
-- at or below upto, and removes the row, all inside one savepoint of one
-- transaction, so no other connection ever sees a gate. The delete trigger
-- lets through only deletes a gate covers.
CREATE TABLE compaction_gate (
	stream TEXT    NOT NULL PRIMARY KEY,
	upto   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER events_immutable_update BEFORE UPDATE ON events
BEGIN
	SELECT RAISE(ABORT, 'orrery: journal records are immutable');
END;

CREATE TRIGGER events_delete_only_compaction BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM compaction_gate g WHERE g.stream = OLD.stream AND OLD.run_seq <= g.upto)
BEGIN
	SELECT RAISE(ABORT, 'orrery: journal records are immutable (only compaction deletes them)');
END;

CREATE TRIGGER event_keys_immutable_update BEFORE UPDATE ON event_keys
BEGIN
	SELECT RAISE(ABORT, 'orrery: journal records are immutable');
END;

CREATE TRIGGER event_keys_immutable_delete BEFORE DELETE ON event_keys
BEGIN
	SELECT RAISE(ABORT, 'orrery: journal records are immutable');
END;

-- leases: one row per world ever leased. The row stays after a release
-- (holder '') so the epoch counter is never reused.
CREATE TABLE leases (
	world      TEXT    NOT NULL PRIMARY KEY REFERENCES worlds (id),
	holder     TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX leases_by_holder ON leases (holder, world);

CREATE TABLE assignments (
	world          TEXT    NOT NULL PRIMARY KEY REFERENCES worlds (id),
	desired_worker TEXT    NOT NULL,
	priority       INTEGER NOT NULL,
	reason         TEXT    NOT NULL
) WITHOUT ROWID;
CREATE INDEX assignments_by_worker ON assignments (desired_worker, world);

-- inbox: every item ever enqueued, kept after it is drained (so a world's
-- last seq is its highest seq here).
CREATE TABLE inbox (
	world       TEXT    NOT NULL REFERENCES worlds (id),
	seq         INTEGER NOT NULL,
	kind        TEXT    NOT NULL,
	payload     BLOB,
	dedupe_key  TEXT    NOT NULL,
	enqueued_at INTEGER NOT NULL,
	PRIMARY KEY (world, seq)
);

-- inbox_dedupe: a non-empty dedupe key -> its item's seq. completed_at is
-- when the item was drained to the journal (NULL while it is pending).
CREATE TABLE inbox_dedupe (
	world        TEXT    NOT NULL,
	dedupe_key   TEXT    NOT NULL,
	seq          INTEGER NOT NULL,
	completed_at INTEGER,
	PRIMARY KEY (world, dedupe_key)
) WITHOUT ROWID;
CREATE INDEX inbox_dedupe_pending ON inbox_dedupe (world, seq) WHERE completed_at IS NULL;
CREATE INDEX inbox_dedupe_completed ON inbox_dedupe (completed_at) WHERE completed_at IS NOT NULL;

-- effects: the global dispatch queue and its dedupe records. seq is the
-- queue order; a done row is the intent's dedupe record until swept.
CREATE TABLE effects (
	seq                 INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	intent_hash         TEXT    NOT NULL UNIQUE,
	world               TEXT    NOT NULL REFERENCES worlds (id),
	kind                TEXT    NOT NULL,
	params              BLOB,
	origin              TEXT    NOT NULL,
	policy_context_hash TEXT    NOT NULL,
	state               TEXT    NOT NULL CHECK (state IN ('pending', 'inflight', 'done')),
	enqueued_at         INTEGER NOT NULL,
	attempts            INTEGER NOT NULL DEFAULT 0,
	claimed_by          TEXT    NOT NULL DEFAULT '',
	claim_expires       INTEGER,
	receipt_status      TEXT,
	receipt_payload     BLOB,
	inbox_seq           INTEGER,
	completed_at        INTEGER
);
CREATE INDEX effects_pending ON effects (seq) WHERE state = 'pending';
CREATE INDEX effects_inflight ON effects (claim_expires) WHERE state = 'inflight';
CREATE INDEX effects_done ON effects (completed_at) WHERE state = 'done';

-- timers: due and claimed timers, and the dedupe records of delivered ones
-- until swept (a cancelled timer is deleted).
CREATE TABLE timers (
	intent_hash   TEXT    NOT NULL PRIMARY KEY,
	world         TEXT    NOT NULL REFERENCES worlds (id),
	deliver_at    INTEGER NOT NULL,
	payload       BLOB,
	state         TEXT    NOT NULL CHECK (state IN ('due', 'claimed', 'delivered')),
	attempt       INTEGER NOT NULL DEFAULT 0,
	claimed_by    TEXT    NOT NULL DEFAULT '',
	claim_expires INTEGER,
	inbox_seq     INTEGER,
	completed_at  INTEGER
);
CREATE INDEX timers_due ON timers (deliver_at, intent_hash) WHERE state = 'due';
CREATE INDEX timers_claimed ON timers (claim_expires) WHERE state = 'claimed';
CREATE INDEX timers_completed ON timers (completed_at) WHERE state = 'delivered';

-- fabric_dedupe: (destination, message id) -> the destination inbox seq of
-- the first delivery.
CREATE TABLE fabric_dedupe (
	dest         TEXT    NOT NULL,
	message_id   TEXT    NOT NULL,
	seq          INTEGER NOT NULL,
	completed_at INTEGER NOT NULL,
	PRIMARY KEY (dest, message_id)
) WITHOUT ROWID;
CREATE INDEX fabric_dedupe_completed ON fabric_dedupe (completed_at);

CREATE TABLE snapshots (
	world      TEXT    NOT NULL REFERENCES worlds (id),
	height     INTEGER NOT NULL,
	state      BLOB,
	state_hash TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (world, height)
);

CREATE TABLE watermarks (
	projector TEXT    NOT NULL,
	stream    TEXT    NOT NULL,
	value     INTEGER NOT NULL,
	PRIMARY KEY (projector, stream)
) WITHOUT ROWID;
