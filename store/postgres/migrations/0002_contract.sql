-- Orrery's persistence plane on PostgreSQL, version 2: the contract of
-- issue 7 (operator world statuses, claims that outlive reaps, operator
-- retries, conflict detection of duplicate keys, bulk lease calls, the
-- worker inventory, claims by kind).
--
-- Custom SQLSTATEs from this version on, raised or returned as codes
-- (errors.go maps them):
--   OR001 world not found     OR002 world paused       OR003 world archived
--   OR004 world exists        OR005 snapshot not found OR006 not found
--   OR007 snapshot conflict
--   OR010 fenced (epoch)      OR011 lease held         OR012 not holder
--   OR013 stale epoch         OR014 not assigned
--   OR015 claim lost          OR016 timer not due      OR017 not retryable
--   OR020 cursor mismatch     OR021 head mismatch      OR030 watermark conflict
--   OR040 invalid argument    OR100 journal is immutable
-- (OR002 meant "world fenced" in version 1; that status no longer exists.)
--
-- Lock order, replacing version 1's, which every transaction follows so
-- that none deadlocks: worlds, then leases, then streams, then the rest
-- (effects, then timers, then inbox, events and snapshot rows); several
-- rows of one table are locked in key order. Only lease acquisitions,
-- status changes and inbox deliveries lock a world's row; fenced writes
-- lock its lease row (FOR SHARE) and its stream row, never its world row:
-- that is why the active baseline moves from worlds to streams.
--
-- Decisions of the contract (store/internal/contract) are made in Go on
-- rows read under lock wherever that costs no round trip. Where a
-- one-round-trip path must decide in SQL, the function says which contract
-- function it mirrors, and the Go caller decides again on the rows the
-- function returns and refuses an answer on which the two disagree.

-- ---- worlds: operator statuses ----

ALTER TABLE worlds DROP CONSTRAINT worlds_status_check;
ALTER TABLE worlds
    ADD COLUMN status_reason        text NOT NULL DEFAULT '',
    ADD COLUMN status_changed_at_ns bigint NOT NULL DEFAULT -9223372036854775808;
-- "fenced" was a one-way trap; an operator resumes a paused world.
UPDATE worlds SET status = 'paused', status_reason = 'was fenced (schema version 1)',
    status_changed_at_ns = now_ns(0)
    WHERE status = 'fenced';
ALTER TABLE worlds ADD CONSTRAINT worlds_status_check CHECK (status IN ('active', 'paused', 'archived'));
-- Version 1 changed a status under the holder's own epoch and kept its
-- lease; from now on a world that is not active has no holder (its writers
-- are fenced), as SetWorldStatus leaves it: released, epoch kept, expiry
-- now if later.
UPDATE leases l SET holder = '', expires_at_ns = least(l.expires_at_ns, now_ns(0))
    FROM worlds w WHERE w.world = l.world AND w.status <> 'active' AND l.holder <> '';

-- ---- streams: the baseline, and one row per world ----

ALTER TABLE streams ADD COLUMN baseline_height bigint; -- NULL before the first snapshot
UPDATE streams s SET baseline_height = w.baseline_height
    FROM worlds w WHERE w.world = s.stream AND w.baseline_height IS NOT NULL;
-- Every world has its stream row from now on (CreateWorld makes it), so a
-- world is never created over a free stream's events unnoticed.
INSERT INTO streams (stream) SELECT w.world FROM worlds w ORDER BY w.world ON CONFLICT (stream) DO NOTHING;
ALTER TABLE worlds DROP COLUMN baseline_height;

-- ---- the journal: what a duplicate key is compared against ----

-- SHA-256 of the payload (of the empty payload for a nil one), written by
-- the appender; NULL on rows of version 1, whose hash readers compute.
ALTER TABLE events ADD COLUMN payload_sha256 bytea;
-- Compaction keeps the event type and payload hash with the key, so a
-- conflicting re-append is still told apart (NULL on rows compacted by
-- version 1: no comparison is possible there).
ALTER TABLE compacted_keys ADD COLUMN event_type text, ADD COLUMN payload_sha256 bytea;

-- ---- leases ----

-- Renewals rewrite only expires_at_ns, which no index holds: with room on
-- the page for a new version of each of its rows (a worker renews all its
-- leases at once) they are HOT updates, which touch no index.
ALTER TABLE leases SET (fillfactor = 50);

