-- Orrery's persistence plane on PostgreSQL, version 17: a lease records
-- its holder's incarnation, one lifetime of the process under its worker
-- id. An acquire by the same worker under another incarnation takes an
-- unexpired lease over at the next epoch, so that a process restarted
-- under the same worker id while its predecessor is frozen or partitioned
-- never shares the predecessor's epoch; took_over and displaced record the
-- incarnation of the same worker that held the lease last (unexpired or
-- expired), which may not take it back while it is unexpired
-- (contract.Acquire). Leases from before are the empty
-- incarnation's, taken free.
--
-- acquire and acquire_leases take the incarnation and return the new
-- columns with the rows they read; renew_leases returns the incarnation
-- of each lease it answers; spawn_world takes the first lease's
-- incarnation. The bodies are otherwise those of versions 2, 13, 6 and 9.

ALTER TABLE leases
    ADD COLUMN incarnation text NOT NULL DEFAULT '',
    ADD COLUMN took_over boolean NOT NULL DEFAULT false,
    ADD COLUMN displaced text NOT NULL DEFAULT '';

DROP FUNCTION acquire(text, text, bigint, bigint);

CREATE FUNCTION acquire(w text, worker text, inc text, ttl bigint, off bigint)
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

ALTER TYPE acquired_lease
    ADD ATTRIBUTE incarnation text,
    ADD ATTRIBUTE took_over boolean,
    ADD ATTRIBUTE displaced text;

DROP FUNCTION acquire_leases(text, text[], bigint, bigint);

CREATE FUNCTION acquire_leases(worker text, inc text, ws text[], ttl bigint, off bigint)
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

DROP FUNCTION renew_leases(text, text[], bigint[], bigint, bigint);

CREATE FUNCTION renew_leases(worker text, ws text[], es bigint[], ttl bigint, off bigint)
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

DROP FUNCTION spawn_world(text, text, text, bigint, bigint, text[], bytea[], text[], bigint);

CREATE FUNCTION spawn_world(u text, w text, worker text, ttl bigint, h bigint,
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
