package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// interrupting runs before once, the first time a write of the run is
// made through it (an Append or a Commit): another client's takeover in
// the middle of this client's operation.
type interrupting struct {
	store.Store
	run    string
	once   sync.Once
	before func()
}

func (s *interrupting) Append(ctx context.Context, stream string, evs []event.Envelope, o store.AppendOptions) ([]store.Appended, error) {
	if stream == s.run {
		s.once.Do(s.before)
	}
	return s.Store.Append(ctx, stream, evs, o)
}

func (s *interrupting) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	if world == s.run {
		s.once.Do(s.before)
	}
	return s.Store.Commit(ctx, world, epoch, b)
}

// Two clients of one process or two (two API replicas, the CLI beside a
// server) share the default operator id under their own incarnations. One
// cancelling a run while the other's operator path takes it over is fenced
// in the middle of its write; its request is in the inbox already and the
// new holder records it, so the fenced client's Cancel succeeds instead of
// failing with a fencing error, and the run ends cancelled once.
func TestAnOperatorFencedByAnotherClientLeavesItsRequestToTheNewHolder(t *testing.T) {
	forEachBackend(t, 13, func(r *rig) error {
		def := workflow.New("idle2", 1, func(c *workflow.Ctx, _ int) (int, error) { return 0, nil })
		wfs, other, err := r.clientFor(def)
		if err != nil {
			return err
		}
		var otherErr error
		st := &interrupting{Store: r.Store, run: "run", before: func() {
			otherErr = other.Cancel(r.Ctx, "run", "the other client")
		}}
		first, err := workflow.NewClient(st, wfs, r.Ex, workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, first, "run", 0); err != nil {
			return err
		}
		if err := first.Cancel(r.Ctx, "run", "changed my mind"); err != nil {
			return fmt.Errorf("the fenced client's Cancel: %w", err)
		}
		if otherErr != nil {
			return fmt.Errorf("the other client's Cancel: %w", otherErr)
		}
		if _, err := first.Result(r.Ctx, "run"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("result %v, want cancelled", err)
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		n := 0
		for _, e := range evs {
			if e.EventType == event.RunCancelled {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%d RunCancelled events, want 1", n)
		}
		return nil
	})
}
