-- Orrery's persistence plane on PostgreSQL, version 6: renew_leases and
-- release_leases lock their lease rows in world order before updating
-- them. Their UPDATE ... FROM unnest() took the row locks in whatever
-- order its join produced, while the append committer locks the lease
-- rows of a batch in world order (FOR SHARE): a renewal and a group
-- commit over two common worlds could each hold one row the other waited
-- for, a deadlock PostgreSQL breaks only after deadlock_timeout (a second
-- by default), failing one of them. One order for every writer of several
-- lease rows makes that wait impossible. The bodies are otherwise those of
-- version 2.

CREATE OR REPLACE FUNCTION renew_leases(worker text, ws text[], es bigint[], ttl bigint, off bigint)
RETURNS TABLE (r_ord bigint, r_found boolean, r_leased boolean, r_holder text, r_epoch bigint,
               r_expires_at_ns bigint, r_now bigint, r_done boolean)
LANGUAGE plpgsql AS $$
DECLARE t bigint; dw text[]; de bigint[]; dx bigint[]; dord bigint[];
BEGIN
    t := now_ns(off);
    PERFORM 1 FROM leases x WHERE x.world = ANY(ws) ORDER BY x.world FOR UPDATE;
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
