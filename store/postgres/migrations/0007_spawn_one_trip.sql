-- Orrery's persistence plane on PostgreSQL, version 7: Spawn in one round
-- trip. A Spawn pipelines create_world, the first lease, the items and the
-- first journal records in one batch, so Go cannot look at the lease
-- decision before the writes that rely on it are sent. For a world created
-- earlier in the same transaction there is only one possible decision:
-- nobody else sees the world, so it has no assignment (Assign needs the
-- world) and no lease row (acquire makes one only for a world it sees),
-- and it is active. spawn_acquire asserts exactly that, raising (which
-- rolls the whole spawn back) if acquire answered anything else.
--
-- New SQLSTATE:
--   OR050 an outcome the caller's decision ruled out (a bug, never a
--         refusal a caller may see in normal operation; not mapped to a
--         sentinel)

-- spawn_acquire is acquire (it returns the same row, which the caller
-- decides again with contract.Acquire) on a world its own transaction has
-- just created: unless acquire found the world and took its first lease
-- (written, over no lease row: epoch 1), it raises.
CREATE FUNCTION spawn_acquire(w text, worker text, ttl bigint, off bigint)
RETURNS TABLE (r_found boolean, r_status text, r_assigned boolean, r_desired text,
               r_leased boolean, r_holder text, r_epoch bigint, r_expires_at_ns bigint,
               r_now bigint, r_written boolean)
LANGUAGE plpgsql AS $$
DECLARE a record;
BEGIN
    SELECT * INTO a FROM acquire(w, worker, ttl, off);
    IF NOT (a.r_found AND a.r_written AND NOT a.r_leased) THEN
        RAISE EXCEPTION 'spawn of world %: its first lease was not taken (found %, written %, leased %)',
            w, a.r_found, a.r_written, a.r_leased USING ERRCODE = 'OR050';
    END IF;
    RETURN QUERY SELECT a.r_found, a.r_status, a.r_assigned, a.r_desired, a.r_leased, a.r_holder,
        a.r_epoch, a.r_expires_at_ns, a.r_now, a.r_written;
END $$;
