-- Orrery's persistence plane on PostgreSQL, version 11: AcquireLeases in
-- one round trip. A host taking over a page of worlds acquired them one
-- call at a time, and read each one's record and inbox besides; this
-- function acquires them all in one statement and answers what the host
-- needs along with each lease: the world's universe and whether its inbox
-- holds items beyond its cursor.
--
-- It locks as Acquire (version 2's acquire) does, and in the order every
-- other writer of several rows keeps (worlds, then leases, each in world
-- order): the worlds' rows FOR KEY SHARE (a status change locks a world's
-- row FOR UPDATE, so one waits for the other; the inbox's and the
-- cursor's writers take no conflicting lock), then the lease rows FOR
-- UPDATE. Two callers therefore wait for each other instead of each
-- holding a row the other needs.

-- One world's row of acquire_leases: what the decision was made on, as
-- the locks found it (the status, the assignment, the lease row), the
-- store's clock, whether this call wrote the lease, and the universe and
-- the backlog the caller answers with.
CREATE TYPE acquired_lease AS (
    world         text,
    status        text,
    universe      text,
    assigned      boolean,
    desired       text,
    leased        boolean,
    holder        text,
    epoch         bigint,
    expires_at_ns bigint,
    now_ns        bigint,
    written       boolean,
    backlog       boolean
);

-- Protocol A for many worlds of one worker. Each distinct world of ws
-- that exists gets one row (a world that does not exist gets none); the
-- lease is taken where contract.Acquire would take it (the world is
-- active, no assignment names another worker, and the lease is absent,
-- released or expired), as one UPDATE of the leased worlds and one INSERT
-- of the never leased. The caller decides every world again with
-- contract.Acquire, in its order (a world named twice is decided twice,
-- the second time on the lease the first took), and checks that both
-- agree. An INSERT that finds a row another acquirer created meanwhile
-- (it waited for that acquirer's commit) decides those worlds again on
-- their new rows, as acquire does (their rows are locked after the
-- others then: the rare deadlock that allows, between acquirers creating
-- the same lease rows at once, PostgreSQL breaks and the caller retries).
-- Notifies 'leases' once when it wrote.
CREATE FUNCTION acquire_leases(worker text, ws text[], ttl bigint, off bigint)
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
                y.inbox_seq > coalesce(s.inbox_cursor, 0) AS bl
            FROM worlds y
            LEFT JOIN assignments a ON a.world = y.world
            LEFT JOIN leases l ON l.world = y.world
            LEFT JOIN streams s ON s.stream = y.world
            WHERE y.world = ANY(todo)),
        take AS (
            SELECT pre.w, pre.lsd FROM pre
            WHERE pre.st = 'active' AND NOT (pre.asg AND pre.des <> '' AND pre.des <> worker)
              AND NOT (pre.lsd AND pre.hol <> '' AND pre.ex > t)),
        upd AS (
            UPDATE leases x SET holder = worker, epoch = x.epoch + 1, expires_at_ns = t + ttl
            FROM take WHERE take.lsd AND x.world = take.w
            RETURNING x.world),
        ins AS (
            INSERT INTO leases (world, holder, epoch, expires_at_ns)
            SELECT take.w, worker, 1, t + ttl FROM take WHERE NOT take.lsd ORDER BY take.w
            ON CONFLICT (world) DO NOTHING
            RETURNING world),
        lost AS (
            SELECT take.w FROM take WHERE NOT take.lsd AND take.w NOT IN (SELECT ins.world FROM ins))
        SELECT
            coalesce(array_agg(ROW(pre.w, pre.st, pre.uni, pre.asg, pre.des, pre.lsd, pre.hol, pre.ep, pre.ex, t,
                    pre.w IN (SELECT upd.world FROM upd) OR pre.w IN (SELECT ins.world FROM ins), pre.bl)::acquired_lease)
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
