-- Orrery's persistence plane on PostgreSQL, version 14: a transaction can
-- send its hints after its commit instead of inside it.
--
-- A transaction that has called pg_notify takes, at its commit, a lock
-- that every such transaction of the cluster takes (the notification
-- queue's, so that notifications keep commit order), and holds it until
-- its commit record is flushed: hinting transactions commit one after
-- another, one WAL flush each, however many connections and processes run
-- them. Measured on PostgreSQL 15 with 32 connections each committing a
-- one-row insert: 5,294 transactions/s without a notification, 1,459 with
-- one inside the transaction, 5,221 with it sent right after the commit.
--
-- So a transaction that runs SET LOCAL orrery.defer_hints = 'on' has
-- notify_topic record its topics in the session setting orrery.hints
-- (set at session level, so it survives the commit, and undone with the
-- rest of the transaction if it rolls back), and flush_hints(), run
-- right after the COMMIT in the same round trip, sends them in a
-- transaction of its own that writes nothing to the WAL. A hint that a
-- failure between the two loses is allowed to be lost: correctness never
-- depends on hints. Without the setting, notify_topic notifies inside the
-- transaction as before.

CREATE OR REPLACE FUNCTION notify_topic(topic text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF octet_length(topic) >= 7900 THEN
        RETURN;
    END IF;
    IF current_setting('orrery.defer_hints', true) = 'on' THEN
        PERFORM set_config('orrery.hints',
            coalesce(current_setting('orrery.hints', true), '') || topic || E'\x1f', false);
    ELSE
        PERFORM pg_notify('orrery.' || current_schema(), topic);
    END IF;
END $$;

-- flush_hints sends the topics notify_topic recorded and forgets them. It
-- never fails for a notification (a hint may be lost), so that the round
-- trip of a committed transaction never reports an error after its
-- COMMIT.
CREATE FUNCTION flush_hints() RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE h text := current_setting('orrery.hints', true);
BEGIN
    IF h IS NULL OR h = '' THEN
        RETURN;
    END IF;
    PERFORM set_config('orrery.hints', '', false);
    BEGIN
        PERFORM pg_notify('orrery.' || current_schema(), t)
        FROM unnest(string_to_array(rtrim(h, E'\x1f'), E'\x1f')) AS t;
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
END $$;
