-- Named admission queues for workflow runs (store.Queues). queues holds
-- the declarations; queued_runs a run's entry while it waits (worker '')
-- and while it holds a slot (worker: its admitter); queue_admissions the
-- admission times a rate window still counts.
CREATE TABLE queues (
	name               TEXT    NOT NULL PRIMARY KEY,
	concurrency        INTEGER NOT NULL,
	worker_concurrency INTEGER NOT NULL,
	rate_limit         INTEGER NOT NULL,
	rate_period_ns     INTEGER NOT NULL,
	partitioned        INTEGER NOT NULL
);
CREATE TABLE queued_runs (
	run         TEXT    NOT NULL PRIMARY KEY REFERENCES worlds (id),
	queue       TEXT    NOT NULL REFERENCES queues (name),
	partition   TEXT    NOT NULL,
	priority    INTEGER NOT NULL,
	seq         INTEGER NOT NULL UNIQUE,
	enqueued_at INTEGER NOT NULL,
	worker      TEXT    NOT NULL DEFAULT '',
	admitted_at INTEGER
);
CREATE INDEX queued_runs_order ON queued_runs (queue, priority, seq);
CREATE TABLE queue_admissions (
	queue     TEXT    NOT NULL,
	partition TEXT    NOT NULL,
	at        INTEGER NOT NULL
);
CREATE INDEX queue_admissions_at ON queue_admissions (queue, at);
-- Archiving a run frees its slot (or takes it out of the queue) in the
-- archiving transaction, whichever path archives it: a run's end commit,
-- a cancellation, the operator.
CREATE TRIGGER queued_runs_leave AFTER UPDATE OF status ON worlds
WHEN NEW.status = 'archived'
BEGIN
	DELETE FROM queued_runs WHERE run = NEW.id;
END;
