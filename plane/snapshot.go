package plane

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// KindSnapshot is the inbox item that asks a world for a snapshot now,
// rather than at its next SnapshotEvery boundary (a fork starts from a
// snapshot, and nobody should wait a thousand heights for one).
//
// It goes through the inbox, like any input, for the reasons a snapshot
// must be taken where it is: only the lease holder may write one (the
// commit is fenced by its epoch), and only at a step boundary, where the
// state is one the journal accounts for. The holder, wherever it runs,
// consumes the item in a cycle without stepping it (it is no input of the
// world's and leaves no journal record) and writes a snapshot of the
// state that cycle ends on, in that cycle's commit.
const KindSnapshot = "snapshot"

// Snapshot asks world for a snapshot of its state now and waits for it:
// it reads the world's head, activates the world as a call does (a world
// not placed yet is placed and taken at once), enqueues a KindSnapshot
// item, waits (as Call waits for a reply) until the world's inbox cursor
// has passed it, and returns the world's active snapshot once its height
// is at least that head. A request consumed without a snapshot that high
// (by a holder of an earlier release, which takes no snapshot on demand)
// is asked again, and the wait goes on: ErrSnapshotPending, wrapping the
// context's error, if ctx ends first, never an older snapshot passed off
// as new. A paused or archived world gives store.ErrWorldPaused or
// ErrWorldArchived; one paused while the request waits keeps it waiting
// until it is resumed or ctx ends.
func (c *Client) Snapshot(ctx context.Context, worldID string) (store.Snapshot, error) {
	const op = "snapshot"
	st := c.cfg.Store
	rec, err := st.GetWorld(ctx, worldID)
	if err != nil {
		return store.Snapshot{}, err
	}
	if _, err := c.cfg.Kernels.of(op, rec); err != nil {
		return store.Snapshot{}, err
	}
	// A paused world keeps its input for later: the request would wait
	// for a resume, so it is refused instead (its active snapshot, if
	// any, is what a fork of it starts from).
	switch rec.Status {
	case store.WorldPaused:
		return store.Snapshot{}, store.Errorf(op, store.ErrWorldPaused, worldID, "a paused world takes no snapshot until it is resumed")
	case store.WorldArchived:
		return store.Snapshot{}, store.Errorf(op, store.ErrWorldArchived, worldID, "")
	}
	// The snapshot must cover every step taken before the request: read
	// before the request goes in, the head is the least height it may have.
	head, err := st.Head(ctx, worldID)
	if err != nil {
		return store.Snapshot{}, err
	}
	activate(ctx, c.cfg.Activator, worldID)
	ack, err := enqueue(ctx, st, nil, op, worldID, store.InboxItem{Kind: KindSnapshot})
	if err != nil {
		return store.Snapshot{}, err
	}
	p := c.cfg.Executor.NewParker()
	delay := c.cfg.PollMin
	for {
		cur, err := st.Cursor(ctx, worldID)
		if err != nil {
			return store.Snapshot{}, pending(ctx, worldID, err)
		}
		if cur >= ack.Seq {
			snap, ok, err := st.ActiveSnapshot(ctx, worldID)
			if err != nil {
				return store.Snapshot{}, pending(ctx, worldID, err)
			}
			if ok && snap.Height >= head {
				return snap, nil
			}
			// Consumed without the snapshot it asked for: ask again, for
			// a holder that takes them (one of this release, once the
			// world moves), and keep waiting.
			if ack, err = enqueue(ctx, st, nil, op, worldID, store.InboxItem{Kind: KindSnapshot}); err != nil {
				return store.Snapshot{}, pending(ctx, worldID, err)
			}
		}
		t := c.cfg.Executor.AfterFunc(delay, p.Unpark)
		err = p.Park(ctx)
		t.Stop()
		if err != nil {
			return store.Snapshot{}, pending(ctx, worldID, err)
		}
		delay = min(2*delay, c.cfg.PollMax)
	}
}

// pending is the error of a snapshot request whose wait ended on ctx
// (ErrSnapshotPending), or err itself for any other failure.
func pending(ctx context.Context, worldID string, err error) error {
	if ctx.Err() != nil {
		return errorf("snapshot", ErrSnapshotPending, worldID, ctx.Err())
	}
	return err
}
