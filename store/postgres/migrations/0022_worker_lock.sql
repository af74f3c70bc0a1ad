-- Orrery's persistence plane on PostgreSQL, version 22: one worker id's
-- heartbeats and retirements are serialized by a transaction-scoped
-- advisory lock on the id. heartbeat_as and retire_worker locked the
-- worker's row FOR UPDATE, which locks nothing before the first heartbeat
-- made the row: two first heartbeats of two incarnations could both see no
-- predecessor, and the second's upsert replaced the first's incarnation
-- without retiring it (its claims never requeued, its later heartbeats
-- taken); a retirement racing a first heartbeat was not ordered with it
-- either.

CREATE OR REPLACE FUNCTION heartbeat_as(wk text, cap bigint, promised boolean, inc text, ttl bigint, off bigint)
RETURNS TABLE (r_fenced boolean, r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint,
               r_incarnation text, r_alive_until_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint; prev text; known boolean;
BEGIN
    t := now_ns(off);
    IF promised THEN
        -- One worker id's heartbeats and retirements, serialized even before
        -- its row exists (FOR UPDATE locks no row that is not there yet).
        PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '/worker/' || wk, 0));
        SELECT w.incarnation INTO prev FROM workers w WHERE w.worker = wk FOR UPDATE;
        known := FOUND;
        IF EXISTS (SELECT 1 FROM retired_incarnations r WHERE r.worker = wk AND r.incarnation = inc) THEN
            RETURN QUERY SELECT true, 0::bigint, false, 0::bigint, 0::bigint, ''::text, NULL::bigint;
            RETURN;
        END IF;
        IF known AND prev <> inc THEN
            INSERT INTO retired_incarnations (worker, incarnation, retired_at_ns) VALUES (wk, prev, t) ON CONFLICT DO NOTHING;
            PERFORM requeue_orphans(t);
        END IF;
    END IF;
    PERFORM notify_topic('workers');
    RETURN QUERY INSERT INTO workers AS x (worker, capacity, heartbeat_at_ns, started_at_ns, incarnation, alive_until_ns)
        VALUES (wk, cap, t, t, CASE WHEN promised THEN inc ELSE '' END, CASE WHEN promised THEN t + ttl END)
        ON CONFLICT (worker) DO UPDATE SET capacity = EXCLUDED.capacity, heartbeat_at_ns = EXCLUDED.heartbeat_at_ns,
            incarnation = CASE WHEN promised THEN EXCLUDED.incarnation ELSE x.incarnation END,
            alive_until_ns = EXCLUDED.alive_until_ns
        RETURNING false, x.capacity, x.draining, x.heartbeat_at_ns, x.started_at_ns, x.incarnation, x.alive_until_ns;
END $$;

CREATE OR REPLACE FUNCTION retire_worker(wk text, inc text, off bigint)
RETURNS TABLE (r_effects bigint, r_withdrawn bigint, r_timers bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    t := now_ns(off);
    -- One worker id's heartbeats and retirements, serialized even before
    -- its row exists (FOR UPDATE locks no row that is not there yet).
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '/worker/' || wk, 0));
    PERFORM 1 FROM workers w WHERE w.worker = wk FOR UPDATE;
    IF EXISTS (SELECT 1 FROM retired_incarnations r WHERE r.worker = wk AND r.incarnation = inc) THEN
        RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    INSERT INTO retired_incarnations (worker, incarnation, retired_at_ns) VALUES (wk, inc, t);
    UPDATE workers w SET alive_until_ns = t WHERE w.worker = wk AND w.incarnation = inc;
    IF FOUND THEN
        PERFORM notify_topic('workers');
    END IF;
    RETURN QUERY SELECT * FROM requeue_orphans(t);
END $$;
