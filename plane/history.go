package plane

import (
	"context"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// The read paths of a world's history: its state at a past height and
// each past step re-derived. Neither writes anything nor needs the
// world's lease: both replay the journal from a stored snapshot with the
// world's kernel, as a restore does, so what they show is what the world
// computed (replay checks every step against its record).

// StateAt returns world's state at height (world_state_at): replayed
// from the highest stored snapshot at or below height and the journal
// between the two. The height must be at most the journal head
// (ErrInvalid otherwise). A height whose journal is compacted (between
// the snapshot and the height lie records at or below the compaction
// floor) is the store's *store.CompactedError (errors.Is
// store.ErrCompacted): that state can no longer be derived. A fork has no
// history of its own below its fork point: asking for it is ErrInvalid.
func (o *Ops) StateAt(ctx context.Context, worldID string, height uint64) (world.Snapshot, error) {
	inst, err := o.instanceAt(ctx, "state_at", worldID, height)
	if err != nil {
		return world.Snapshot{}, err
	}
	return inst.Snapshot(), nil
}

// instanceAt is the world at height, checked as StateAt documents.
func (o *Ops) instanceAt(ctx context.Context, op, worldID string, height uint64) (world.Instance, error) {
	rec, err := o.st.GetWorld(ctx, worldID)
	if err != nil {
		return nil, err
	}
	kern, err := o.kernels.of(op, rec)
	if err != nil {
		return nil, err
	}
	head, err := o.st.Head(ctx, worldID)
	if err != nil {
		return nil, err
	}
	if height > head {
		return nil, errorf(op, ErrInvalid, worldID, detail("height %d is above the journal head %d", height, head))
	}
	if rec.ParentWorld != "" && height < rec.ForkedAtHeight {
		return nil, errorf(op, ErrInvalid, worldID, detail("height %d is below the fork point %d: that history is %s's", height, rec.ForkedAtHeight, rec.ParentWorld))
	}
	base, err := baselineBelow(ctx, o.st, kern, rec, height+1)
	if err != nil {
		return nil, err
	}
	if base.Height < height {
		floor, err := o.st.Floor(ctx, worldID)
		if err != nil {
			return nil, err
		}
		if base.Height < floor {
			return nil, &store.CompactedError{Op: op, Stream: worldID, After: base.Height, Floor: floor}
		}
	}
	tail, err := readRange(ctx, o.st, worldID, base.Height, height)
	if err != nil {
		return nil, err
	}
	inst, err := kern.Replay(worldID, base, tail)
	if err != nil {
		return nil, errorf(op, ErrInvalid, worldID, err)
	}
	if inst.Height() != height {
		// A world created from a seed has no journal below its seed: the
		// replay stops where its records start.
		return nil, errorf(op, ErrInvalid, worldID, detail("no state at height %d: the journal from %d does not reach it", height, base.Height))
	}
	return inst, nil
}

// forkDerived forks src at a height with no stored snapshot: src is
// replayed up to the height and the fork's baseline is that state, whose
// hash the lineage records (so a restore of the fork recognises its
// genesis and drops what src awaited, as for a fork from a snapshot).
func (o *Ops) forkDerived(ctx context.Context, src string, height uint64, newWorld string) (store.World, error) {
	// An existing fork answers a repeat without a replay.
	if prev, err := o.st.GetWorld(ctx, newWorld); err == nil {
		if prev.ParentWorld == src && prev.ForkedAtHeight == height {
			return prev, nil
		}
		return store.World{}, errorf("world_fork", ErrConflict, newWorld, detail("world %q exists", newWorld))
	}
	inst, err := o.instanceAt(ctx, "world_fork", src, height)
	if err != nil {
		return store.World{}, err
	}
	state := inst.State()
	return o.st.ForkWorldFrom(ctx, src, store.Snapshot{Height: height, State: state, StateHash: world.Hash(state)}, newWorld)
}

// readRange reads world's journal records (after, upTo].
func readRange(ctx context.Context, st store.Store, id string, after, upTo uint64) ([]event.Envelope, error) {
	var out []event.Envelope
	for after < upTo {
		page, err := st.Read(ctx, id, after, int(min(upTo-after, readPage)))
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if e.RunSeq > upTo {
				return out, nil
			}
			out = append(out, e)
		}
		after = page[len(page)-1].RunSeq
	}
	return out, nil
}

// Derived is one journal record's step derived again: what the step did
// beyond what its record keeps (the record holds the hashes of the
// intents, timers and reply, not their contents).
type Derived struct {
	Height uint64
	Result world.StepResult
}

// Derive re-derives the steps of recs, consecutive records of world's
// journal in height order (world_derive): the world at the height before
// the first is restored as StateAt restores it, then each record's input
// is stepped again (refused again, for a step the store refused) and the
// result checked against the record's state hash. It returns the steps
// derived, in order, and, when it stopped short of the last record, why
// (the journal below the first is compacted, the definition diverges from
// the record, a record that is not a world step): a reader shows the
// records it has and says why the rest are bare.
func (o *Ops) Derive(ctx context.Context, worldID string, recs []event.Envelope) ([]Derived, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	const op = "world_derive"
	inst, err := o.instanceAt(ctx, op, worldID, recs[0].RunSeq-1)
	if err != nil {
		return nil, err
	}
	out := make([]Derived, 0, len(recs))
	for i := range recs {
		e := recs[i]
		if e.RunSeq != inst.Height()+1 {
			return out, errorf(op, ErrInvalid, worldID, detail("record at height %d does not follow %d", e.RunSeq, inst.Height()))
		}
		in, err := world.RecordInput(e)
		if err != nil {
			return out, errorf(op, ErrInvalid, worldID, err)
		}
		refused, err := world.RecordRefused(e)
		if err != nil {
			return out, errorf(op, ErrInvalid, worldID, err)
		}
		var res world.StepResult
		if refused {
			res, err = inst.Refuse(in, e.EmittedAt, errRefusedAgain)
		} else {
			res, err = inst.Step(in, e.EmittedAt)
		}
		if err != nil {
			return out, errorf(op, ErrInvalid, worldID, err)
		}
		if want := o.recordStateHash(e); res.StateHash != want {
			return out, errorf(op, ErrInvalid, worldID, &world.DivergenceError{Height: e.RunSeq, Reason: world.ReasonState,
				Want: world.StepDigest{StateHash: want}, Got: world.StepDigest{StateHash: res.StateHash}})
		}
		out = append(out, Derived{Height: e.RunSeq, Result: res})
	}
	return out, nil
}

// errRefusedAgain stands for the store's refusal a refused step's record
// names: re-deriving it needs a reason, and the record keeps the text.
const errRefusedAgain = sentinel("refused when it was committed")

// recordStateHash is the state hash a step record keeps ("" if it is not
// one).
func (o *Ops) recordStateHash(e event.Envelope) string {
	var r struct {
		StateHash string `cbor:"state_hash"`
	}
	if err := o.recDec.Unmarshal(e.Payload, &r); err != nil {
		return ""
	}
	return r.StateHash
}
