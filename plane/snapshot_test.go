package plane_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// earlierRelease is a holder's store handle that, while on, drops the
// snapshot of every commit: it plays a node of a release that consumes a
// snapshot request without taking the snapshot (periodic snapshots are
// a thousand heights apart, so every snapshot here is one asked for).
type earlierRelease struct {
	store.Store
	on atomic.Bool
}

func (e *earlierRelease) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	if e.on.Load() {
		b.Snapshot = nil
	}
	return e.Store.Commit(ctx, world, epoch, b)
}

// snapshotWithin asks for id's snapshot under a deadline of limit on the
// lab's clock.
func snapshotWithin(env *lab.Env, c *plane.Client, id string, limit time.Duration) (store.Snapshot, error) {
	ctx, cancel := actor.WithDeadline(env.Ctx, env.Lab, env.Lab.Now().Add(limit))
	defer cancel()
	return c.Snapshot(ctx, id)
}

// TestSnapshotIsNeverOlderThanTheHeadAskedAt: a world's holder consumes a
// snapshot request without taking the snapshot (a node of an earlier
// release): the request does not return the older snapshot the world had
// as if new, but waits, and ends in ErrSnapshotPending when its deadline
// comes first; a request that waits while the world comes under a holder
// that takes snapshots gets one at or above the head it was asked at.
// (Before, the older snapshot was returned.)
func TestSnapshotIsNeverOlderThanTheHeadAskedAt(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 31, Name: "snapshot-head"}, func(env *lab.Env) error {
		base := newStore(env)
		if err := createAssigned(env.Ctx, base, "w", "A"); err != nil {
			return err
		}
		st := &earlierRelease{Store: base.Restart()}
		replies := plane.NewReplies()
		hc := hostConfig("A", st, replies)
		hc.SnapshotEvery = 1000
		h, err := plane.StartHost(env.Ctx, env.Root, hc)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, err := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: env.Lab, Replies: replies,
			Hosts: []*plane.Host{h}})
		if err != nil {
			return err
		}
		step := func(k string) error {
			_, err := c.Send(env.Ctx, "w", Add{By: 1, Key: k}, k)
			if err != nil {
				return err
			}
			_, err = callWithin(env, c, "w", 5*time.Second)
			return err
		}
		if err := step("a"); err != nil {
			return err
		}
		first, err := snapshotWithin(env, c, "w", 5*time.Second)
		if err != nil {
			return fmt.Errorf("snapshot by this release: %w", err)
		}
		if err := step("b"); err != nil {
			return err
		}
		head, err := base.Head(env.Ctx, "w")
		if err != nil || head <= first.Height {
			return fmt.Errorf("head %d (err %v), want above the first snapshot's %d", head, err, first.Height)
		}

		st.on.Store(true)
		snap, err := snapshotWithin(env, c, "w", 2*time.Second)
		if !errors.Is(err, plane.ErrSnapshotPending) || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("snapshot served by an earlier release: height %d, err %v; want ErrSnapshotPending at the deadline, not the older snapshot", snap.Height, err)
		}

		// A request waiting while the world comes under a holder that
		// takes snapshots gets one.
		type result struct {
			snap store.Snapshot
			err  error
		}
		got := make(chan result, 1)
		if _, err := env.Root.Go("snapshot", func(context.Context) error {
			s, err := snapshotWithin(env, c, "w", 30*time.Second)
			got <- result{s, err}
			return nil
		}); err != nil {
			return err
		}
		if err := sleep(env, 2*time.Second); err != nil {
			return err
		}
		st.on.Store(false)
		var r result
		if err := testrig.WaitLab(env, "the waiting request's answer", 30*time.Second, func() (bool, error) {
			select {
			case r = <-got:
				return true, nil
			default:
				return false, nil
			}
		}); err != nil {
			return err
		}
		if r.err != nil || r.snap.Height < head {
			return fmt.Errorf("snapshot at %d, err %v; want one at or above the head %d", r.snap.Height, r.err, head)
		}
		return nil
	})
}
