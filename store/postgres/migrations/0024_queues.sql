-- Orrery's persistence plane on PostgreSQL, version 25: named admission
-- queues for workflow runs (store.Queues). queues holds the declarations;
-- queued_runs a run's entry while it waits (worker '') and while it holds
-- a slot (worker: its admitter); queue_admissions the admission times a
-- rate window still counts. An admission locks its queue's row, so two
-- admitters count the same slots one after the other.
CREATE TABLE queues (
    name               text COLLATE "C" PRIMARY KEY,
    concurrency        bigint NOT NULL,
    worker_concurrency bigint NOT NULL,
    rate_limit         bigint NOT NULL,
    rate_period_ns     bigint NOT NULL,
    partitioned        boolean NOT NULL
);
CREATE TABLE queued_runs (
    run            text COLLATE "C" PRIMARY KEY REFERENCES worlds (world),
    queue          text COLLATE "C" NOT NULL REFERENCES queues (name),
    partition      text COLLATE "C" NOT NULL,
    priority       bigint NOT NULL,
    seq            bigserial UNIQUE,
    enqueued_at_ns bigint NOT NULL,
    worker         text COLLATE "C" NOT NULL DEFAULT '',
    admitted_at_ns bigint
);
CREATE INDEX queued_runs_order ON queued_runs (queue, priority, seq);
CREATE TABLE queue_admissions (
    queue     text COLLATE "C" NOT NULL,
    partition text COLLATE "C" NOT NULL,
    at_ns     bigint NOT NULL
);
CREATE INDEX queue_admissions_at ON queue_admissions (queue, at_ns);

-- Archiving a run frees its slot (or takes it out of its queue) in the
-- archiving transaction, whichever path archives it: a run's end commit,
-- a cancellation, the operator. The world's row is locked by then, so the
-- entry's comes after it (the lock order).
CREATE OR REPLACE FUNCTION queued_runs_leave() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queued_runs WHERE run = NEW.world;
    RETURN NULL;
END $$;
CREATE TRIGGER queued_runs_leave AFTER UPDATE OF status ON worlds
    FOR EACH ROW WHEN (NEW.status = 'archived' AND OLD.status <> 'archived')
    EXECUTE FUNCTION queued_runs_leave();
