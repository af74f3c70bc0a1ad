-- Orrery's persistence plane on PostgreSQL, version 23: a worker's
-- capabilities, what its last advertising heartbeat said it carries
-- (roles, world types, workflow versions, effect kinds), sorted and
-- without duplicates; '{}': it never advertised (an older binary), which
-- readers take as carrying everything.
--
-- heartbeat_as gains an overload that takes the list (adv: replace the
-- recorded one; otherwise keep it) and answers it; set_worker_draining
-- answers a whole worker record. The six-argument heartbeat_as and
-- set_draining keep their signatures and answers, for the binaries of the
-- release before during a rolling upgrade, and become wrappers: their
-- heartbeats keep the recorded list.

ALTER TABLE workers ADD COLUMN capabilities text[] NOT NULL DEFAULT '{}';

CREATE FUNCTION heartbeat_as(wk text, cap bigint, promised boolean, inc text, ttl bigint, off bigint,
                             adv boolean, caps text[])
RETURNS TABLE (r_fenced boolean, r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint,
               r_incarnation text, r_alive_until_ns bigint, r_capabilities text[])
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
            RETURN QUERY SELECT true, 0::bigint, false, 0::bigint, 0::bigint, ''::text, NULL::bigint, '{}'::text[];
            RETURN;
        END IF;
        IF known AND prev <> inc THEN
            INSERT INTO retired_incarnations (worker, incarnation, retired_at_ns) VALUES (wk, prev, t) ON CONFLICT DO NOTHING;
            PERFORM requeue_orphans(t);
        END IF;
    END IF;
    PERFORM notify_topic('workers');
    RETURN QUERY INSERT INTO workers AS x (worker, capacity, heartbeat_at_ns, started_at_ns, incarnation, alive_until_ns, capabilities)
        VALUES (wk, cap, t, t, CASE WHEN promised THEN inc ELSE '' END, CASE WHEN promised THEN t + ttl END,
                CASE WHEN adv THEN coalesce(caps, '{}') ELSE '{}' END)
        ON CONFLICT (worker) DO UPDATE SET capacity = EXCLUDED.capacity, heartbeat_at_ns = EXCLUDED.heartbeat_at_ns,
            incarnation = CASE WHEN promised THEN EXCLUDED.incarnation ELSE x.incarnation END,
            alive_until_ns = EXCLUDED.alive_until_ns,
            capabilities = CASE WHEN adv THEN EXCLUDED.capabilities ELSE x.capabilities END
        RETURNING false, x.capacity, x.draining, x.heartbeat_at_ns, x.started_at_ns, x.incarnation, x.alive_until_ns,
            x.capabilities;
END $$;

CREATE OR REPLACE FUNCTION heartbeat_as(wk text, cap bigint, promised boolean, inc text, ttl bigint, off bigint)
RETURNS TABLE (r_fenced boolean, r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint,
               r_incarnation text, r_alive_until_ns bigint)
LANGUAGE sql AS $$
    SELECT h.r_fenced, h.r_capacity, h.r_draining, h.r_heartbeat_at_ns, h.r_started_at_ns, h.r_incarnation, h.r_alive_until_ns
    FROM heartbeat_as(wk, cap, promised, inc, ttl, off, false, '{}'::text[]) h;
$$;

CREATE FUNCTION set_worker_draining(wk text, d boolean)
RETURNS TABLE (r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint,
               r_incarnation text, r_alive_until_ns bigint, r_capabilities text[])
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY UPDATE workers x SET draining = d WHERE x.worker = wk
        RETURNING x.capacity, x.draining, x.heartbeat_at_ns, x.started_at_ns, x.incarnation, x.alive_until_ns,
            x.capabilities;
    IF FOUND THEN
        PERFORM notify_topic('workers');
    END IF;
END $$;

CREATE OR REPLACE FUNCTION set_draining(wk text, d boolean)
RETURNS TABLE (r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint)
LANGUAGE sql AS $$
    SELECT s.r_capacity, s.r_draining, s.r_heartbeat_at_ns, s.r_started_at_ns FROM set_worker_draining(wk, d) s;
$$;
