-- Orrery's persistence plane on PostgreSQL, version 18: an effect's retry
-- schedule. retry_policy is the handler's policy for this one intent
-- (NULL: its kind's). A failed execution that its policy runs again hands
-- the claim back with retry_at_ns (the store's clock) before which no
-- claim takes it, failures counted and its message kept; an operator's
-- retry clears the three. Rows from before have none: claimable at once,
-- as they were.
--
-- publish_effects gains an overload that takes the intents' policies; the
-- one without stays for the release before, which calls it during a
-- rolling upgrade.

ALTER TABLE effects
    ADD COLUMN retry_policy bytea,
    ADD COLUMN retry_at_ns bigint,
    ADD COLUMN failures integer NOT NULL DEFAULT 0,
    ADD COLUMN last_error text NOT NULL DEFAULT '';

-- NextRetry's: the earliest retry time among the pending effects.
CREATE INDEX effects_retry_at ON effects (retry_at_ns) WHERE state = 'pending' AND retry_at_ns IS NOT NULL;

CREATE FUNCTION publish_effects(w text, e bigint, hashes text[], kinds text[], params bytea[],
                                origins text[], policies text[], retries bytea[], off bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE t bigint; n integer;
BEGIN
    t := now_ns(off);
    PERFORM check_fence(w, e, t);
    INSERT INTO effects (intent_hash, world, kind, params, origin, policy_context_hash, enqueued_at_ns, state, retry_policy)
        SELECT u.h, w, u.k, u.p, u.o, u.c, t, 'pending', u.r
        FROM unnest(hashes, kinds, params, origins, policies, retries) WITH ORDINALITY AS u(h, k, p, o, c, r, ord)
        ORDER BY u.ord
        ON CONFLICT (intent_hash) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_topic('effects');
    END IF;
    RETURN n;
END $$;
