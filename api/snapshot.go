package api

import (
	"context"
	"net/http"
	"time"
)

// Snapshot is the answer of POST /v1/worlds/{id}/snapshot: the world's
// active snapshot once the one asked for is written. A fork at Height (or
// with no height: from the active snapshot) starts from it.
type Snapshot struct {
	World     string    `json:"world"`
	Height    uint64    `json:"height"`
	StateHash string    `json:"state_hash"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// snapshotReq is the (optional, empty) body of a snapshot request.
type snapshotReq struct{}

// snapshot asks the world's lease holder, through its inbox, for a
// snapshot at its next step boundary and waits for it (at most the call
// timeout): see plane.Client.Snapshot.
func (s *Server) snapshot(r *http.Request, rc *reqCtx) (int, any, error) {
	if err := s.body(r, rc, &snapshotReq{}, true); err != nil {
		return 0, nil, err
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
	defer cancel()
	snap, err := s.cfg.Client.Snapshot(ctx, rc.world)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, Snapshot{World: rc.world, Height: snap.Height, StateHash: snap.StateHash, CreatedAt: snap.CreatedAt}, nil
}

// Snapshot is POST /v1/worlds/{id}/snapshot: a snapshot of the world's
// state now, taken by its lease holder, so that a fork need not wait for
// the next periodic one.
func (c *Client) Snapshot(ctx context.Context, worldID string) (Snapshot, error) {
	var out Snapshot
	_, err := c.do(ctx, http.MethodPost, worldPath(worldID, "snapshot"), nil, snapshotReq{}, &out)
	return out, err
}
