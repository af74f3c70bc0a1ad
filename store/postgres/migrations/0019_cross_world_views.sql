-- Orrery's persistence plane on PostgreSQL, version 19: indexes for the
-- operator's lists across worlds (QueryEffects, QueryTimers), which page
-- by keyset over effects in seq order and timers in (deliver_at_ns,
-- intent_hash) order, in every state, optionally of one world or kind.
-- No function changes.

CREATE INDEX effects_by_seq ON effects (seq);
CREATE INDEX effects_by_world ON effects (world, seq);
CREATE INDEX effects_by_kind ON effects (kind, seq);
CREATE INDEX timers_by_due ON timers (deliver_at_ns, intent_hash);
CREATE INDEX timers_by_world ON timers (world, deliver_at_ns, intent_hash);
