-- Orrery's persistence plane on PostgreSQL, version 12: a Commit that ends
-- its world's lease (a workflow run's end, a world archived by its own
-- cycle), alone in its batch on the speculative path, asserts and writes
-- in one call. guard_batch locks the world's, the lease's and the
-- stream's rows FOR UPDATE, checks them, and the status change then
-- updates two of them again, in a statement of its own: the lease's and
-- the stream's updates can take their rows' locks as they check them
-- (the world's row keeps its FOR UPDATE, see below).

-- guard_end asserts what guard_batch asserts of a speculative batch of one
-- Commit ending world w's lease, and writes its status change, in the
-- lock order of version 2 (the world's row, the lease's, the stream's); it
-- raises (rolling the batch back, to be decided again by the checked path)
-- when a guess is wrong:
--   - the world is active (its status moves to st, with reason) and its
--     last enqueued seq is at least bound;
--   - the fence at epoch e holds at the store's clock (the lease then
--     ends: released, epoch kept, expiry now if later);
--   - the stream's head moves from old_h to new_h and its cursor from
--     old_c to new_c;
--   - no key among key_ks (the keys decided new) is compacted.
CREATE FUNCTION guard_end(w text, e bigint, old_h bigint, new_h bigint, old_c bigint, new_c bigint, bound bigint,
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
