package sqlite

import (
	"context"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// Send delivers item's payload into dest's inbox (kind KindFabric) once per
// message id (protocol F), as contract.Send decides: a delivered message
// answers as such, otherwise the destination must exist and take input
// (contract.Ingress: paused does, archived does not).
// messageID is the message's dedupe: item's Kind, Seq, World, EnqueuedAt
// and DedupeKey are ignored, and the inbox item carries no inbox dedupe key.
func (s *backend) Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error) {
	const op = "send"
	var out store.FabricResult
	err := s.write(ctx, op, dest, func(t *wtx) error {
		// contract.Send decides on both rows: the message's dedupe record
		// and its destination.
		var seq int64
		delivered, err := t.queryRow(`SELECT seq FROM fabric_dedupe WHERE dest = ? AND message_id = ?`, []any{dest, messageID}, &seq)
		if err != nil {
			return err
		}
		w, err := t.inboxWorld(dest)
		if err != nil {
			return err
		}
		already, err := contract.Send(op, dest, delivered, w.found, w.status)
		if err != nil {
			return err
		}
		if already {
			out = store.FabricResult{Status: store.FabricAlreadyEnqueued, Seq: uint64(seq)}
			return nil
		}
		got, _, err := t.enqueueInto(w, vocab.KindFabric, item.Payload, "")
		if err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO fabric_dedupe (dest, message_id, seq, completed_at) VALUES (?, ?, ?, ?)`,
			dest, messageID, int64(got), t.nowNS); err != nil {
			return err
		}
		out = store.FabricResult{Status: store.FabricOK, Seq: got}
		return nil
	})
	if err != nil {
		return store.FabricResult{}, err
	}
	return out, nil
}
