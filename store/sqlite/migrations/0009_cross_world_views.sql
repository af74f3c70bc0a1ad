-- Indexes for the operator's lists across worlds (QueryEffects,
-- QueryTimers): a world's effects and timers in every state, and every
-- timer in (deliver_at, intent_hash) order, so a page filtered by world or
-- kind, or the first page of all timers, reads only its own rows. Effects
-- across every world already page on seq, their primary key.
CREATE INDEX effects_by_world ON effects (world, seq);
CREATE INDEX effects_by_kind ON effects (kind, seq);
CREATE INDEX timers_by_due ON timers (deliver_at, intent_hash);
CREATE INDEX timers_by_world ON timers (world, deliver_at, intent_hash);
