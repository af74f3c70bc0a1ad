package memstore

import (
	"context"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// Send implements protocol F. The destination's fabric dedupe records are
// separate from its inbox dedupe keys; item's Kind, Seq, World, EnqueuedAt
// and DedupeKey are ignored (the item is of kind "fabric" and carries no
// inbox dedupe key: messageID is its dedupe).
func (s *backend) Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error) {
	const op = "send"
	if err := s.begin(ctx, op); err != nil {
		return store.FabricResult{}, err
	}
	defer s.end()
	w, found := s.st.worlds[dest]
	var r *dedupeRecord
	var status store.WorldStatus
	if found {
		r, status = w.fabric[messageID], w.rec.Status
	}
	already, err := contract.Send(op, dest, r != nil, found, status)
	switch {
	case err != nil:
		return store.FabricResult{}, err
	case already:
		return store.FabricResult{Status: store.FabricAlreadyEnqueued, Seq: r.seq}, nil
	}
	now := s.now()
	seq, _ := s.st.enqueue(w, vocab.KindFabric, item.Payload, "", now)
	w.fabric[messageID] = &dedupeRecord{seq: seq, completedAt: now}
	return store.FabricResult{Status: store.FabricOK, Seq: seq}, nil
}
