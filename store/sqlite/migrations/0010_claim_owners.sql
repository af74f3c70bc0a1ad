-- Prompt recovery of a dead process's claims. A worker's heartbeat may
-- promise liveness for one incarnation (one lifetime of the process under
-- the worker id) until alive_until (the store's clock; NULL: no promise).
-- An effect or timer claim may ride on such a promise (claim_node,
-- claim_incarnation; '': none, the claim lasts its TTL), and is requeued as
-- soon as the store knows that incarnation dead: its promise ran out, or it
-- is in retired_incarnations (a planned stop, or superseded by another
-- incarnation's heartbeat), from where its later heartbeats and claims are
-- refused.
ALTER TABLE workers ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN alive_until INTEGER;
ALTER TABLE effects ADD COLUMN claim_node TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN claim_incarnation TEXT NOT NULL DEFAULT '';
ALTER TABLE timers ADD COLUMN claim_node TEXT NOT NULL DEFAULT '';
ALTER TABLE timers ADD COLUMN claim_incarnation TEXT NOT NULL DEFAULT '';

CREATE TABLE retired_incarnations (
	worker      TEXT    NOT NULL,
	incarnation TEXT    NOT NULL,
	retired_at  INTEGER NOT NULL,
	PRIMARY KEY (worker, incarnation)
) WITHOUT ROWID;

-- The orphan reaper reads only the claims that ride on a promise.
CREATE INDEX effects_claim_owner ON effects (claim_node, claim_incarnation) WHERE state = 'inflight' AND claim_node <> '';
CREATE INDEX timers_claim_owner ON timers (claim_node, claim_incarnation) WHERE state = 'claimed' AND claim_node <> '';
