-- An effect may be withdrawn: given up before any adapter claimed it,
-- because its world was archived or its producer named it in a Commit's
-- Withdraw. The row stays as its record (completed_at is the withdrawal's
-- time) until SweepDedupe removes it. A CHECK cannot be altered in SQLite,
-- so the table is rebuilt with its rows, its queue order and the
-- AUTOINCREMENT high-water mark (a swept row's seq is never handed out
-- again).
CREATE TABLE effects_new (
	seq                 INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	intent_hash         TEXT    NOT NULL UNIQUE,
	world               TEXT    NOT NULL REFERENCES worlds (id),
	kind                TEXT    NOT NULL,
	params              BLOB,
	origin              TEXT    NOT NULL,
	policy_context_hash TEXT    NOT NULL,
	state               TEXT    NOT NULL CHECK (state IN ('pending', 'inflight', 'done', 'withdrawn')),
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
	resolve_reason      TEXT
);
INSERT INTO effects_new (seq, intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at,
	attempts, claimed_by, claim_expires, receipt_status, receipt_payload, inbox_seq, completed_at, retries,
	retry_reason, resolve_reason)
SELECT seq, intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at,
	attempts, claimed_by, claim_expires, receipt_status, receipt_payload, inbox_seq, completed_at, retries,
	retry_reason, resolve_reason
FROM effects ORDER BY seq;
DELETE FROM sqlite_sequence WHERE name = 'effects_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'effects_new', seq FROM sqlite_sequence WHERE name = 'effects';
DROP TABLE effects;
ALTER TABLE effects_new RENAME TO effects;
CREATE INDEX effects_inflight ON effects (claim_expires) WHERE state = 'inflight';
CREATE INDEX effects_done ON effects (completed_at) WHERE state = 'done';
CREATE INDEX effects_pending_by_kind ON effects (kind, seq) WHERE state = 'pending';
CREATE INDEX effects_queued_by_world ON effects (world, seq) WHERE state IN ('pending', 'inflight');
-- Archiving a world withdraws its pending effects: one range of this.
CREATE INDEX effects_pending_by_world ON effects (world) WHERE state = 'pending';
CREATE INDEX effects_withdrawn ON effects (completed_at) WHERE state = 'withdrawn';
