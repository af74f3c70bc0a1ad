-- An effect's retry schedule. retry_policy is the handler's policy for
-- this one intent (NULL: its kind's); a failed execution that its policy
-- runs again hands the claim back with retry_at (unix ns, the store's
-- clock) before which no claim takes it, failures counted and its message
-- kept. An operator's retry clears the three. Rows from before have
-- none: claimable at once, as they were.
ALTER TABLE effects ADD COLUMN retry_policy BLOB;
ALTER TABLE effects ADD COLUMN retry_at INTEGER;
ALTER TABLE effects ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
-- NextRetry's: the earliest retry time among the pending effects.
CREATE INDEX effects_retry_at ON effects (retry_at) WHERE state = 'pending' AND retry_at IS NOT NULL;
