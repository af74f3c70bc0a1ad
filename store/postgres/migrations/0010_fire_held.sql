-- Orrery's persistence plane on PostgreSQL, version 10: FireHeld in one
-- round trip. The holder of a world's lease fires a timer of that world
-- without a claim: a fenced write and an inbox delivery in one statement.

-- fire_held locks, in the lock order of version 2, the row of world w
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
CREATE FUNCTION fire_held(w text, e bigint, h text, off bigint)
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
