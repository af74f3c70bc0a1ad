-- Orrery's persistence plane on PostgreSQL, version 20: prompt recovery of
-- a dead process's claims. A worker's heartbeat may promise liveness for
-- one incarnation (one lifetime of the process under the worker id) until
-- alive_until_ns (the store's clock; NULL: no promise). An effect or timer
-- claim may ride on such a promise (claim_node, claim_incarnation; '':
-- none, the claim lasts its TTL), and is requeued as soon as the store
-- knows that incarnation dead: its promise ran out, or it is in
-- retired_incarnations (a planned stop, or superseded by another
-- incarnation's heartbeat), from where its later heartbeats and claims are
-- refused.
--
-- heartbeat_as, retire_worker, requeue_orphans and incarnation_dead are
-- new; heartbeat stays for the release before, whose binaries call it.

ALTER TABLE workers
    ADD COLUMN incarnation text NOT NULL DEFAULT '',
    ADD COLUMN alive_until_ns bigint;
ALTER TABLE effects
    ADD COLUMN claim_node text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN claim_incarnation text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE timers
    ADD COLUMN claim_node text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN claim_incarnation text COLLATE "C" NOT NULL DEFAULT '';

CREATE TABLE retired_incarnations (
    worker        text COLLATE "C" NOT NULL,
    incarnation   text COLLATE "C" NOT NULL,
    retired_at_ns bigint NOT NULL,
    PRIMARY KEY (worker, incarnation)
);

-- The orphan reaper reads only the claims that ride on a promise.
CREATE INDEX effects_claim_owner ON effects (claim_node, claim_incarnation) WHERE state = 'inflight' AND claim_node <> '';
CREATE INDEX timers_claim_owner ON timers (claim_node, claim_incarnation) WHERE state = 'inflight' AND claim_node <> '';

-- Whether the store knows worker wk's incarnation inc dead at t (its clock):
-- retired (retire_worker, or superseded by another incarnation's
-- heartbeat), or named by its worker's row whose promise ran out.
CREATE FUNCTION incarnation_dead(wk text, inc text, t bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM retired_incarnations r WHERE r.worker = wk AND r.incarnation = inc)
        OR EXISTS (SELECT 1 FROM workers w WHERE w.worker = wk AND w.incarnation = inc
            AND w.alive_until_ns IS NOT NULL AND w.alive_until_ns <= t)
$$;

-- Requeues, at t, every inflight effect and timer whose claim rides on an
-- incarnation known dead, revoking the claim (claimed_by cleared, so its
-- old holder can neither settle nor release it); an archived world's
-- effect is withdrawn, as a reap would. Rows another transaction holds are
-- left for the next pass.
CREATE FUNCTION requeue_orphans(t bigint)
RETURNS TABLE (r_effects bigint, r_withdrawn bigint, r_timers bigint)
LANGUAGE plpgsql AS $$
DECLARE e bigint; wd bigint; tm bigint;
BEGIN
    WITH c AS (
        SELECT x.intent_hash FROM effects x
        WHERE x.state = 'inflight' AND x.claim_node <> '' AND incarnation_dead(x.claim_node, x.claim_incarnation, t)
        ORDER BY x.intent_hash FOR UPDATE OF x SKIP LOCKED),
    u AS (
        UPDATE effects x SET
            state = CASE WHEN EXISTS (SELECT 1 FROM worlds w WHERE w.world = x.world AND w.status = 'archived')
                THEN 'withdrawn' ELSE 'pending' END,
            completed_at_ns = CASE WHEN EXISTS (SELECT 1 FROM worlds w WHERE w.world = x.world AND w.status = 'archived')
                THEN t ELSE x.completed_at_ns END,
            claimed_by = '', claim_expires_ns = NULL, claim_node = '', claim_incarnation = ''
        FROM c WHERE x.intent_hash = c.intent_hash
        RETURNING x.state)
    SELECT count(*) FILTER (WHERE u.state = 'pending'), count(*) FILTER (WHERE u.state = 'withdrawn') INTO e, wd FROM u;
    WITH c AS (
        SELECT x.intent_hash FROM timers x
        WHERE x.state = 'inflight' AND x.claim_node <> '' AND incarnation_dead(x.claim_node, x.claim_incarnation, t)
        ORDER BY x.intent_hash FOR UPDATE OF x SKIP LOCKED),
    u AS (
        UPDATE timers x SET state = 'due', claimed_by = '', claim_expires_ns = NULL, claim_node = '', claim_incarnation = ''
        FROM c WHERE x.intent_hash = c.intent_hash
        RETURNING 1)
    SELECT count(*) INTO tm FROM u;
    IF e > 0 THEN
        PERFORM notify_topic('effects');
    END IF;
    IF tm > 0 THEN
        PERFORM notify_topic('timers');
    END IF;
    RETURN QUERY SELECT e, wd, tm;
END $$;

-- A worker's heartbeat with or without a promise of liveness (promised:
-- incarnation inc is alive until t + ttl). A retired incarnation's is
-- refused (r_fenced, nothing written); another incarnation's supersedes
-- the recorded one, which is retired and its claims requeued. The worker
-- row is locked first, as a claim for the worker locks it (FOR SHARE), so
-- that a claim never slips past a retirement.
CREATE FUNCTION heartbeat_as(wk text, cap bigint, promised boolean, inc text, ttl bigint, off bigint)
RETURNS TABLE (r_fenced boolean, r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint,
               r_incarnation text, r_alive_until_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint; prev text; known boolean;
BEGIN
    t := now_ns(off);
    IF promised THEN
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

-- A planned stop: worker wk's incarnation inc retired for good, its row
-- (if it names inc) dead at t, its claims requeued; again: a no-op.
CREATE FUNCTION retire_worker(wk text, inc text, off bigint)
RETURNS TABLE (r_effects bigint, r_withdrawn bigint, r_timers bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    t := now_ns(off);
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
