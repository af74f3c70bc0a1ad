package memstore

import (
	"context"

	"github.com/orrery-run/orrery/store"
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
	// The dedupe record first: a message delivered already answers as such
	// whatever its destination became since (archived by the very
	// message), so a retried send whose answer was lost learns it was
	// delivered instead of being refused.
	if w, ok := s.st.worlds[dest]; ok {
		if r, ok := w.fabric[messageID]; ok {
			return store.FabricResult{Status: store.FabricAlreadyEnqueued, Seq: r.seq}, nil
		}
	}
	w, err := s.st.ingress(op, dest)
	if err != nil {
		return store.FabricResult{}, err
	}
	now := s.now()
	seq, _ := s.st.enqueue(w, vocab.KindFabric, item.Payload, "", now)
	w.fabric[messageID] = &dedupeRecord{seq: seq, completedAt: now}
	return store.FabricResult{Status: store.FabricOK, Seq: seq}, nil
}
