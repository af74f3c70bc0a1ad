-- Orrery's persistence plane on PostgreSQL, version 8: Commits on the
-- speculative path (one round trip, see append.go). A Commit decided in
-- Go against a guessed head also relies on guesses about its inbox cursor
-- and, with a Status, about its world's status; these functions assert
-- them, raising (which rolls the whole batch back, to be decided again by
-- the checked path) when one is wrong. Lock order is version 2's: worlds,
-- then leases, then streams.

-- cas_streams is cas_heads (version 1) with the Commits' cursors. It locks
-- the streams ss (in order) and moves each head from olds[i] to news[i];
-- where oldc[i] is not NULL (a Commit's world), it also moves the cursor
-- from oldc[i] to newc[i], and asserts that the cursor the Commit asked
-- for, bound[i], does not pass the world's last enqueued seq (read after
-- the stream locks, as the checked path reads it; a Commit refused for its
-- head moves no cursor, yet its answer relied on both). It raises if any
-- head or cursor is not the one guessed, or if a bound is passed.
CREATE FUNCTION cas_streams(ss text[], olds bigint[], news bigint[], oldc bigint[], newc bigint[], bound bigint[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
    PERFORM 1 FROM streams x WHERE x.stream = ANY(ss) ORDER BY x.stream FOR UPDATE;
    UPDATE streams x SET head = u.h, inbox_cursor = coalesce(u.nc, x.inbox_cursor)
        FROM unnest(ss, olds, news, oldc, newc) AS u(s, old, h, oc, nc)
        WHERE x.stream = u.s AND x.head = u.old AND (u.oc IS NULL OR x.inbox_cursor = u.oc);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> coalesce(cardinality(ss), 0) THEN
        RAISE EXCEPTION 'stream heads or cursors moved' USING ERRCODE = 'OR021';
    END IF;
    PERFORM 1 FROM unnest(ss, bound) AS u(s, b) LEFT JOIN worlds w ON w.world = u.s
        WHERE u.b IS NOT NULL AND (w.world IS NULL OR w.inbox_seq < u.b);
    IF FOUND THEN
        RAISE EXCEPTION 'a cursor passes its world''s last seq' USING ERRCODE = 'OR040';
    END IF;
END $$;

-- lock_active_worlds locks the rows of the worlds ws FOR UPDATE, in world
-- order (before any lease row, as SetWorldStatus and the checked path lock
-- them), and raises unless every one exists and is active: the status the
-- speculative path's Commits with a Status assume (a valid fence implies
-- it, since leaving active releases the lease; this proves it).
CREATE FUNCTION lock_active_worlds(ws text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    PERFORM 1 FROM worlds x WHERE x.world = ANY(ws) ORDER BY x.world FOR UPDATE;
    -- A new snapshot: the rows as their locks found them.
    SELECT count(*) INTO n FROM worlds x WHERE x.world = ANY(ws) AND x.status = 'active';
    IF n <> coalesce(cardinality(ws), 0) THEN
        RAISE EXCEPTION 'a world is not active' USING ERRCODE = 'OR040';
    END IF;
END $$;

-- check_fences of version 2, taking the lease rows FOR UPDATE when
-- exclusive: a batch that ends a lease (a Commit with a Status) locks them
-- so up front, as the checked path does, since upgrading a shared lock at
-- the write would deadlock with an append of that world holding it.
CREATE FUNCTION check_fences(ws text[], es bigint[], off bigint, exclusive boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE t bigint; bad record;
BEGIN
    IF exclusive THEN
        PERFORM 1 FROM leases x WHERE x.world = ANY(ws) ORDER BY x.world FOR UPDATE;
    ELSE
        PERFORM 1 FROM leases x WHERE x.world = ANY(ws) ORDER BY x.world FOR SHARE;
    END IF;
    t := now_ns(off);
    SELECT u.w, u.e INTO bad
        FROM unnest(ws, es) AS u(w, e) LEFT JOIN leases l ON l.world = u.w
        WHERE l.world IS NULL OR l.epoch <> u.e OR l.holder = '' OR l.expires_at_ns <= t
        LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'fence of world % at epoch % fails', bad.w, bad.e USING ERRCODE = 'OR010';
    END IF;
END $$;
