-- Orrery's persistence plane on PostgreSQL, version 21: an effect may be
-- held. An operator (or a restore of a backup) keeps it from every adapter
-- until someone decides to release it (run it again, at least once) or to
-- resolve it with the receipt the external system gave. hold_reason and
-- held_at_ns are the latest hold's, release_reason the release's that
-- ended it (kept as the effect's history once pending again). A held
-- effect has no claim: the hold revoked it.
ALTER TABLE effects DROP CONSTRAINT effects_state_check;
ALTER TABLE effects ADD CONSTRAINT effects_state_check
    CHECK (state IN ('pending', 'inflight', 'done', 'withdrawn', 'held'));
ALTER TABLE effects
    ADD COLUMN hold_reason text NOT NULL DEFAULT '',
    ADD COLUMN held_at_ns bigint,
    ADD COLUMN release_reason text NOT NULL DEFAULT '';
-- A world's open effects are its pending, inflight and held ones
-- (ListEffects, and an archive's withdrawal of the pending and held ones).
DROP INDEX effects_open_by_world;
CREATE INDEX effects_open_by_world ON effects (world, seq) WHERE state IN ('pending', 'inflight', 'held');
-- The operator's release of every held effect, and the held gauge.
CREATE INDEX effects_held ON effects (seq) WHERE state = 'held';
