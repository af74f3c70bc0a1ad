-- Orrery's persistence plane on PostgreSQL, version 9: fewer statements
-- on the paths every run and every world cycle takes. Each statement of a
-- pipelined batch is parsed, bound, planned and run on its own, and on an
-- idle server those fixed costs, not the rows, made a Spawn or a Commit
-- cost twice a one-row insert. So:
--   - guard_batch: the speculative path's assertions (lock_active_worlds,
--     check_fences, cas_streams or cas_heads, and the compacted-keys
--     count, up to five statements) in one call, in the same order, with
--     the same locks and the same verdicts;
--   - spawn_world: a Spawn's create_world, items, spawn_acquire and head
--     compare-and-swap in one call;
--   - enqueue_one: a delivery batch of one Enqueue in one round trip
--     instead of two (read and lock, then write).

-- guard_batch asserts, in the lock order of version 2 (worlds, leases,
-- streams), what a speculative batch was decided on, and moves the heads
-- and cursors it decided; it raises (rolling the batch back, to be decided
-- again by the checked path) when a guess is wrong:
--   - status_ws: locked FOR UPDATE, each exists and is active (as
--     lock_active_worlds);
--   - fence_ws/fence_es: each lease row locked (FOR UPDATE when exclusive,
--     else FOR SHARE) and the fence holds at the store's clock (as
--     check_fences);
--   - ss: each stream locked and its head moved from olds to news, and
--     where oldc is not NULL its cursor from oldc to newc, bound not passing
--     the world's last enqueued seq (as cas_streams);
--   - key_ss/key_ks: no key among them is compacted (the keys decided new
--     for their streams).
CREATE FUNCTION guard_batch(status_ws text[], fence_ws text[], fence_es bigint[], exclusive boolean,
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

-- spawn_world is a Spawn's world, inbox, stream and first lease in one
-- call, for a world nobody can have seen yet: create_world (OR004 if it
-- exists); its first inbox items at seqs 1…n, written as a delivery writes
-- them (enqueued at the world's creation time, the inbox counter at n, the
-- inbox's watchers notified); its journal stream started at head h (the
-- events the same transaction then inserts at runSeq 1…h: the stream row
-- is new, or a free stream's with no events, locked either way, so no
-- compare-and-swap is needed); and, when worker is not empty, the lease at
-- epoch 1 (no assignment or lease row can exist for a world created in
-- this transaction: a lease row all the same raises OR050, rolling the
-- spawn back). It returns the creation time and the row acquire
-- would (found, status, …, written), for the caller to decide again with
-- contract.Acquire.
CREATE FUNCTION spawn_world(u text, w text, worker text, ttl bigint, h bigint,
                            kinds text[], payloads bytea[], keys text[], off bigint)
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
    INSERT INTO leases (world, holder, epoch, expires_at_ns) VALUES (w, worker, 1, t + ttl)
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
CREATE FUNCTION enqueue_one(w text, k text, p bytea, key text, off bigint)
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

-- What guard_batch and spawn_world replace has no caller left.
DROP FUNCTION spawn_acquire(text, text, bigint, bigint);
DROP FUNCTION lock_active_worlds(text[]);
DROP FUNCTION check_fences(text[], bigint[], bigint, boolean);
DROP FUNCTION check_fences(text[], bigint[], bigint);
DROP FUNCTION cas_streams(text[], bigint[], bigint[], bigint[], bigint[], bigint[]);
DROP FUNCTION cas_heads(text[], bigint[], bigint[]);