DROP FUNCTION acquire_lease(text, text, bigint, bigint);
DROP FUNCTION renew_lease(text, text, bigint, bigint, bigint);
DROP FUNCTION release_lease(text, text, bigint, bigint);
DROP FUNCTION lease_holder_check(text, text, bigint, bigint, boolean);
DROP FUNCTION world_ingress(text);
DROP FUNCTION set_world_status(text, bigint, text, bigint);
DROP FUNCTION put_snapshot(text, bigint, bigint, bytea, text, bigint);

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

-- The speculative append path's fence (see append.go), for world streams
-- only: it locks the lease rows of ws in world order (FOR SHARE) and
-- raises if a fence (ws[i], es[i]) fails contract.Fence, which it mirrors
-- (a lease row exists only for a world that exists). Which one failed, and
-- why, the checked path then finds out.
CREATE OR REPLACE FUNCTION check_fences(ws text[], es bigint[], off bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE t bigint; bad record;
BEGIN
    PERFORM 1 FROM leases x WHERE x.world = ANY(ws) ORDER BY x.world FOR SHARE;
    t := now_ns(off);
    SELECT u.w, u.e INTO bad
        FROM unnest(ws, es) AS u(w, e) LEFT JOIN leases l ON l.world = u.w
        WHERE l.world IS NULL OR l.epoch <> u.e OR l.holder = '' OR l.expires_at_ns <= t
        LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'fence of world % at epoch % fails', bad.w, bad.e USING ERRCODE = 'OR010';
    END IF;
END $$;

-- Protocol A in one round trip. It locks the world's row FOR KEY SHARE (a
-- status change locks it FOR UPDATE: one waits for the other), reads the
-- assignment, locks the lease row, and takes the lease when
-- contract.Acquire would: the world is active, no assignment names another
-- worker, and the lease is absent, released or expired. It returns what it
-- read and whether it wrote; the caller decides again with contract.Acquire
-- on those rows. Notifies 'leases' when it wrote.
CREATE FUNCTION acquire(w text, worker text, ttl bigint, off bigint)
RETURNS TABLE (r_found boolean, r_status text, r_assigned boolean, r_desired text,
               r_leased boolean, r_holder text, r_epoch bigint, r_expires_at_ns bigint,
               r_now bigint, r_written boolean)
LANGUAGE plpgsql AS $$
DECLARE st text; want text; assigned boolean; l record; leased boolean; t bigint;
BEGIN
    SELECT x.status INTO st FROM worlds x WHERE x.world = w FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, ''::text, false, ''::text, false, ''::text, 0::bigint, 0::bigint, 0::bigint, false;
        RETURN;
    END IF;
    SELECT a.desired_worker INTO want FROM assignments a WHERE a.world = w;
    assigned := FOUND;
    LOOP
        SELECT x.holder, x.epoch, x.expires_at_ns INTO l FROM leases x WHERE x.world = w FOR UPDATE;
        leased := FOUND;
        t := now_ns(off); -- read after the lock wait
        IF st <> 'active' OR (assigned AND want <> '' AND want <> worker)
           OR (leased AND l.holder <> '' AND l.expires_at_ns > t) THEN
            RETURN QUERY SELECT true, st, assigned, coalesce(want, ''), leased,
                coalesce(l.holder, ''), coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0), t, false;
            RETURN;
        END IF;
        IF leased THEN
            UPDATE leases x SET holder = worker, epoch = x.epoch + 1, expires_at_ns = t + ttl WHERE x.world = w;
            EXIT;
        END IF;
        INSERT INTO leases (world, holder, epoch, expires_at_ns) VALUES (w, worker, 1, t + ttl)
            ON CONFLICT (world) DO NOTHING;
        IF FOUND THEN
            EXIT;
        END IF;
        -- Another acquirer created the row meanwhile: lock it and look again.
    END LOOP;
    PERFORM notify_topic('leases');
    RETURN QUERY SELECT true, st, assigned, coalesce(want, ''), leased,
        coalesce(l.holder, ''), coalesce(l.epoch, 0), coalesce(l.expires_at_ns, 0), t, true;
END $$;

