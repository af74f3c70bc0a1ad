-- The current definition of every function of the store's schema.
--
-- The rule: migrations/ keeps the history, this file the present. A
-- migration that adds, changes or drops a function does so as it always
-- has (an applied migration is never edited), and the same change lands
-- here: the new definition replaces the old one in this file, a dropped
-- function leaves it. TestFunctionsSQLIsCurrent fails when the two
-- disagree (a function of the schema missing here, or defined here with
-- another body than the migrations left). A function this binary no longer
-- calls is dropped only a release after the last binary that calls it: the
-- release before may still run beside this one during a rolling upgrade.
--
-- Open applies this file after the migrations, in the same transaction and
-- under the same advisory lock, with search_path set to the store's
-- schema (so names stay unqualified), whenever a migration ran or the
-- file changed since it was last applied (schema_functions records its
-- SHA-256): applying it is idempotent, every statement a CREATE OR
-- REPLACE of what the schema already holds. Tables, indexes, types and
-- triggers are not functions: they live in the migrations only.
--
-- Lock order, which every function (and every transaction of the store)
-- follows so that none deadlocks: worlds, then leases, then streams, then
-- the rest (effects, then timers, then inbox, events and snapshot rows);
-- several rows of one table are locked in key order. Queue claims and
-- reaps use SKIP LOCKED and wait for nobody. A worker's row comes before
-- the effect and timer rows of its claims: a claim made for it locks the
-- row FOR SHARE, heartbeat_as and retire_worker lock it FOR UPDATE, so a
-- claim never slips past the retirement of the incarnation it is for.
--
-- The functions that decide in SQL (the fence, the lease functions,
-- enqueue_one, fire_held) mirror a function of store/internal/contract,
-- which they name; they return the rows they read, and the Go caller
-- decides again on them and refuses an answer on which the two disagree.

