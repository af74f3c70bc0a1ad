-- Orrery's persistence plane on PostgreSQL, version 1.
--
-- Runs in one transaction with search_path set to the store's schema, so
-- every name is unqualified (and the store's connections run with the same
-- search_path). Times are bigint Unix nanoseconds, the zero time being
-- -9223372036854775808: the store clock (now_ns) is the server's
-- clock_timestamp() plus an offset the client passes (zero in production,
-- moved by tests), and client-supplied times (emittedAt, deliverAt)
-- round-trip exactly. Keys whose order is observable are COLLATE "C" (byte
-- order, as Go sorts). Output columns of functions are named r_* so they
-- never shadow a table column inside PL/pgSQL.
--
-- Custom SQLSTATEs, raised or returned as r_code (errors.go maps them):
--   OR001 world not found     OR002 world fenced       OR003 world archived
--   OR004 world exists        OR005 snapshot not found OR006 not found
--   OR010 fenced (epoch)      OR011 lease held         OR012 not holder
--   OR013 stale epoch         OR014 not assigned       OR030 watermark conflict
--   OR040 invalid argument    OR100 journal is immutable
--
-- Lock order, which every transaction follows so that none deadlocks:
-- leases, then worlds, then streams, then the rest (effects, then timers,
-- then inbox, events and snapshot rows); several rows of one table are
-- locked in key order. Queue claims and reaps use SKIP LOCKED and wait for
-- nobody. A deadlock all the same (40P01) is retried by the client.

-- ---- the clock and notifications ----

CREATE FUNCTION now_ns(off bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000 + off $$;

-- A hint to Watch listeners on other connections: delivered at commit;
-- identical hints of one transaction coalesce. A topic too long for a
-- notification's payload is not hinted (hints may be lost; correctness
-- never depends on them).
CREATE FUNCTION notify_topic(topic text) RETURNS void
LANGUAGE sql VOLATILE AS
$$ SELECT pg_notify('orrery.' || current_schema(), topic) WHERE octet_length(topic) < 7900 $$;

-- ---- worlds ----

CREATE TABLE worlds (
    world                text COLLATE "C" PRIMARY KEY,
    universe             text COLLATE "C" NOT NULL,
    status               text NOT NULL CHECK (status IN ('active', 'fenced', 'archived')),
    parent_world         text NOT NULL DEFAULT '',
    parent_snapshot_hash text NOT NULL DEFAULT '',
    forked_at_height     bigint NOT NULL DEFAULT 0,
    created_at_ns        bigint NOT NULL,
    -- The last inbox seq handed out. Enqueuers hold this row's lock until
    -- they commit, so inbox seqs commit in seq order and a reader that saw
    -- seq n never later finds a new item below n.
    inbox_seq            bigint NOT NULL DEFAULT 0,
    -- The active baseline's height; NULL before the first snapshot.
    baseline_height      bigint
);
CREATE INDEX worlds_by_universe ON worlds (universe, world);

-- ---- the journal (the append authority) ----

-- One row per stream: the head (runSeq of the last event, or the height a
-- fork or seed starts at) and, for a world's stream, its inbox cursor. An
-- appender locks it before it reads keys or assigns runSeqs, so a stream
-- has one writer at a time and its runSeqs commit in order.
CREATE TABLE streams (
    stream       text COLLATE "C" PRIMARY KEY,
    head         bigint NOT NULL DEFAULT 0,
    inbox_cursor bigint NOT NULL DEFAULT 0
);

CREATE TABLE events (
    stream             text COLLATE "C" NOT NULL,
    run_seq            bigint NOT NULL,
    event_id           text NOT NULL,
    idempotency_key    text COLLATE "C" NOT NULL,
    event_type         text NOT NULL,
    emitted_at_ns      bigint NOT NULL,
    persisted_at_ns    bigint NOT NULL,
    step_id            text NOT NULL,
    logical_attempt_id bigint NOT NULL,
    engine_attempt_id  bigint NOT NULL,
    plan_id            text NOT NULL,
    plan_version       bigint NOT NULL,
    payload            bytea,            -- NULL: a nil payload
    PRIMARY KEY (stream, run_seq),
    UNIQUE (stream, idempotency_key)
);
CREATE INDEX events_by_persisted_at ON events (stream, persisted_at_ns);

