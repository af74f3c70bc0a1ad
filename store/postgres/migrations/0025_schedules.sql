-- Orrery's persistence plane on PostgreSQL, version 24: durable schedules
-- (plane/schedule). spec and state are the scheduler's bytes; the store
-- judges only next_fire_at_ns against its own clock, and version is the
-- compare-and-swap token every write advances, so two schedulers that read
-- one version never both record a tick.
CREATE TABLE schedules (
    id              text    NOT NULL PRIMARY KEY,
    spec            bytea   NOT NULL,
    state           bytea,
    paused          boolean NOT NULL DEFAULT false,
    next_fire_at_ns bigint,
    version         bigint  NOT NULL,
    created_at_ns   bigint  NOT NULL,
    updated_at_ns   bigint  NOT NULL
);
CREATE INDEX schedules_next_fire ON schedules (next_fire_at_ns) WHERE next_fire_at_ns IS NOT NULL;
