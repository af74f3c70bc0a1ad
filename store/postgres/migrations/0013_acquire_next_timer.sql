-- Orrery's persistence plane on PostgreSQL, version 13: acquire_leases
-- also answers, for each world it reads, when its earliest timer not yet
-- delivered is due (NULL: none), so that a host taking over a page of
-- worlds wakes a passive one at its next timer instead of leaving the
-- firing to the timer worker's lag. The timers_open_by_world index
-- (world, deliver_at_ns, intent_hash) WHERE state <> 'delivered' answers
-- it from its first entry.

ALTER TYPE acquired_lease ADD ATTRIBUTE next_timer_ns bigint;

CREATE OR REPLACE FUNCTION acquire_leases(worker text, ws text[], ttl bigint, off bigint)
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
                    WHERE tm.world = y.world AND tm.state <> 'delivered') AS nt
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
                    pre.w IN (SELECT upd.world FROM upd) OR pre.w IN (SELECT ins.world FROM ins), pre.bl, pre.nt)::acquired_lease)
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