-- Compaction moves the identity of what it deletes here, so that a key
-- once appended stays a duplicate for the stream's life.
CREATE TABLE compacted_keys (
    stream          text COLLATE "C" NOT NULL,
    idempotency_key text COLLATE "C" NOT NULL,
    event_id        text NOT NULL,
    run_seq         bigint NOT NULL,
    persisted_at_ns bigint NOT NULL,
    PRIMARY KEY (stream, idempotency_key)
);

-- Persisted records are immutable: the database itself refuses every
-- UPDATE and TRUNCATE, and every DELETE except compaction's, which opens
-- the gate for its own transaction with set_config('orrery.compaction',
-- 'on', true).
CREATE FUNCTION events_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('orrery.compaction', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'orrery: journal events are immutable (% refused)', TG_OP
        USING ERRCODE = 'OR100';
END $$;
CREATE TRIGGER events_immutable BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_immutable();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_immutable();

-- The speculative append path's assertions (see append.go): each raises,
-- rolling the whole batch back, when the guess it checks is wrong.

-- cas_heads locks the streams ss (in order) and moves each head from
-- olds[i] to news[i]; if any head is not olds[i], it raises.
CREATE FUNCTION cas_heads(ss text[], olds bigint[], news bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
    PERFORM 1 FROM streams x WHERE x.stream = ANY(ss) ORDER BY x.stream FOR UPDATE;
    UPDATE streams x SET head = u.h
        FROM unnest(ss, olds, news) AS u(s, old, h)
        WHERE x.stream = u.s AND x.head = u.old;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> coalesce(cardinality(ss), 0) THEN
        RAISE EXCEPTION 'stream heads moved' USING ERRCODE = 'OR021';
    END IF;
END $$;

CREATE FUNCTION expect_count(n bigint, want bigint, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF n <> want THEN
        RAISE EXCEPTION '%', what USING ERRCODE = 'OR040';
    END IF;
END $$;

-- ---- leases (protocols A and B) ----

-- A world's row outlives every release (holder = ''), so its epoch counter
-- never goes back and an epoch is never handed out twice.
CREATE TABLE leases (
    world         text COLLATE "C" PRIMARY KEY,
    holder        text COLLATE "C" NOT NULL,
    epoch         bigint NOT NULL,
    expires_at_ns bigint NOT NULL
);
CREATE INDEX leases_by_holder ON leases (holder, world) WHERE holder <> '';

CREATE TABLE assignments (
    world          text COLLATE "C" PRIMARY KEY,
    desired_worker text COLLATE "C" NOT NULL,
    priority       integer NOT NULL,
    reason         text NOT NULL
);
CREATE INDEX assignments_by_worker ON assignments (desired_worker, world);

-- The fence of every world mutation, run in the mutation's own
-- transaction: the world exists and e is the epoch of its lease, which is
-- held (not released) and unexpired at t. FOR SHARE keeps the lease row
-- as it is until the mutation commits: a takeover (or a renewal) waits for
-- the write, and a write that waited for a takeover sees the new epoch.
CREATE FUNCTION check_fence(w text, e bigint, t bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE l record;
BEGIN
    IF w = '' THEN
        RAISE EXCEPTION 'empty world' USING ERRCODE = 'OR040';
    END IF;
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

-- check_fences is the speculative append path's fence (see append.go): it
-- locks the lease rows of ws in world order (FOR SHARE, as check_fence
-- does) and raises if any fence (ws[i], es[i]) fails. Which one, and why,
-- the checked path then finds out.
CREATE FUNCTION check_fences(ws text[], es bigint[], off bigint) RETURNS void
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

-- The lease functions answer their typed failures as r_code (and
-- r_detail) instead of raising them: losing an acquisition race is part
-- of normal operation, not an error worth a line in the server's log.

-- world_ingress: '' if w exists and is active, else the failure's code.
CREATE FUNCTION world_ingress(w text, OUT r_code text, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE st text;
BEGIN
    r_code := ''; r_detail := '';
    SELECT x.status INTO st FROM worlds x WHERE x.world = w;
    IF NOT FOUND THEN
        r_code := 'OR001'; r_detail := format('world %s not found', w);
    ELSIF st = 'fenced' THEN
        r_code := 'OR002'; r_detail := format('world %s is fenced', w);
    ELSIF st = 'archived' THEN
        r_code := 'OR003'; r_detail := format('world %s is archived', w);
    END IF;
END $$;

-- Protocol A: the world (exists, active), then the assignment, then the
-- lease. An absent, released or expired lease is taken at the next epoch;
-- the holder of an unexpired lease gets it back unchanged. Commits durably.
CREATE FUNCTION acquire_lease(w text, worker text, ttl bigint, off bigint)
RETURNS TABLE (r_code text, r_detail text, r_holder text, r_epoch bigint, r_expires_at_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE g record; want text; l record; t bigint;
BEGIN
    g := world_ingress(w);
    IF g.r_code <> '' THEN
        RETURN QUERY SELECT g.r_code, g.r_detail, ''::text, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    SELECT a.desired_worker INTO want FROM assignments a WHERE a.world = w;
    IF FOUND AND want <> '' AND want <> worker THEN
        RETURN QUERY SELECT 'OR014'::text, format('assigned to %s', want), ''::text, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    t := now_ns(off);
    INSERT INTO leases AS x (world, holder, epoch, expires_at_ns) VALUES (w, worker, 1, t + ttl)
        ON CONFLICT (world) DO NOTHING
        RETURNING x.holder, x.epoch, x.expires_at_ns INTO l;
    IF FOUND THEN
        RETURN QUERY SELECT ''::text, ''::text, l.holder, l.epoch, l.expires_at_ns;
        RETURN;
    END IF;
    SELECT x.holder, x.epoch, x.expires_at_ns INTO l FROM leases x WHERE x.world = w FOR UPDATE;
    t := now_ns(off); -- read after the lock wait
    IF l.holder <> '' AND l.expires_at_ns > t THEN
        IF l.holder = worker THEN
            RETURN QUERY SELECT ''::text, ''::text, l.holder, l.epoch, l.expires_at_ns;
        ELSE
            RETURN QUERY SELECT 'OR011'::text, format('held by %s at epoch %s', l.holder, l.epoch),
                ''::text, 0::bigint, 0::bigint;
        END IF;
        RETURN;
    END IF;
    RETURN QUERY UPDATE leases x SET holder = worker, epoch = x.epoch + 1, expires_at_ns = t + ttl
        WHERE x.world = w RETURNING ''::text, ''::text, x.holder, x.epoch, x.expires_at_ns;
END $$;

-- Protocol B's test, shared by renew and release: it locks w's lease row
-- and answers '' if worker holds it at e (an expired lease counts as held
-- only when allow_expired). Nobody holding it, another worker, or an
-- expired lease: OR012; the holder of a live lease at another epoch: OR013.
CREATE FUNCTION lease_holder_check(w text, worker text, e bigint, t bigint, allow_expired boolean,
                                   OUT r_code text, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE l record;
BEGIN
    r_code := ''; r_detail := '';
    PERFORM 1 FROM worlds x WHERE x.world = w;
    IF NOT FOUND THEN
        r_code := 'OR001'; r_detail := format('world %s not found', w);
        RETURN;
    END IF;
    SELECT x.holder, x.epoch, x.expires_at_ns INTO l FROM leases x WHERE x.world = w FOR UPDATE;
    IF NOT FOUND OR l.holder = '' THEN
        r_code := 'OR012'; r_detail := 'lease not held';
    ELSIF l.holder <> worker THEN
        r_code := 'OR012'; r_detail := format('held by %s', l.holder);
    ELSIF l.expires_at_ns <= t AND NOT allow_expired THEN
        r_code := 'OR012'; r_detail := 'lease expired';
    ELSIF l.epoch <> e THEN
        r_code := 'OR013'; r_detail := format('epoch %s, lease at %s', e, l.epoch);
    END IF;
END $$;

-- Protocol B. An expired lease is not renewed, even when nobody took it
-- over: its holder's writes were already being fenced; it must acquire a
-- new epoch.
CREATE FUNCTION renew_lease(w text, worker text, e bigint, ttl bigint, off bigint)
RETURNS TABLE (r_code text, r_detail text, r_holder text, r_epoch bigint, r_expires_at_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE c record; t bigint;
BEGIN
    c := lease_holder_check(w, worker, e, now_ns(off), false);
    IF c.r_code <> '' THEN
        RETURN QUERY SELECT c.r_code, c.r_detail, ''::text, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    t := now_ns(off);
    RETURN QUERY UPDATE leases x SET expires_at_ns = t + ttl
        WHERE x.world = w RETURNING ''::text, ''::text, x.holder, x.epoch, x.expires_at_ns;
END $$;

-- Release keeps the epoch. Releasing an already released epoch is a no-op;
-- the holder may release its expired lease.
CREATE FUNCTION release_lease(w text, worker text, e bigint, off bigint,
                              OUT r_code text, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    r_code := ''; r_detail := '';
    PERFORM 1 FROM leases x WHERE x.world = w AND x.holder = '' AND x.epoch = e
        AND EXISTS (SELECT 1 FROM worlds y WHERE y.world = w);
    IF FOUND THEN
        RETURN;
    END IF;
    t := now_ns(off);
    SELECT * INTO r_code, r_detail FROM lease_holder_check(w, worker, e, t, true);
    IF r_code <> '' THEN
        RETURN;
    END IF;
    UPDATE leases x SET holder = '', expires_at_ns = least(x.expires_at_ns, t) WHERE x.world = w;
END $$;

-- ---- the durable inbox ----

-- Items enter through group-committed deliveries (Enqueue, Complete, Fire,
-- Send: see deliver.go), which lock the world's row, take the next seq from
-- worlds.inbox_seq, and check the dedupe keys below, all in the
-- transaction that inserts the item.

CREATE TABLE inbox (
    world             text COLLATE "C" NOT NULL,
    seq               bigint NOT NULL,
    kind              text NOT NULL,
    payload           bytea,
    dedupe_key        text COLLATE "C",   -- NULL: none
    enqueued_at_ns    bigint NOT NULL,
    -- The dedupe record of dedupe_key: live until swept; it completes when
    -- the cursor passes the item (key_drained_at_ns).
    key_live          boolean NOT NULL,
    key_drained_at_ns bigint,
    PRIMARY KEY (world, seq)
);
CREATE UNIQUE INDEX inbox_dedupe ON inbox (world, dedupe_key) WHERE key_live;
CREATE INDEX inbox_keys_drained ON inbox (key_drained_at_ns)
    WHERE key_live AND key_drained_at_ns IS NOT NULL;

-- ---- effects (protocols C and D) ----

-- One row per intent hash: pending and inflight rows are the dispatch
-- queue (in seq order), done rows the dedupe records until swept.
CREATE TABLE effects (
    intent_hash         text COLLATE "C" PRIMARY KEY,
    world               text COLLATE "C" NOT NULL,
    seq                 bigint GENERATED ALWAYS AS IDENTITY,
    kind                text NOT NULL,
    params              bytea,
    origin              text NOT NULL,
    policy_context_hash text NOT NULL,
    enqueued_at_ns      bigint NOT NULL,
    state               text NOT NULL CHECK (state IN ('pending', 'inflight', 'done')),
    attempts            integer NOT NULL DEFAULT 0,
    claimed_by          text NOT NULL DEFAULT '',
    claim_expires_ns    bigint,
    receipt_status      text,
    receipt_payload     bytea,
    inbox_seq           bigint,
    completed_at_ns     bigint
);
CREATE INDEX effects_pending ON effects (seq) WHERE state = 'pending';
CREATE INDEX effects_inflight ON effects (claim_expires_ns) WHERE state = 'inflight';
CREATE INDEX effects_done ON effects (completed_at_ns) WHERE state = 'done';

-- Protocol C: fenced; an intent hash ever published (until its dedupe
-- record is swept) is skipped. Queue order is the input order.
CREATE FUNCTION publish_effects(w text, e bigint, hashes text[], kinds text[], params bytea[],
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

-- Protocol D, the claim: pending items in queue order; SKIP LOCKED, so
-- claimers on many machines never wait for each other or take one item
-- twice. A claim may be lost in a crash (it is then simply not a claim),
-- so it commits without waiting for the WAL flush.
CREATE FUNCTION claim_effects(worker text, n integer, ttl bigint, off bigint)
RETURNS TABLE (r_intent_hash text, r_world text, r_seq bigint, r_kind text, r_params bytea,
               r_origin text, r_policy text, r_enqueued_at_ns bigint, r_attempts integer,
               r_claimed_by text, r_claim_expires_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    t := now_ns(off);
    RETURN QUERY
    WITH c AS (
        SELECT x.intent_hash FROM effects x WHERE x.state = 'pending'
        ORDER BY x.seq LIMIT n FOR UPDATE SKIP LOCKED
    )
    UPDATE effects x SET state = 'inflight', attempts = x.attempts + 1, claimed_by = worker,
        claim_expires_ns = t + ttl
    FROM c WHERE x.intent_hash = c.intent_hash
    RETURNING x.intent_hash, x.world, x.seq, x.kind, x.params, x.origin, x.policy_context_hash,
        x.enqueued_at_ns, x.attempts, x.claimed_by, x.claim_expires_ns;
END $$;

CREATE FUNCTION reap_effects(off bigint) RETURNS integer
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
    UPDATE effects x SET state = 'pending', claimed_by = '', claim_expires_ns = NULL
    FROM c WHERE x.intent_hash = c.intent_hash;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('effects');
    END IF;
    RETURN n;
END $$;

-- ---- timers (protocol E) ----

-- One row per intent hash: due and inflight rows are the timer queue,
-- delivered rows the dedupe records until swept. A cancelled timer's row
-- is deleted.
CREATE TABLE timers (
    intent_hash      text COLLATE "C" PRIMARY KEY,
    world            text COLLATE "C" NOT NULL,
    deliver_at_ns    bigint NOT NULL,
    payload          bytea,
    state            text NOT NULL CHECK (state IN ('due', 'inflight', 'delivered')),
    attempts         integer NOT NULL DEFAULT 0,
    claimed_by       text NOT NULL DEFAULT '',
    claim_expires_ns bigint,
    inbox_seq        bigint,
    completed_at_ns  bigint
);
CREATE INDEX timers_due ON timers (deliver_at_ns, intent_hash) WHERE state = 'due';
CREATE INDEX timers_inflight ON timers (claim_expires_ns) WHERE state = 'inflight';
CREATE INDEX timers_delivered ON timers (completed_at_ns) WHERE state = 'delivered';

CREATE FUNCTION schedule_timer(w text, e bigint, h text, deliver_at bigint, p bytea, off bigint)
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
-- dedupe record; an unknown or fired one is OR006.
CREATE FUNCTION cancel_timer(w text, e bigint, h text, off bigint)
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

-- Protocol E, the claim: due timers in (deliver_at, intent_hash) order.
CREATE FUNCTION claim_timers(worker text, n integer, ttl bigint, off bigint)
RETURNS TABLE (r_world text, r_intent_hash text, r_deliver_at_ns bigint, r_payload bytea,
               r_attempts integer, r_claimed_by text, r_claim_expires_ns bigint)
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    t := now_ns(off);
    RETURN QUERY
    WITH c AS (
        SELECT x.intent_hash FROM timers x WHERE x.state = 'due' AND x.deliver_at_ns <= t
        ORDER BY x.deliver_at_ns, x.intent_hash LIMIT n FOR UPDATE SKIP LOCKED
    )
    UPDATE timers x SET state = 'inflight', attempts = x.attempts + 1, claimed_by = worker,
        claim_expires_ns = t + ttl
    FROM c WHERE x.intent_hash = c.intent_hash
    RETURNING x.world, x.intent_hash, x.deliver_at_ns, x.payload, x.attempts, x.claimed_by,
        x.claim_expires_ns;
END $$;

CREATE FUNCTION reap_timers(off bigint) RETURNS integer
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
    UPDATE timers x SET state = 'due', claimed_by = '', claim_expires_ns = NULL
    FROM c WHERE x.intent_hash = c.intent_hash;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('timers');
    END IF;
    RETURN n;
END $$;

-- ---- fabric (protocol F) ----

-- Per-destination delivery records, separate from the inbox's dedupe keys:
-- a Send checks and sets one in the transaction that enqueues its item,
-- under the destination world's row lock.
CREATE TABLE fabric_dedupe (
    dest            text COLLATE "C" NOT NULL,
    message_id      text COLLATE "C" NOT NULL,
    seq             bigint NOT NULL,
    delivered_at_ns bigint NOT NULL,
    PRIMARY KEY (dest, message_id)
);
CREATE INDEX fabric_dedupe_age ON fabric_dedupe (delivered_at_ns);

-- ---- snapshots ----

CREATE TABLE snapshots (
    world         text COLLATE "C" NOT NULL,
    height        bigint NOT NULL,
    state         bytea,
    state_hash    text NOT NULL,
    created_at_ns bigint NOT NULL,
    PRIMARY KEY (world, height)
);

-- The first snapshot stored at a height stays (replay makes a second one
-- equal anyway); the highest height is the active baseline.
CREATE FUNCTION put_snapshot(w text, e bigint, h bigint, st bytea, sh text, off bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    t := now_ns(off);
    PERFORM check_fence(w, e, t);
    INSERT INTO snapshots (world, height, state, state_hash, created_at_ns)
        VALUES (w, h, st, sh, t)
        ON CONFLICT (world, height) DO NOTHING;
    UPDATE worlds x SET baseline_height = h
        WHERE x.world = w AND (x.baseline_height IS NULL OR x.baseline_height < h);
END $$;

-- Compaction deletes events at or below baseline - retain, fenced, and
-- keeps their idempotency keys (compacted_keys). It is the only DELETE the
-- events trigger lets through.
CREATE FUNCTION compact(w text, e bigint, retain bigint, off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE b bigint; n integer;
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    SELECT x.baseline_height INTO b FROM worlds x WHERE x.world = w;
    IF b IS NULL OR b <= retain THEN
        RETURN 0;
    END IF;
    PERFORM set_config('orrery.compaction', 'on', true);
    WITH d AS (
        DELETE FROM events v WHERE v.stream = w AND v.run_seq <= b - retain
        RETURNING v.stream, v.idempotency_key, v.event_id, v.run_seq, v.persisted_at_ns
    ), k AS (
        INSERT INTO compacted_keys (stream, idempotency_key, event_id, run_seq, persisted_at_ns)
        SELECT * FROM d ON CONFLICT DO NOTHING
    )
    SELECT count(*) INTO n FROM d;
    PERFORM set_config('orrery.compaction', 'off', true);
    RETURN n;
END $$;

-- ---- worlds ----

-- A world whose journal starts at a height (seeded, forked) needs its
-- stream empty (head 0): it then starts at h. Locks the stream row (after
-- the world's, which the caller inserted).
CREATE FUNCTION start_stream(w text, h bigint) RETURNS void
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

CREATE FUNCTION create_world(u text, w text, seeded boolean, h bigint, st bytea, sh text, off bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    t := now_ns(off);
    INSERT INTO worlds (world, universe, status, created_at_ns, baseline_height)
        VALUES (w, u, 'active', t, CASE WHEN seeded THEN h END)
        ON CONFLICT (world) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % exists', w USING ERRCODE = 'OR004';
    END IF;
    IF seeded THEN
        PERFORM start_stream(w, h);
        INSERT INTO snapshots (world, height, state, state_hash, created_at_ns) VALUES (w, h, st, sh, t);
    END IF;
    RETURN t;
END $$;

-- Forking copies one snapshot row and writes the new world's rows: its
-- cost does not depend on the source's history.
CREATE FUNCTION fork_world(src text, h bigint, w text, off bigint)
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
    INSERT INTO worlds (world, universe, status, parent_world, parent_snapshot_hash, forked_at_height,
                        created_at_ns, baseline_height)
        VALUES (w, u, 'active', src, s.state_hash, h, t, h)
        ON CONFLICT (world) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'world % exists', w USING ERRCODE = 'OR004';
    END IF;
    PERFORM start_stream(w, h);
    INSERT INTO snapshots (world, height, state, state_hash, created_at_ns) VALUES (w, h, s.state, s.state_hash, t);
    RETURN QUERY SELECT u, s.state_hash::text, t;
END $$;

CREATE FUNCTION set_world_status(w text, e bigint, st text, off bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM check_fence(w, e, now_ns(off));
    UPDATE worlds x SET status = st WHERE x.world = w;
END $$;

-- ---- projector watermarks ----

CREATE TABLE watermarks (
    projector text COLLATE "C" NOT NULL,
    stream    text COLLATE "C" NOT NULL,
    mark      bigint NOT NULL,
    PRIMARY KEY (projector, stream)
);

-- ---- dedupe retention ----

-- Removes completed dedupe records whose completion + retention is at or
-- before the store clock: done effects, delivered timers, fabric records,
-- and inbox keys whose item the cursor passed. Pending records stay.
CREATE FUNCTION sweep_dedupe(retention bigint, off bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer; total integer := 0;
BEGIN
    t := now_ns(off) - retention;
    DELETE FROM effects x WHERE x.state = 'done' AND x.completed_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    DELETE FROM timers x WHERE x.state = 'delivered' AND x.completed_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    DELETE FROM fabric_dedupe x WHERE x.delivered_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE inbox x SET key_live = false
        WHERE x.key_live AND x.key_drained_at_ns IS NOT NULL AND x.key_drained_at_ns <= t;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    RETURN total;
END $$;
