-- An effect may be held: an operator (or a restore of a backup) keeps it
-- from every adapter until someone decides to release it (run it again,
-- at least once) or to resolve it with the receipt the external system
-- gave. hold_reason and held_at are the latest hold's, release_reason the
-- release's that ended it (kept as the effect's history once pending
-- again). A held effect has no claim: its claim was revoked by the hold.
-- A CHECK cannot be altered in SQLite, so the table is rebuilt with its
-- rows, its queue order and the AUTOINCREMENT high-water mark, as 0005 did.
CREATE TABLE effects_new (
	seq                 INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	intent_hash         TEXT    NOT NULL UNIQUE,
	world               TEXT    NOT NULL REFERENCES worlds (id),
	kind                TEXT    NOT NULL,
	params              BLOB,
	origin              TEXT    NOT NULL,
	policy_context_hash TEXT    NOT NULL,
	state               TEXT    NOT NULL CHECK (state IN ('pending', 'inflight', 'done', 'withdrawn', 'held')),
	enqueued_at         INTEGER NOT NULL,
	attempts            INTEGER NOT NULL DEFAULT 0,
	claimed_by          TEXT    NOT NULL DEFAULT '',
	claim_expires       INTEGER,
	receipt_status      TEXT,
	receipt_payload     BLOB,
	inbox_seq           INTEGER,
	completed_at        INTEGER,
	retries             INTEGER NOT NULL DEFAULT 0,
	retry_reason        TEXT    NOT NULL DEFAULT '',
	resolve_reason      TEXT,
	retry_policy        BLOB,
	retry_at            INTEGER,
	failures            INTEGER NOT NULL DEFAULT 0,
	last_error          TEXT    NOT NULL DEFAULT '',
	claim_node          TEXT    NOT NULL DEFAULT '',
	claim_incarnation   TEXT    NOT NULL DEFAULT '',
	hold_reason         TEXT    NOT NULL DEFAULT '',
	held_at             INTEGER,
	release_reason      TEXT    NOT NULL DEFAULT ''
);
INSERT INTO effects_new (seq, intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at,
	attempts, claimed_by, claim_expires, receipt_status, receipt_payload, inbox_seq, completed_at, retries,
	retry_reason, resolve_reason, retry_policy, retry_at, failures, last_error, claim_node, claim_incarnation)
SELECT seq, intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at,
	attempts, claimed_by, claim_expires, receipt_status, receipt_payload, inbox_seq, completed_at, retries,
	retry_reason, resolve_reason, retry_policy, retry_at, failures, last_error, claim_node, claim_incarnation
FROM effects ORDER BY seq;
DELETE FROM sqlite_sequence WHERE name = 'effects_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'effects_new', seq FROM sqlite_sequence WHERE name = 'effects';
DROP TABLE effects;
ALTER TABLE effects_new RENAME TO effects;
CREATE INDEX effects_inflight ON effects (claim_expires) WHERE state = 'inflight';
CREATE INDEX effects_done ON effects (completed_at) WHERE state = 'done';
CREATE INDEX effects_pending_by_kind ON effects (kind, seq) WHERE state = 'pending';
-- A world's open effects (ListEffects): pending, inflight and held.
CREATE INDEX effects_queued_by_world ON effects (world, seq) WHERE state IN ('pending', 'inflight', 'held');
-- Archiving a world withdraws its pending and held effects: one range of this.
CREATE INDEX effects_pending_by_world ON effects (world) WHERE state IN ('pending', 'held');
CREATE INDEX effects_withdrawn ON effects (completed_at) WHERE state = 'withdrawn';
CREATE INDEX effects_retry_at ON effects (retry_at) WHERE state = 'pending' AND retry_at IS NOT NULL;
CREATE INDEX effects_by_world ON effects (world, seq);
CREATE INDEX effects_by_kind ON effects (kind, seq);
CREATE INDEX effects_claim_owner ON effects (claim_node, claim_incarnation) WHERE state = 'inflight' AND claim_node <> '';
-- The operator's release of every held effect, and the held gauge.
CREATE INDEX effects_held ON effects (seq) WHERE state = 'held';
