package adapter

import (
	"context"
	"errors"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// KindFabric is the effect kind of Fabric, the built-in fabric.send
// adapter.
const KindFabric = world.KindFabricSend

// FabricStore is what the fabric adapter needs of the store.
type FabricStore interface {
	Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error)
	GetWorld(ctx context.Context, world string) (store.World, error)
}

// Fabric is the fabric.send adapter (protocol F). It delivers the message
// of a fabric.send intent into the destination world's inbox through the
// store's Send, deduplicated by message_id = intent_hash, and answers the
// sender with a sys/FabricSendReceipt@1 body:
//
//   - "ok" with the destination's enqueued_seq on the first delivery;
//   - "already_enqueued" with the first delivery's seq when the message
//     was delivered before (a retry after a crash between the send and
//     the sender's receipt): still an ok receipt, since the message is
//     there exactly once;
//   - "error", in an error receipt, when the destination is unknown,
//     archived, or in another universe than dest_universe names, or the
//     params are unusable: the store's definite refusals, after which the
//     message was not and will not be delivered; never retried.
//
// Any other store failure (a lost connection, a restarting server, a
// deadline, anything the store does not type as a refusal) leaves the
// outcome unknown: the message may have been written before the answer
// was lost. It is an Unknown attempt error, never an error receipt, and
// since Send is deduplicated by message id it is safe to send again until
// the store answers: register Fabric with RetryUntilKnown (as a node
// does), and the sender gets ok or already_enqueued once the store is
// back. Under a bounded policy the pool's last word is a timeout receipt.
//
// With an Activation (FabricActivation, as a node wires its activator), a
// message to a world that is not placed yet places it, as a client's call
// does, so the destination runs at once instead of at the orchestrator's
// next reconcile.
type Fabric struct {
	st  FabricStore
	act Activation
}

// Activation is told of each destination a message is about to reach,
// just before the send, so that a world that is not placed yet is placed
// and acquired beside the delivery. plane's Activator is the one a node
// uses; the adapter does not depend on it, only on this method.
type Activation interface {
	Activate(ctx context.Context, world string) error
}

// FabricOption configures a Fabric.
type FabricOption func(*Fabric)

// FabricActivation makes the adapter activate each destination (nil: none).
func FabricActivation(a Activation) FabricOption { return func(f *Fabric) { f.act = a } }

// NewFabric returns the fabric.send adapter over st.
func NewFabric(st FabricStore, opts ...FabricOption) *Fabric {
	f := &Fabric{st: st}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Kinds implements Adapter.
func (*Fabric) Kinds() []string { return []string{KindFabric} }

// Execute implements Adapter.
func (f *Fabric) Execute(ctx context.Context, item vocab.EffectItem) (effect.Result, error) {
	d, err := world.FabricMessage(item.Intent)
	if err != nil {
		return fabricError(item, "", "fabric.send intent: "+err.Error()), nil
	}
	if d.DestUniverse != "" {
		w, err := f.st.GetWorld(ctx, d.DestWorld)
		switch {
		case errors.Is(err, store.ErrWorldNotFound):
			return fabricError(item, d.DestWorld, "destination world not found"), nil
		case err != nil:
			return effect.Result{}, effect.Unknown(err)
		case w.Universe != d.DestUniverse:
			return fabricError(item, d.DestWorld, "destination world is not in universe "+d.DestUniverse), nil
		}
	}
	if f.act != nil {
		// Best effort: a failed activation leaves the world to the
		// reconcile, and the message goes in regardless.
		_ = f.act.Activate(ctx, d.DestWorld)
	}
	r, err := f.st.Send(ctx, d.DestWorld, d.MessageID, store.InboxItem{Payload: d.Payload})
	switch {
	case errors.Is(err, store.ErrWorldNotFound):
		return fabricError(item, d.DestWorld, "destination world not found"), nil
	case errors.Is(err, store.ErrWorldArchived):
		return fabricError(item, d.DestWorld, "destination world is archived"), nil
	case errors.Is(err, store.ErrInvalid):
		return fabricError(item, d.DestWorld, err.Error()), nil
	case err != nil:
		return effect.Result{}, effect.Unknown(err)
	}
	status := world.FabricStatusOK
	if r.Status == store.FabricAlreadyEnqueued {
		status = world.FabricStatusAlreadyEnqueued
	}
	return effect.OK(world.FabricSendReceipt{
		Status: status, MessageID: d.MessageID, DestWorld: d.DestWorld, EnqueuedSeq: world.SeqBytes(r.Seq),
	}), nil
}

// fabricError is the terminal answer to a send that cannot be delivered.
// The seed's receipt has no field for a reason, so the reason goes to the
// error receipt's status alone and to the logs of whoever reads the
// effect's status; the body keeps exactly the seed's fields.
func fabricError(item vocab.EffectItem, dest, _ string) effect.Result {
	return effect.Result{Status: vocab.ReceiptError, Body: world.FabricSendReceipt{
		Status: world.FabricStatusError, MessageID: item.IntentHash, DestWorld: dest,
	}}
}
