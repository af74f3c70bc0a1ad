package postgres

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// Send implements protocol F: dest must exist and not be archived
// (contract.Ingress); a messageID already delivered there answers its first
// seq as already_enqueued; else the item enters dest's inbox and the
// delivery record is set, in one transaction. The item's Kind, Seq, World,
// EnqueuedAt and DedupeKey are ignored: it enters as kind fabric, and
// messageID is its dedupe (separate from the inbox's dedupe keys).
func (s *backend) Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error) {
	const op = "send"
	if err := s.begin(op); err != nil {
		return store.FabricResult{}, err
	}
	seq, dup, err := s.deliver(&deliveryReq{ctx: ctx, op: op, kind: dSend, world: dest, msg: messageID, payload: item.Payload})
	if err != nil {
		return store.FabricResult{}, err
	}
	if dup {
		return store.FabricResult{Status: store.FabricAlreadyEnqueued, Seq: seq}, nil
	}
	return store.FabricResult{Status: store.FabricOK, Seq: seq}, nil
}
