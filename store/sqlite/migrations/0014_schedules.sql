-- Durable schedules (plane/schedule). spec and state are the scheduler's
-- bytes; the store judges only next_fire_at against its own clock, and
-- version is the compare-and-swap token every write advances, so two
-- schedulers that read one version never both record a tick.
CREATE TABLE schedules (
	id           TEXT    NOT NULL PRIMARY KEY,
	spec         BLOB    NOT NULL,
	state        BLOB,
	paused       INTEGER NOT NULL DEFAULT 0,
	next_fire_at INTEGER,
	version      INTEGER NOT NULL,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL
);
CREATE INDEX schedules_next_fire ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;