-- The store clock: the server's clock in Unix nanoseconds plus the offset
-- (WithClockOffset, 0 in production). No client clock decides a time.
CREATE OR REPLACE FUNCTION now_ns(off bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000 + off $$;

-- A hint to Watch listeners on other connections: delivered at commit, or,
-- in a transaction that set orrery.defer_hints, recorded for flush_hints to
-- send right after the COMMIT. A topic too long for a notification's
-- payload is not hinted (hints may be lost; correctness never depends on
-- them).
CREATE OR REPLACE FUNCTION notify_topic(topic text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF octet_length(topic) >= 7900 THEN
        RETURN;
    END IF;
    IF current_setting('orrery.defer_hints', true) = 'on' THEN
        PERFORM set_config('orrery.hints',
            coalesce(current_setting('orrery.hints', true), '') || topic || E'\x1f', false);
    ELSE
        PERFORM pg_notify('orrery.' || current_schema(), topic);
    END IF;
END $$;

-- Persisted records are immutable: the database itself refuses every
-- UPDATE and TRUNCATE, and every DELETE except compaction's, which opens
-- the gate for its own transaction with set_config('orrery.compaction',
-- 'on', true).
CREATE OR REPLACE FUNCTION events_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('orrery.compaction', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'orrery: journal events are immutable (% refused)', TG_OP
        USING ERRCODE = 'OR100';
END $$;

-- Raises OR040 (a speculative batch's wrong guess) unless n = want.
CREATE OR REPLACE FUNCTION expect_count(n bigint, want bigint, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF n <> want THEN
        RAISE EXCEPTION '%', what USING ERRCODE = 'OR040';
    END IF;
END $$;

-- The fence of the one-call world mutations (Publish, Schedule,
-- CancelTimer, Compact). Mirrors contract.Fence: the world exists and e is
-- the epoch of its lease, held and unexpired at t. FOR SHARE keeps the
-- lease row as it is until the mutation commits: a takeover (or a status
-- change) waits for the write, and a write that waited for a takeover sees
-- the new epoch.
CREATE OR REPLACE FUNCTION check_fence(w text, e bigint, t bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE l record;
BEGIN
    PERFORM 1 FROM worlds x WHERE x.world = w;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % not found', w USING ERRCODE = 'OR001';
    END IF;
    SELECT x.epoch, x.holder, x.expires_at_ns INTO l FROM leases x WHERE x.world = w FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'epoch %: never leased', e USING ERRCODE = 'OR010';
    ELSIF l.epoch <> e THEN
        RAISE EXCEPTION 'epoch %: lease is at epoch %', e, l.epoch USING ERRCODE = 'OR010';
    ELSIF l.holder = '' THEN
        RAISE EXCEPTION 'epoch %: lease released', e USING ERRCODE = 'OR010';
    ELSIF l.expires_at_ns <= t THEN
        RAISE EXCEPTION 'epoch %: lease expired', e USING ERRCODE = 'OR010';
    END IF;
END $$;

-- Protocol C: fenced; an intent hash ever published (until its dedupe
-- record is swept) is skipped. Queue order is the input order.
CREATE OR REPLACE FUNCTION publish_effects(w text, e bigint, hashes text[], kinds text[], params bytea[],
                                origins text[], policies text[], off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer;
BEGIN
    t := now_ns(off);
    PERFORM check_fence(w, e, t);
    INSERT INTO effects (intent_hash, world, kind, params, origin, policy_context_hash, enqueued_at_ns, state)
        SELECT u.h, w, u.k, u.p, u.o, u.c, t, 'pending'
        FROM unnest(hashes, kinds, params, origins, policies) WITH ORDINALITY AS u(h, k, p, o, c, ord)
        ORDER BY u.ord
        ON CONFLICT (intent_hash) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('effects');
    END IF;
    RETURN n;
END $$;

-- Protocol C with each intent's own retry policy (NULL: its kind's). The
-- overload above is the release before's.
CREATE OR REPLACE FUNCTION publish_effects(w text, e bigint, hashes text[], kinds text[], params bytea[],
                                origins text[], policies text[], retries bytea[], off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer;
BEGIN
    t := now_ns(off);
    PERFORM check_fence(w, e, t);
    INSERT INTO effects (intent_hash, world, kind, params, origin, policy_context_hash, enqueued_at_ns, state, retry_policy)
        SELECT u.h, w, u.k, u.p, u.o, u.c, t, 'pending', u.r
        FROM unnest(hashes, kinds, params, origins, policies, retries) WITH ORDINALITY AS u(h, k, p, o, c, r, ord)
        ORDER BY u.ord
        ON CONFLICT (intent_hash) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('effects');
    END IF;
    RETURN n;
END $$;

-- Protocol E's first step: fenced; a hash scheduled already is left as it
-- is. Notifies the timers topic when it inserted.
CREATE OR REPLACE FUNCTION schedule_timer(w text, e bigint, h text, deliver_at bigint, p bytea, off bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    INSERT INTO timers (intent_hash, world, deliver_at_ns, payload, state)
        VALUES (h, w, deliver_at, p, 'due')
        ON CONFLICT (intent_hash) DO NOTHING;
    IF FOUND THEN
        PERFORM notify_topic('timers');
    END IF;
END $$;

-- A timer of w that has not fired (claimed or not) is removed with its
-- dedupe record; an unknown or fired one is OR006 (contract.CancelMissing
-- of a CancelTimer alone; a Commit's cancels skip it).
CREATE OR REPLACE FUNCTION cancel_timer(w text, e bigint, h text, off bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    DELETE FROM timers x WHERE x.intent_hash = h AND x.world = w AND x.state <> 'delivered';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'timer %', h USING ERRCODE = 'OR006';
    END IF;
    PERFORM notify_topic('timers');
END $$;

-- Compaction, the only path that deletes journal events: fenced; removes
-- the events at or below the active snapshot's height (the stream's
-- baseline) minus retain (contract.CompactTo), remembering their keys
-- (compacted_keys), and raises the stream's compaction floor
-- (compacted_to, compacted_at_ns) in the same transaction.
CREATE OR REPLACE FUNCTION compact(w text, e bigint, retain bigint, off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE b bigint; n integer; at bigint;
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    -- The stream's row is locked before the events (the lock order:
    -- streams, then the rest), since the floor is written after them.
    SELECT x.baseline_height INTO b FROM streams x WHERE x.stream = w FOR UPDATE;
    IF b IS NULL OR b <= retain THEN
        RETURN 0;
    END IF;
    PERFORM set_config('orrery.compaction', 'on', true);
    WITH d AS (
        DELETE FROM events v WHERE v.stream = w AND v.run_seq <= b - retain
        RETURNING v.stream, v.idempotency_key, v.event_id, v.run_seq, v.persisted_at_ns, v.event_type,
            coalesce(v.payload_sha256, sha256(coalesce(v.payload, ''::bytea))) AS h
    ), k AS (
        INSERT INTO compacted_keys (stream, idempotency_key, event_id, run_seq, persisted_at_ns, event_type, payload_sha256)
        SELECT * FROM d ON CONFLICT DO NOTHING
    )
    SELECT count(*), max(d.persisted_at_ns) INTO n, at FROM d;
    PERFORM set_config('orrery.compaction', 'off', true);
    UPDATE streams x SET compacted_to = greatest(x.compacted_to, b - retain),
        compacted_at_ns = greatest(x.compacted_at_ns, at)
    WHERE x.stream = w;
    RETURN n;
END $$;

-- A world whose journal starts at a height (seeded, forked) needs its
-- stream empty (head 0, contract.WorldID): it then starts at h. Locks the
-- stream row (after the world's, which the caller inserted).
CREATE OR REPLACE FUNCTION start_stream(w text, h bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE cur bigint;
BEGIN
    LOOP
        SELECT x.head INTO cur FROM streams x WHERE x.stream = w FOR UPDATE;
        IF FOUND THEN
            IF cur > 0 THEN
                RAISE EXCEPTION 'world %: its journal stream already has events', w USING ERRCODE = 'OR004';
            END IF;
            UPDATE streams x SET head = h WHERE x.stream = w;
            RETURN;
        END IF;
        INSERT INTO streams (stream, head) VALUES (w, h) ON CONFLICT (stream) DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
        -- A first append created the row meanwhile: look again.
    END LOOP;
END $$;

-- Every world gets its stream row at creation (start_stream refuses a
-- stream that already has events: ErrWorldExists), holding its baseline.
CREATE OR REPLACE FUNCTION create_world(u text, w text, seeded boolean, h bigint, st bytea, sh text, off bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    t := now_ns(off);
    INSERT INTO worlds (world, universe, status, created_at_ns)
        VALUES (w, u, 'active', t)
        ON CONFLICT (world) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % exists', w USING ERRCODE = 'OR004';
    END IF;
    IF seeded THEN
        PERFORM start_stream(w, h);
        UPDATE streams x SET baseline_height = h WHERE x.stream = w;
        INSERT INTO snapshots (world, height, state, state_hash, created_at_ns) VALUES (w, h, st, sh, t);
    ELSE
        PERFORM start_stream(w, 0);
    END IF;
    RETURN t;
END $$;

-- A fork: a new world whose journal starts at the source's snapshot at
-- height h (one snapshot row, whatever the source's history).
CREATE OR REPLACE FUNCTION fork_world(src text, h bigint, w text, off bigint)
RETURNS TABLE (r_universe text, r_state_hash text, r_created_at_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE u text; s record; t bigint;
BEGIN
    SELECT x.universe INTO u FROM worlds x WHERE x.world = src;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % not found', src USING ERRCODE = 'OR001';
    END IF;
    SELECT n.state, n.state_hash INTO s FROM snapshots n WHERE n.world = src AND n.height = h;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % has no snapshot at height %', src, h USING ERRCODE = 'OR005';
    END IF;
    t := now_ns(off);
    INSERT INTO worlds (world, universe, status, parent_world, parent_snapshot_hash, forked_at_height, created_at_ns)
        VALUES (w, u, 'active', src, s.state_hash, h, t)
        ON CONFLICT (world) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % exists', w USING ERRCODE = 'OR004';
    END IF;
    PERFORM start_stream(w, h);
    UPDATE streams x SET baseline_height = h WHERE x.stream = w;
    INSERT INTO snapshots (world, height, state, state_hash, created_at_ns) VALUES (w, h, s.state, s.state_hash, t);
    RETURN QUERY SELECT u, s.state_hash::text, t;
END $$;

-- The dedupe sweep: completed effects and delivered timers whose
-- completion is older than the retention and whose receipt the world has
-- drained (contract.Sweepable), fabric deliveries older than it, and the
-- inbox's dedupe keys, retired drain by drain (inbox_drains).
CREATE OR REPLACE FUNCTION sweep_dedupe(retention bigint, off bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer; total integer := 0;
BEGIN
    t := now_ns(off) - retention;
    DELETE FROM effects x USING streams s
        WHERE x.state = 'done' AND x.completed_at_ns <= t
          AND s.stream = x.world AND s.inbox_cursor >= x.inbox_seq;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    DELETE FROM timers x USING streams s
        WHERE x.state = 'delivered' AND x.completed_at_ns <= t
          AND s.stream = x.world AND s.inbox_cursor >= x.inbox_seq;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    DELETE FROM fabric_dedupe x WHERE x.delivered_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    WITH old AS (
        DELETE FROM inbox_drains d WHERE d.drained_at_ns <= t RETURNING d.world, d.lo, d.hi)
    UPDATE inbox x SET key_live = false
        FROM old
        WHERE x.world = old.world AND x.seq > old.lo AND x.seq <= old.hi AND x.key_live;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    RETURN total;
END $$;

-- Protocol B for a batch: each lease row is locked in world order and
-- renewed when contract.Holder, which it mirrors, lets it; it returns, per
-- ref (ord), the rows it read and whether it wrote, for the caller to
-- decide again.
CREATE OR REPLACE FUNCTION renew_leases(worker text, ws text[], es bigint[], ttl bigint, off bigint)
RETURNS TABLE (r_ord bigint, r_found boolean, r_leased boolean, r_holder text, r_epoch bigint,
               r_expires_at_ns bigint, r_now bigint, r_done boolean, r_incarnation text)
LANGUAGE plpgsql AS $$
DECLARE t bigint; dw text[]; de bigint[]; dx bigint[]; dord bigint[]; di text[];
BEGIN
    t := now_ns(off);
    PERFORM 1 FROM leases x WHERE x.world = ANY(ws) ORDER BY x.world FOR UPDATE;
    WITH upd AS (
        UPDATE leases x SET expires_at_ns = t + ttl
        FROM unnest(ws, es) WITH ORDINALITY AS u(w, e, ord)
        WHERE x.world = u.w AND x.holder = worker AND x.holder <> '' AND x.expires_at_ns > t AND x.epoch = u.e
        RETURNING x.world, x.epoch, x.expires_at_ns, u.ord, x.incarnation)
    SELECT coalesce(array_agg(upd.world), '{}'), coalesce(array_agg(upd.epoch), '{}'),
           coalesce(array_agg(upd.expires_at_ns), '{}'), coalesce(array_agg(upd.ord), '{}'),
           coalesce(array_agg(upd.incarnation), '{}')
        INTO dw, de, dx, dord, di FROM upd;
    IF cardinality(dw) = cardinality(ws) THEN
        -- One row per ref (world ids are unique): each ord is its ref's.
        RETURN QUERY SELECT d.ord, true, true, worker, d.e, d.x, t, true, d.i
            FROM unnest(dord, de, dx, di) AS d(ord, e, x, i);
        RETURN;
    END IF;
    PERFORM 1 FROM leases x JOIN unnest(ws) AS u(w) ON x.world = u.w
        WHERE x.world NOT IN (SELECT unnest(dw))
        ORDER BY x.world FOR UPDATE OF x;
    WITH upd AS (
        UPDATE leases x SET expires_at_ns = t + ttl
        FROM unnest(ws, es) AS u(w, e)
        WHERE x.world = u.w AND x.holder = worker AND x.holder <> '' AND x.expires_at_ns > t AND x.epoch = u.e
          AND x.world NOT IN (SELECT unnest(dw))
        RETURNING x.world, x.epoch)
    SELECT dw || coalesce(array_agg(upd.world), '{}'), de || coalesce(array_agg(upd.epoch), '{}')
        INTO dw, de FROM upd;
    RETURN QUERY
    SELECT u.ord, CASE WHEN l.world IS NULL THEN EXISTS (SELECT 1 FROM worlds y WHERE y.world = u.w) ELSE true END,
        l.world IS NOT NULL, coalesce(l.holder, ''), coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0), t,
        (u.w, u.e) IN (SELECT * FROM unnest(dw, de)), coalesce(l.incarnation, '')
    FROM unnest(ws, es) WITH ORDINALITY AS u(w, e, ord)
    LEFT JOIN leases l ON l.world = u.w;
END $$;

-- Releases for a batch, as renew_leases renews (contract.ReleaseCheck):
-- holder cleared, epoch kept, expiry now if later.
CREATE OR REPLACE FUNCTION release_leases(worker text, ws text[], es bigint[], off bigint)
RETURNS TABLE (r_ord bigint, r_found boolean, r_leased boolean, r_holder text, r_epoch bigint,
               r_expires_at_ns bigint, r_now bigint, r_done boolean)
LANGUAGE plpgsql AS $$
DECLARE t bigint; dw text[]; de bigint[]; dx bigint[]; dord bigint[];
BEGIN
    t := now_ns(off);
    PERFORM 1 FROM leases x WHERE x.world = ANY(ws) ORDER BY x.world FOR UPDATE;
    WITH upd AS (
        UPDATE leases x SET holder = '', expires_at_ns = least(x.expires_at_ns, t)
        FROM unnest(ws, es) WITH ORDINALITY AS u(w, e, ord)
        WHERE x.world = u.w AND x.holder = worker AND x.holder <> '' AND x.epoch = u.e
        RETURNING x.world, x.epoch, x.expires_at_ns, u.ord)
    SELECT coalesce(array_agg(upd.world), '{}'), coalesce(array_agg(upd.epoch), '{}'),
           coalesce(array_agg(upd.expires_at_ns), '{}'), coalesce(array_agg(upd.ord), '{}')
        INTO dw, de, dx, dord FROM upd;
    IF cardinality(dw) > 0 THEN
        PERFORM notify_topic('leases');
    END IF;
    IF cardinality(dw) = cardinality(ws) THEN
        RETURN QUERY SELECT d.ord, true, true, worker, d.e, d.x, t, true
            FROM unnest(dord, de, dx) AS d(ord, e, x);
        RETURN;
    END IF;
    PERFORM 1 FROM leases x JOIN unnest(ws) AS u(w) ON x.world = u.w
        WHERE x.world NOT IN (SELECT unnest(dw))
        ORDER BY x.world FOR UPDATE OF x;
    WITH upd AS (
        UPDATE leases x SET holder = '', expires_at_ns = least(x.expires_at_ns, t)
        FROM unnest(ws, es) AS u(w, e)
        WHERE x.world = u.w AND x.holder = worker AND x.holder <> '' AND x.epoch = u.e
          AND x.world NOT IN (SELECT unnest(dw))
        RETURNING x.world, x.epoch)
    SELECT dw || coalesce(array_agg(upd.world), '{}'), de || coalesce(array_agg(upd.epoch), '{}')
        INTO dw, de FROM upd;
    IF cardinality(dw) > 0 THEN
        PERFORM notify_topic('leases');
    END IF;
    RETURN QUERY
    SELECT u.ord, CASE WHEN l.world IS NULL THEN EXISTS (SELECT 1 FROM worlds y WHERE y.world = u.w) ELSE true END,
        l.world IS NOT NULL, CASE WHEN d.done THEN worker ELSE coalesce(l.holder, '') END,
        coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0), t, d.done
    FROM unnest(ws, es) WITH ORDINALITY AS u(w, e, ord)
    LEFT JOIN leases l ON l.world = u.w,
    LATERAL (SELECT (u.w, u.e) IN (SELECT * FROM unnest(dw, de)) AS done) AS d;
END $$;

-- A worker's heartbeat: its row inserted or refreshed at the store's clock.
CREATE OR REPLACE FUNCTION heartbeat(wk text, cap bigint, off bigint)
RETURNS TABLE (r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    t := now_ns(off);
    PERFORM notify_topic('workers');
    RETURN QUERY INSERT INTO workers AS x (worker, capacity, heartbeat_at_ns, started_at_ns)
        VALUES (wk, cap, t, t)
        ON CONFLICT (worker) DO UPDATE SET capacity = EXCLUDED.capacity, heartbeat_at_ns = EXCLUDED.heartbeat_at_ns
        RETURNING x.capacity, x.draining, x.heartbeat_at_ns, x.started_at_ns;
END $$;

-- Whether the store knows worker wk's incarnation inc dead at t (its clock):
-- retired (retire_worker, or superseded by another incarnation's
-- heartbeat), or named by its worker's row whose promise ran out.
CREATE OR REPLACE FUNCTION incarnation_dead(wk text, inc text, t bigint) RETURNS boolean
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
CREATE OR REPLACE FUNCTION requeue_orphans(t bigint)
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
-- the recorded one, which is retired and its claims requeued. adv: caps
-- replaces the recorded capabilities (otherwise they are kept). The worker
-- row is locked first, as a claim for the worker locks it (FOR SHARE), so
-- that a claim never slips past a retirement.
CREATE OR REPLACE FUNCTION heartbeat_as(wk text, cap bigint, promised boolean, inc text, ttl bigint, off bigint,
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

-- The heartbeat of the release before's binaries (no capabilities: it
-- keeps the recorded list), answering the columns they read.
CREATE OR REPLACE FUNCTION heartbeat_as(wk text, cap bigint, promised boolean, inc text, ttl bigint, off bigint)
RETURNS TABLE (r_fenced boolean, r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint,
               r_incarnation text, r_alive_until_ns bigint)
LANGUAGE sql AS $$
    SELECT h.r_fenced, h.r_capacity, h.r_draining, h.r_heartbeat_at_ns, h.r_started_at_ns, h.r_incarnation, h.r_alive_until_ns
    FROM heartbeat_as(wk, cap, promised, inc, ttl, off, false, '{}'::text[]) h;
$$;

-- A planned stop: worker wk's incarnation inc retired for good, its row
-- (if it names inc) dead at t, its claims requeued; again: a no-op.
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

-- Marks a worker draining (or not), answering its record; no row when it
-- never sent a heartbeat.
CREATE OR REPLACE FUNCTION set_worker_draining(wk text, d boolean)
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

-- set_worker_draining answering the columns the release before's binaries
-- read.
CREATE OR REPLACE FUNCTION set_draining(wk text, d boolean)
RETURNS TABLE (r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint)
LANGUAGE sql AS $$
    SELECT s.r_capacity, s.r_draining, s.r_heartbeat_at_ns, s.r_started_at_ns FROM set_worker_draining(wk, d) s;
$$;

-- guard_batch asserts, in the schema's lock order (worlds, leases,
-- streams), what a speculative batch was decided on, and moves the heads
-- and cursors it decided; it raises (rolling the batch back, to be decided
-- again by the checked path) when a guess is wrong:
--   - status_ws: locked FOR UPDATE, each exists and is active;
--   - fence_ws/fence_es: each lease row locked (FOR UPDATE when exclusive,
--     else FOR SHARE) and the fence holds at the store's clock (as
--     check_fence, contract.Fence);
--   - ss: each stream locked and its head moved from olds to news, and
--     where oldc is not NULL its cursor from oldc to newc, bound not passing
--     the world's last enqueued seq;
--   - key_ss/key_ks: no key among them is compacted (the keys decided new
--     for their streams).
CREATE OR REPLACE FUNCTION guard_batch(status_ws text[], fence_ws text[], fence_es bigint[], exclusive boolean,
                            ss text[], olds bigint[], news bigint[], oldc bigint[], newc bigint[], bound bigint[],
                            key_ss text[], key_ks text[], off bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE n bigint; t bigint; bad record;
BEGIN
    IF coalesce(cardinality(status_ws), 0) > 0 THEN
        PERFORM 1 FROM worlds x WHERE x.world = ANY(status_ws) ORDER BY x.world FOR UPDATE;
        SELECT count(*) INTO n FROM worlds x WHERE x.world = ANY(status_ws) AND x.status = 'active';
        IF n <> cardinality(status_ws) THEN
            RAISE EXCEPTION 'a world is not active' USING ERRCODE = 'OR040';
        END IF;
    END IF;
    IF coalesce(cardinality(fence_ws), 0) > 0 THEN
        IF exclusive THEN
            PERFORM 1 FROM leases x WHERE x.world = ANY(fence_ws) ORDER BY x.world FOR UPDATE;
        ELSE
            PERFORM 1 FROM leases x WHERE x.world = ANY(fence_ws) ORDER BY x.world FOR SHARE;
        END IF;
        t := now_ns(off);
        SELECT u.w, u.e INTO bad
            FROM unnest(fence_ws, fence_es) AS u(w, e) LEFT JOIN leases l ON l.world = u.w
            WHERE l.world IS NULL OR l.epoch <> u.e OR l.holder = '' OR l.expires_at_ns <= t
            LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'fence of world % at epoch % fails', bad.w, bad.e USING ERRCODE = 'OR010';
        END IF;
    END IF;
    PERFORM 1 FROM streams x WHERE x.stream = ANY(ss) ORDER BY x.stream FOR UPDATE;
    UPDATE streams x SET head = u.h, inbox_cursor = coalesce(u.nc, x.inbox_cursor)
        FROM unnest(ss, olds, news, oldc, newc) AS u(s, old, h, oc, nc)
        WHERE x.stream = u.s AND x.head = u.old AND (u.oc IS NULL OR x.inbox_cursor = u.oc);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> coalesce(cardinality(ss), 0) THEN
        RAISE EXCEPTION 'stream heads or cursors moved' USING ERRCODE = 'OR021';
    END IF;
    IF bound IS NOT NULL THEN
        PERFORM 1 FROM unnest(ss, bound) AS u(s, b) LEFT JOIN worlds w ON w.world = u.s
            WHERE u.b IS NOT NULL AND (w.world IS NULL OR w.inbox_seq < u.b);
        IF FOUND THEN
            RAISE EXCEPTION 'a cursor passes its world''s last seq' USING ERRCODE = 'OR040';
        END IF;
    END IF;
    IF coalesce(cardinality(key_ss), 0) > 0 THEN
        PERFORM 1 FROM unnest(key_ss, key_ks) AS k(s, key)
            JOIN compacted_keys c ON c.stream = k.s AND c.idempotency_key = k.key;
        IF FOUND THEN
            RAISE EXCEPTION 'a key was compacted' USING ERRCODE = 'OR040';
        END IF;
    END IF;
END $$;

-- Spawn in one call: the world (create_world), its first inbox items at
-- seqs 1..n, its stream started at head h, and, with a worker, its first
-- lease (epoch 1). It answers the creation time and the rows an acquire
-- would have read, for the caller to decide again with contract.Acquire.
CREATE OR REPLACE FUNCTION spawn_world(u text, w text, worker text, ttl bigint, h bigint,
                            kinds text[], payloads bytea[], keys text[], off bigint, inc text)
RETURNS TABLE (r_created bigint, r_found boolean, r_status text, r_assigned boolean, r_desired text,
               r_leased boolean, r_holder text, r_epoch bigint, r_expires_at_ns bigint,
               r_now bigint, r_written boolean)
LANGUAGE plpgsql AS $$
DECLARE t bigint; n bigint;
BEGIN
    t := now_ns(off);
    n := coalesce(cardinality(kinds), 0);
    INSERT INTO worlds (world, universe, status, created_at_ns, inbox_seq)
        VALUES (w, u, 'active', t, n)
        ON CONFLICT (world) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % exists', w USING ERRCODE = 'OR004';
    END IF;
    IF n > 0 THEN
        INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at_ns, key_live)
            SELECT w, i.ord, i.k, i.p, NULLIF(i.key, ''), t, i.key <> ''
            FROM unnest(kinds, payloads, keys) WITH ORDINALITY AS i(k, p, key, ord);
        PERFORM notify_topic('inbox:' || w);
    END IF;
    PERFORM start_stream(w, h);
    IF worker = '' THEN
        RETURN QUERY SELECT t, true, 'active'::text, false, ''::text, false, ''::text, 0::bigint, 0::bigint, t, false;
        RETURN;
    END IF;
    INSERT INTO leases (world, holder, incarnation, epoch, expires_at_ns) VALUES (w, worker, inc, 1, t + ttl)
        ON CONFLICT (world) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'spawn of world %: it has a lease row already', w USING ERRCODE = 'OR050';
    END IF;
    PERFORM notify_topic('leases');
    RETURN QUERY SELECT t, true, 'active'::text, false, ''::text, false, ''::text, 0::bigint, 0::bigint, t, true;
END $$;

-- enqueue_one is a delivery batch of one Enqueue in one call, the common
-- case of an idle store (a busier one groups its deliveries and takes the
-- batch path). It locks the world's row as the batch path does (FOR NO KEY
-- UPDATE), refuses what contract.Ingress refuses (no world, an archived
-- one), answers a live dedupe key's seq, and otherwise writes the item at
-- the next seq as a delivery writes it (the counter moved, the inbox's
-- watchers notified). It returns what it read and whether it wrote, for
-- the caller to decide again with contract.Ingress.
CREATE OR REPLACE FUNCTION enqueue_one(w text, k text, p bytea, key text, off bigint)
RETURNS TABLE (r_found boolean, r_status text, r_seq bigint, r_dup boolean, r_written boolean)
LANGUAGE plpgsql AS $$
DECLARE st text; s bigint; d bigint; t bigint;
BEGIN
    SELECT x.status, x.inbox_seq INTO st, s FROM worlds x WHERE x.world = w FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, ''::text, 0::bigint, false, false;
        RETURN;
    END IF;
    IF st = 'archived' THEN
        RETURN QUERY SELECT true, st, 0::bigint, false, false;
        RETURN;
    END IF;
    IF key <> '' THEN
        SELECT i.seq INTO d FROM inbox i WHERE i.world = w AND i.dedupe_key = key AND i.key_live;
        IF FOUND THEN
            RETURN QUERY SELECT true, st, d, true, false;
            RETURN;
        END IF;
    END IF;
    t := now_ns(off);
    s := s + 1;
    INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at_ns, key_live)
        VALUES (w, s, k, p, NULLIF(key, ''), t, key <> '');
    UPDATE worlds x SET inbox_seq = s WHERE x.world = w;
    PERFORM notify_topic('inbox:' || w);
    RETURN QUERY SELECT true, st, s, false, true;
END $$;

-- fire_held locks, in the schema's lock order, the row of world w
-- (FOR NO KEY UPDATE, as every inbox delivery does, so that inbox seqs
-- commit in seq order), its lease row (FOR SHARE, as every fenced write
-- does) and the row of timer h (FOR UPDATE, as a Fire locks it), and reads
-- the clock after those waits. It fires when contract.Fence and
-- contract.Settle for the lease holder (contract.LeaseHolder), which it
-- mirrors, would both let it: the lease is held at epoch e and unexpired,
-- and the timer is w's, not delivered, and due. Firing is Fire's delivery
-- (deliver.go): the item of kind 'timer' under key 'timer:' || h with the
-- timer's payload at the world's next seq, unless that key is live in the
-- inbox already (then that item answers, r_dup), the world's counter, and
-- the timer delivered with its inbox seq. It returns what it read and
-- whether it wrote; the caller decides again on those rows and refuses an
-- answer on which the two disagree. Notifies the world's inbox topic when
-- it enqueued.
CREATE OR REPLACE FUNCTION fire_held(w text, e bigint, h text, off bigint)
RETURNS TABLE (r_found boolean, r_leased boolean, r_holder text, r_epoch bigint, r_expires_at_ns bigint,
               r_timer_found boolean, r_timer_world text, r_state text, r_deliver_at_ns bigint,
               r_attempts integer, r_claimed_by text, r_inbox_seq bigint, r_payload bytea,
               r_now bigint, r_written boolean, r_dup boolean)
LANGUAGE plpgsql AS $$
DECLARE last bigint; l record; x record; leased boolean; found_timer boolean; t bigint; s bigint;
        dup boolean := false;
BEGIN
    SELECT y.inbox_seq INTO last FROM worlds y WHERE y.world = w FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, false, ''::text, 0::bigint, 0::bigint, false, ''::text, ''::text, 0::bigint,
            0, ''::text, 0::bigint, NULL::bytea, now_ns(off), false, false;
        RETURN;
    END IF;
    SELECT y.holder, y.epoch, y.expires_at_ns INTO l FROM leases y WHERE y.world = w FOR SHARE;
    leased := FOUND;
    SELECT y.world, y.state, y.deliver_at_ns, y.attempts, y.claimed_by, y.inbox_seq, y.payload INTO x
        FROM timers y WHERE y.intent_hash = h FOR UPDATE;
    found_timer := FOUND;
    t := now_ns(off); -- read after the lock waits
    IF NOT (leased AND l.epoch = e AND l.holder <> '' AND l.expires_at_ns > t
            AND found_timer AND x.world = w AND x.state <> 'delivered' AND x.deliver_at_ns <= t) THEN
        RETURN QUERY SELECT true, leased, coalesce(l.holder, ''), coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0),
            found_timer, coalesce(x.world, ''), coalesce(x.state, ''), coalesce(x.deliver_at_ns, 0),
            coalesce(x.attempts, 0), coalesce(x.claimed_by, ''), coalesce(x.inbox_seq, 0), NULL::bytea, t, false, false;
        RETURN;
    END IF;
    SELECT i.seq INTO s FROM inbox i WHERE i.world = w AND i.dedupe_key = 'timer:' || h AND i.key_live;
    IF FOUND THEN
        dup := true;
    ELSE
        s := last + 1;
        INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at_ns, key_live)
            VALUES (w, s, 'timer', x.payload, 'timer:' || h, t, true);
        UPDATE worlds y SET inbox_seq = s WHERE y.world = w;
        PERFORM notify_topic('inbox:' || w);
    END IF;
    UPDATE timers y SET state = 'delivered', inbox_seq = s, completed_at_ns = t, claim_expires_ns = NULL
        WHERE y.intent_hash = h;
    RETURN QUERY SELECT true, leased, l.holder, l.epoch, l.expires_at_ns, true, x.world, x.state, x.deliver_at_ns,
        x.attempts, x.claimed_by, s, x.payload, t, true, dup;
END $$;

-- Protocol A for one world, as contract.Acquire decides it. This binary
-- never calls it (the store's front answers Acquire as a batch of one,
-- acquire_leases); it stays for the binaries of the release before, which
-- call it and may still run beside this one during a rolling upgrade. A
-- function leaves the schema only a release after the last binary that
-- calls it.
CREATE OR REPLACE FUNCTION acquire(w text, worker text, inc text, ttl bigint, off bigint)
RETURNS TABLE (r_found boolean, r_status text, r_assigned boolean, r_desired text,
               r_leased boolean, r_holder text, r_epoch bigint, r_expires_at_ns bigint,
               r_now bigint, r_written boolean, r_incarnation text, r_took_over boolean, r_displaced text)
LANGUAGE plpgsql AS $$
DECLARE st text; want text; assigned boolean; l record; leased boolean; t bigint; live boolean;
BEGIN
    SELECT x.status INTO st FROM worlds x WHERE x.world = w FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, ''::text, false, ''::text, false, ''::text, 0::bigint, 0::bigint, 0::bigint, false,
            ''::text, false, ''::text;
        RETURN;
    END IF;
    SELECT a.desired_worker INTO want FROM assignments a WHERE a.world = w;
    assigned := FOUND;
    LOOP
        SELECT x.holder, x.epoch, x.expires_at_ns, x.incarnation, x.took_over, x.displaced INTO l
            FROM leases x WHERE x.world = w FOR UPDATE;
        leased := FOUND;
        t := now_ns(off); -- read after the lock wait
        live := leased AND l.holder <> '' AND l.expires_at_ns > t;
        IF st <> 'active' OR (assigned AND want <> '' AND want <> worker)
           OR (live AND (l.holder <> worker OR l.incarnation = inc OR (l.took_over AND l.displaced = inc))) THEN
            RETURN QUERY SELECT true, st, assigned, coalesce(want, ''), leased,
                coalesce(l.holder, ''), coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0), t, false,
                coalesce(l.incarnation, ''), coalesce(l.took_over, false), coalesce(l.displaced, '');
            RETURN;
        END IF;
        IF leased THEN
            UPDATE leases x SET holder = worker, incarnation = inc,
                took_over = (x.holder = worker AND x.incarnation <> inc),
                displaced = CASE WHEN x.holder = worker AND x.incarnation <> inc THEN x.incarnation ELSE '' END,
                epoch = x.epoch + 1, expires_at_ns = t + ttl
                WHERE x.world = w;
            EXIT;
        END IF;
        INSERT INTO leases (world, holder, incarnation, epoch, expires_at_ns) VALUES (w, worker, inc, 1, t + ttl)
            ON CONFLICT (world) DO NOTHING;
        IF FOUND THEN
            EXIT;
        END IF;
        -- Another acquirer created the row meanwhile: lock it and look again.
    END LOOP;
    PERFORM notify_topic('leases');
    RETURN QUERY SELECT true, st, assigned, coalesce(want, ''), leased,
        coalesce(l.holder, ''), coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0), t, true,
        coalesce(l.incarnation, ''), coalesce(l.took_over, false), coalesce(l.displaced, '');
END $$;

-- Protocol A for a batch: each distinct world's rows locked in world
-- order, the lease taken when contract.Acquire, which it mirrors, lets it;
-- it returns per world the rows it read, whether it wrote, the world's
-- universe, whether its inbox has a backlog and its earliest timer.
CREATE OR REPLACE FUNCTION acquire_leases(worker text, inc text, ws text[], ttl bigint, off bigint)
RETURNS SETOF acquired_lease
LANGUAGE plpgsql AS $$
DECLARE todo text[]; t bigint; got acquired_lease[]; acc acquired_lease[] := '{}';
BEGIN
    todo := ARRAY(SELECT DISTINCT u.w FROM unnest(ws) AS u(w) ORDER BY u.w);
    PERFORM 1 FROM worlds x WHERE x.world = ANY(todo) ORDER BY x.world FOR KEY SHARE;
    WHILE cardinality(todo) > 0 LOOP
        PERFORM 1 FROM leases x WHERE x.world = ANY(todo) ORDER BY x.world FOR UPDATE;
        t := now_ns(off); -- read after the lock waits
        WITH pre AS (
            SELECT y.world AS w, y.status AS st, y.universe AS uni,
                a.world IS NOT NULL AS asg, coalesce(a.desired_worker, '') AS des,
                l.world IS NOT NULL AS lsd, coalesce(l.holder, '') AS hol,
                coalesce(l.epoch, 0) AS ep, coalesce(l.expires_at_ns, 0) AS ex,
                y.inbox_seq > coalesce(s.inbox_cursor, 0) AS bl,
                (SELECT min(tm.deliver_at_ns) FROM timers tm
                    WHERE tm.world = y.world AND tm.state <> 'delivered') AS nt,
                coalesce(l.incarnation, '') AS inc0, coalesce(l.took_over, false) AS tko,
                coalesce(l.displaced, '') AS dis,
                l.world IS NOT NULL AND l.holder <> '' AND l.expires_at_ns > t AS live
            FROM worlds y
            LEFT JOIN assignments a ON a.world = y.world
            LEFT JOIN leases l ON l.world = y.world
            LEFT JOIN streams s ON s.stream = y.world
            WHERE y.world = ANY(todo)),
        take AS (
            SELECT pre.w, pre.lsd, pre.hol, pre.inc0 FROM pre
            WHERE pre.st = 'active' AND NOT (pre.asg AND pre.des <> '' AND pre.des <> worker)
              AND NOT (pre.live AND (pre.hol <> worker OR pre.inc0 = inc OR (pre.tko AND pre.dis = inc)))),
        upd AS (
            UPDATE leases x SET holder = worker, incarnation = inc,
                took_over = (take.hol = worker AND take.inc0 <> inc),
                displaced = CASE WHEN take.hol = worker AND take.inc0 <> inc THEN take.inc0 ELSE '' END,
                epoch = x.epoch + 1, expires_at_ns = t + ttl
            FROM take WHERE take.lsd AND x.world = take.w
            RETURNING x.world),
        ins AS (
            INSERT INTO leases (world, holder, incarnation, epoch, expires_at_ns)
            SELECT take.w, worker, inc, 1, t + ttl FROM take WHERE NOT take.lsd ORDER BY take.w
            ON CONFLICT (world) DO NOTHING
            RETURNING world),
        lost AS (
            SELECT take.w FROM take WHERE NOT take.lsd AND take.w NOT IN (SELECT ins.world FROM ins))
        SELECT
            coalesce(array_agg(ROW(pre.w, pre.st, pre.uni, pre.asg, pre.des, pre.lsd, pre.hol, pre.ep, pre.ex, t,
                    pre.w IN (SELECT upd.world FROM upd) OR pre.w IN (SELECT ins.world FROM ins), pre.bl, pre.nt,
                    pre.inc0, pre.tko, pre.dis)::acquired_lease)
                FILTER (WHERE pre.w NOT IN (SELECT lost.w FROM lost)), '{}'),
            coalesce((SELECT array_agg(lost.w ORDER BY lost.w) FROM lost), '{}')
        INTO got, todo FROM pre;
        acc := acc || got;
    END LOOP;
    IF EXISTS (SELECT 1 FROM unnest(acc) AS g WHERE g.written) THEN
        PERFORM notify_topic('leases');
    END IF;
    RETURN QUERY SELECT * FROM unnest(acc);
END $$;

-- guard_end asserts what guard_batch asserts of a speculative batch of one
-- Commit ending world w's lease, and writes its status change, in the
-- schema's lock order (the world's row, the lease's, the stream's); it
-- raises (rolling the batch back, to be decided again by the checked path)
-- when a guess is wrong:
--   - the world is active (its status moves to st, with reason) and its
--     last enqueued seq is at least bound;
--   - the fence at epoch e holds at the store's clock (the lease then
--     ends: released, epoch kept, expiry now if later);
--   - the stream's head moves from old_h to new_h and its cursor from
--     old_c to new_c;
--   - no key among key_ks (the keys decided new) is compacted.
CREATE OR REPLACE FUNCTION guard_end(w text, e bigint, old_h bigint, new_h bigint, old_c bigint, new_c bigint, bound bigint,
                          key_ks text[], st text, reason text, off bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE t bigint; s bigint;
BEGIN
    -- FOR UPDATE, as the checked path locks it: an Acquire (FOR KEY
    -- SHARE) waits for this transaction, then finds the new status. The
    -- update alone would take FOR NO KEY UPDATE, which lets it through.
    SELECT x.inbox_seq INTO s FROM worlds x WHERE x.world = w AND x.status = 'active' FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % is not active', w USING ERRCODE = 'OR040';
    END IF;
    IF s < bound THEN
        RAISE EXCEPTION 'a cursor passes its world''s last seq' USING ERRCODE = 'OR040';
    END IF;
    t := now_ns(off);
    UPDATE worlds x SET status = st, status_reason = reason, status_changed_at_ns = t WHERE x.world = w;
    UPDATE leases l SET holder = '', expires_at_ns = least(l.expires_at_ns, t)
        WHERE l.world = w AND l.epoch = e AND l.holder <> '' AND l.expires_at_ns > t;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fence of world % at epoch % fails', w, e USING ERRCODE = 'OR010';
    END IF;
    UPDATE streams x SET head = new_h, inbox_cursor = new_c
        WHERE x.stream = w AND x.head = old_h AND x.inbox_cursor = old_c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream heads or cursors moved' USING ERRCODE = 'OR021';
    END IF;
    IF coalesce(cardinality(key_ks), 0) > 0 THEN
        PERFORM 1 FROM compacted_keys c WHERE c.stream = w AND c.idempotency_key = ANY(key_ks);
        IF FOUND THEN
            RAISE EXCEPTION 'a key was compacted' USING ERRCODE = 'OR040';
        END IF;
    END IF;
END $$;

-- flush_hints sends the topics notify_topic recorded and forgets them. It
-- never fails for a notification (a hint may be lost), so that the round
-- trip of a committed transaction never reports an error after its
-- COMMIT.
CREATE OR REPLACE FUNCTION flush_hints() RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE h text := current_setting('orrery.hints', true);
BEGIN
    IF h IS NULL OR h = '' THEN
        RETURN;
    END IF;
    PERFORM set_config('orrery.hints', '', false);
    BEGIN
        PERFORM pg_notify('orrery.' || current_schema(), t)
        FROM unnest(string_to_array(rtrim(h, E'\x1f'), E'\x1f')) AS t;
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
END $$;