-- Protocol B for many leases of one worker in one statement (Renew is a
-- call with one ref). One UPDATE renews every lease worker holds,
-- unexpired, at its ref's epoch (contract.Holder's success case, which it
-- mirrors); the UPDATE locks what it renews. When it renewed every ref
-- (the common case) the answer is built from what it returned, with no
-- second pass over the rows. Otherwise the other refs' rows are locked (in
-- world order), the same UPDATE runs again on them (a row may have changed
-- between the first UPDATE's snapshot and its lock), and every ref is
-- answered from its locked row. Each answer row carries the lease as
-- contract.Holder must see it (for a renewed one: held by worker at its
-- epoch, expiring at t + ttl) and whether this call renewed it; the caller
-- decides each ref with contract.Holder and checks that both agree.
CREATE FUNCTION renew_leases(worker text, ws text[], es bigint[], ttl bigint, off bigint)
RETURNS TABLE (r_ord bigint, r_found boolean, r_leased boolean, r_holder text, r_epoch bigint,
               r_expires_at_ns bigint, r_now bigint, r_done boolean)
LANGUAGE plpgsql AS $$
DECLARE t bigint; dw text[]; de bigint[]; dx bigint[]; dord bigint[];
BEGIN
    t := now_ns(off);
    WITH upd AS (
        UPDATE leases x SET expires_at_ns = t + ttl
        FROM unnest(ws, es) WITH ORDINALITY AS u(w, e, ord)
        WHERE x.world = u.w AND x.holder = worker AND x.holder <> '' AND x.expires_at_ns > t AND x.epoch = u.e
        RETURNING x.world, x.epoch, x.expires_at_ns, u.ord)
    SELECT coalesce(array_agg(upd.world), '{}'), coalesce(array_agg(upd.epoch), '{}'),
           coalesce(array_agg(upd.expires_at_ns), '{}'), coalesce(array_agg(upd.ord), '{}')
        INTO dw, de, dx, dord FROM upd;
    IF cardinality(dw) = cardinality(ws) THEN
        -- One row per ref (world ids are unique): each ord is its ref's.
        RETURN QUERY SELECT d.ord, true, true, worker, d.e, d.x, t, true
            FROM unnest(dord, de, dx) AS d(ord, e, x);
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
        (u.w, u.e) IN (SELECT * FROM unnest(dw, de))
    FROM unnest(ws, es) WITH ORDINALITY AS u(w, e, ord)
    LEFT JOIN leases l ON l.world = u.w;
END $$;

-- Release of many leases of one worker (Release is a call with one ref),
-- built like renew_leases: it releases each lease worker holds at its
-- ref's epoch, expired or not (contract.ReleaseCheck's release case, which
-- it mirrors), keeping the epoch and moving the expiry to t if it is
-- later. A released ref's answer row shows the lease as ReleaseCheck saw it
-- (held by worker at its epoch) with its new expiry. Notifies 'leases'
-- when it released one.
CREATE FUNCTION release_leases(worker text, ws text[], es bigint[], off bigint)
RETURNS TABLE (r_ord bigint, r_found boolean, r_leased boolean, r_holder text, r_epoch bigint,
               r_expires_at_ns bigint, r_now bigint, r_done boolean)
LANGUAGE plpgsql AS $$
DECLARE t bigint; dw text[]; de bigint[]; dx bigint[]; dord bigint[];
BEGIN
    t := now_ns(off);
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

-- ListWorkerWorlds pages by world id over two indexes of version 1,
-- merged: leases_by_holder (holder, world) and assignments_by_worker
-- (desired_worker, world). It needs no new one.

-- ---- the worker inventory ----

CREATE TABLE workers (
    worker          text COLLATE "C" PRIMARY KEY,
    capacity        bigint NOT NULL, -- [0, store.MaxCapacity] (store.CheckHeartbeat)
    draining        boolean NOT NULL DEFAULT false,
    heartbeat_at_ns bigint NOT NULL,
    started_at_ns   bigint NOT NULL
);

CREATE FUNCTION heartbeat(wk text, cap bigint, off bigint)
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

CREATE FUNCTION set_draining(wk text, d boolean)
RETURNS TABLE (r_capacity bigint, r_draining boolean, r_heartbeat_at_ns bigint, r_started_at_ns bigint)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY UPDATE workers x SET draining = d WHERE x.worker = wk
        RETURNING x.capacity, x.draining, x.heartbeat_at_ns, x.started_at_ns;
    IF FOUND THEN
        PERFORM notify_topic('workers');
    END IF;
END $$;

-- ---- effects: claims by kind, claims that outlive reaps, retries ----

ALTER TABLE effects
    ADD COLUMN retries      integer NOT NULL DEFAULT 0,
    ADD COLUMN retry_reason text NOT NULL DEFAULT '';
-- Claim scans the pending items of each kind it serves in queue order.
CREATE INDEX effects_pending_by_kind ON effects (kind, seq) WHERE state = 'pending';
DROP INDEX effects_pending;
-- ListEffects: a world's open items in queue order.
CREATE INDEX effects_open_by_world ON effects (world, seq) WHERE state <> 'done';

