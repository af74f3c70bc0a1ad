-- Orrery's persistence plane on PostgreSQL, version 15: an effect may be
-- withdrawn, given up before any adapter claimed it because its world was
-- archived or its producer named it in a Commit's Withdraw. The row stays
-- as its record (completed_at_ns is the withdrawal's time) until the
-- dedupe sweep removes it.
ALTER TABLE effects DROP CONSTRAINT effects_state_check;
ALTER TABLE effects ADD CONSTRAINT effects_state_check
    CHECK (state IN ('pending', 'inflight', 'done', 'withdrawn'));
-- A world's open items are its pending and inflight ones (ListEffects, and
-- an archive's withdrawal of the pending ones); withdrawn rows are not.
DROP INDEX effects_open_by_world;
CREATE INDEX effects_open_by_world ON effects (world, seq) WHERE state IN ('pending', 'inflight');
CREATE INDEX effects_withdrawn ON effects (completed_at_ns) WHERE state = 'withdrawn';