DROP FUNCTION claim_effects(text, integer, bigint, bigint);

-- Protocol D, the claim: up to n pending items of the given kinds, in
-- queue order. Each kind's items come off effects_pending_by_kind in seq
-- order (SKIP LOCKED: claimers on many machines never wait for each other
-- or take one item twice); the kinds' candidates merge by seq. A claim may
-- be lost in a crash (it is then simply not a claim), so it commits without
-- waiting for the WAL flush.
CREATE FUNCTION claim_effects(worker text, kinds text[], n integer, ttl bigint, off bigint)
RETURNS TABLE (r_intent_hash text, r_world text, r_seq bigint, r_kind text, r_params bytea,
               r_origin text, r_policy text, r_enqueued_at_ns bigint, r_attempts integer,
               r_claimed_by text, r_claim_expires_ns bigint, r_retries integer)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    t := now_ns(off);
    RETURN QUERY
    WITH c AS (
        SELECT p.intent_hash FROM (SELECT DISTINCT k FROM unnest(kinds) AS k) AS ks,
        LATERAL (
            SELECT x.intent_hash, x.seq FROM effects x
            WHERE x.state = 'pending' AND x.kind = ks.k
            ORDER BY x.seq LIMIT n FOR UPDATE SKIP LOCKED
        ) AS p
        ORDER BY p.seq LIMIT n
    )
    UPDATE effects x SET state = 'inflight', attempts = x.attempts + 1, claimed_by = worker,
        claim_expires_ns = t + ttl
    FROM c WHERE x.intent_hash = c.intent_hash
    RETURNING x.intent_hash, x.world, x.seq, x.kind, x.params, x.origin, x.policy_context_hash,
        x.enqueued_at_ns, x.attempts, x.claimed_by, x.claim_expires_ns, x.retries;
END $$;

-- A reap keeps the latest claim (claimed_by, attempts): its worker may
-- still complete the item until someone claims it anew.
CREATE OR REPLACE FUNCTION reap_effects(off bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    t := now_ns(off);
    WITH c AS (
        SELECT x.intent_hash FROM effects x
        WHERE x.state = 'inflight' AND x.claim_expires_ns <= t
        FOR UPDATE SKIP LOCKED
    )
    UPDATE effects x SET state = 'pending', claim_expires_ns = NULL
    FROM c WHERE x.intent_hash = c.intent_hash;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('effects');
    END IF;
    RETURN n;
END $$;

-- ---- timers ----

-- ListTimers: a world's open timers in (deliverAt, intentHash) order.
CREATE INDEX timers_open_by_world ON timers (world, deliver_at_ns, intent_hash) WHERE state <> 'delivered';

CREATE OR REPLACE FUNCTION reap_timers(off bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    t := now_ns(off);
    WITH c AS (
        SELECT x.intent_hash FROM timers x
        WHERE x.state = 'inflight' AND x.claim_expires_ns <= t
        FOR UPDATE SKIP LOCKED
    )
    UPDATE timers x SET state = 'due', claim_expires_ns = NULL
    FROM c WHERE x.intent_hash = c.intent_hash;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('timers');
    END IF;
    RETURN n;
END $$;

-- ---- snapshots and compaction ----

-- Compaction deletes events at or below baseline - retain, fenced, and
-- keeps their idempotency keys with their event types and payload hashes
-- (compacted_keys). It is the only DELETE the events trigger lets through.
CREATE OR REPLACE FUNCTION compact(w text, e bigint, retain bigint, off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE b bigint; n integer;
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    SELECT x.baseline_height INTO b FROM streams x WHERE x.stream = w;
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
    SELECT count(*) INTO n FROM d;
    PERFORM set_config('orrery.compaction', 'off', true);
    RETURN n;
END $$;

-- ---- worlds ----

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

-- ---- dedupe retention ----

-- Removes completed dedupe records whose completion + retention is at or
-- before the store clock. An effect record (done) and a timer record
-- (delivered) also need the world's cursor at or past their inbox item:
-- contract.Sweepable, which this mirrors. Fabric records complete at Send;
-- inbox keys when the cursor passes their item. Pending records stay.
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
    UPDATE inbox x SET key_live = false
        WHERE x.key_live AND x.key_drained_at_ns IS NOT NULL AND x.key_drained_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    RETURN total;
END $$;

-- ---- assignments ----

-- A priority is any Go int: every backend accepts the same values.
ALTER TABLE assignments ALTER COLUMN priority TYPE bigint;
