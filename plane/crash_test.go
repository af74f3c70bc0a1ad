package plane_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

var errCrash = errors.New("injected crash")

// crashPoint says where worker A dies.
type crashPoint struct {
	name string
	// arm is told every store op of A's handle (before it runs) and every
	// host event of A; it returns true to crash A there.
	op func(op string, prev string) bool
	ev func(ev plane.HostEvent) bool
}

var crashPoints = []crashPoint{
	{name: "after-lease-acquire", op: func(op, prev string) bool { return prev == "acquire_leases" }},
	{name: "after-inbox-read-before-step", ev: func(ev plane.HostEvent) bool { return ev.Kind == plane.EvStep }},
	{name: "between-step-and-commit", op: func(op, prev string) bool { return op == "commit" }},
	{name: "after-commit", op: func(op, prev string) bool { return prev == "commit" }},
}

// TestCrashMatrix: worker A crashes at each boundary of the world cycle,
// then the world restarts on A again (same worker, new process) or on B.
// After it, every acknowledged Send is journaled exactly once, the crashed
// handle's writes are rejected (no stale write is accepted, and A never
// commits after B), the state is the replay of the journal, and every inbox
// item has exactly one record.
func TestCrashMatrix(t *testing.T) {
	for _, b := range testrig.Backends() {
		t.Run(b, func(t *testing.T) {
			for _, cp := range crashPoints {
				for _, successor := range []string{"A", "B"} {
					t.Run(cp.name+"/restart-on-"+successor, func(t *testing.T) {
						seeds := uint64(5)
						if b != "memstore" {
							seeds = 1 // the production executor: a seed schedules nothing
						}
						for seed := uint64(1); seed <= seeds; seed++ {
							runOn(t, b, lab.Config{Seed: seed, Faults: lab.Faults{DelayWakeups: 0.05}, Name: "crash-matrix"}, crashScenario(cp, successor))
						}
					})
				}
			}
		})
	}
}

func crashScenario(cp crashPoint, successor string) func(r *rig) error {
	return func(r *rig) error {
		base := r.Store
		if err := createAssigned(r.Ctx, base, "c", "A"); err != nil {
			return err
		}
		var mu sync.Mutex // real backends call the hook from many goroutines
		crashed := false
		wake := r.Ex.NewParker()
		var stA *handle
		prev := ""
		crashLocked := func() {
			if !crashed {
				crashed = true
				stA.Crash()
				wake.Unpark()
			}
		}
		hook := func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			defer func() { prev = op }()
			if crashed {
				return errCrash
			}
			if cp.op != nil && cp.op(op, prev) && prev != "" {
				crashLocked()
				return errCrash
			}
			return nil
		}
		stA = r.handle(hook)
		var commits []plane.HostEvent
		cfgA := r.hostConfig("A", stA, nil)
		cfgA.Observe = func(ev plane.HostEvent) {
			mu.Lock()
			defer mu.Unlock()
			if cp.ev != nil && cp.ev(ev) {
				crashLocked()
			}
			if ev.Kind == plane.EvCommit && !crashed {
				commits = append(commits, plane.HostEvent{Kind: "A", Epoch: ev.Epoch, Height: ev.Height})
			}
		}
		a, err := plane.StartHost(r.Ctx, r.Root, cfgA)
		if err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: r.Ex})
		acked := map[string]uint64{}
		send := func(i int) error {
			key := fmt.Sprint("k", i)
			ack, err := c.Send(r.Ctx, "c", Add{By: int64(i), Key: key}, key)
			if err != nil {
				return err
			}
			acked[key] = ack.Seq
			return nil
		}
		for i := range 6 {
			if err := send(i); err != nil {
				return err
			}
		}
		if err := wake.Park(r.Ctx); err != nil { // A has crashed
			return err
		}
		a.Kill(r.Ctx)
		oldEpoch := uint64(0)
		if l, ok, _ := base.GetLease(r.Ctx, "c"); ok {
			oldEpoch = l.Epoch
		}
		// The successor may acquire once A's lease has expired.
		if err := r.Advance(cfgA.LeaseTTL); err != nil {
			return err
		}
		if successor != "A" {
			if err := base.Assign(r.Ctx, "c", store.Assignment{DesiredWorker: successor}, nil); err != nil {
				return err
			}
		}
		cfgS := r.hostConfig(successor, r.handle(nil), nil)
		cfgS.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvCommit {
				mu.Lock()
				commits = append(commits, plane.HostEvent{Kind: successor + "'", Epoch: ev.Epoch, Height: ev.Height})
				mu.Unlock()
			}
		}
		s, err := plane.StartHost(r.Ctx, r.Root, cfgS)
		if err != nil {
			return err
		}
		defer s.Stop(r.Ctx)
		for i := 6; i < 12; i++ {
			if err := send(i); err != nil {
				return err
			}
		}
		if err := r.drained("c"); err != nil {
			return err
		}
		if err := s.Stop(r.Ctx); err != nil {
			return err
		}
		// The crashed handle can write nothing, and a write at the old
		// epoch after a takeover by another worker is fenced.
		if _, _, err := stA.Enqueue(r.Ctx, "c", store.InboxItem{Kind: "event", Payload: []byte{0xa0}}); err == nil {
			return fmt.Errorf("the crashed handle still writes")
		}
		if successor != "A" && oldEpoch > 0 {
			cur, _ := base.Cursor(r.Ctx, "c")
			head, _ := base.Head(r.Ctx, "c")
			_, err := base.Commit(r.Ctx, "c", oldEpoch, store.CommitBatch{ExpectedCursor: cur, NewCursor: cur, ExpectedHead: head})
			if !errors.Is(err, store.ErrFenced) {
				return fmt.Errorf("a commit at the old epoch %d: %v", oldEpoch, err)
			}
		}
		// Commits: A's, then the successor's, epochs never going down.
		mu.Lock()
		cs := slices.Clone(commits)
		mu.Unlock()
		for i := 1; i < len(cs); i++ {
			if cs[i].Epoch < cs[i-1].Epoch || cs[i].Height <= cs[i-1].Height {
				return fmt.Errorf("commits out of order: %+v", cs)
			}
		}
		snap, err := parity(r.Ctx, base, "c")
		if err != nil {
			return err
		}
		v, err := value(snap, "c")
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, k := range v.Seen {
			seen[k]++
		}
		for k := range acked {
			if seen[k] != 1 {
				return fmt.Errorf("acknowledged %s applied %d times (state %+v)", k, seen[k], v)
			}
		}
		if len(v.Seen) != len(acked) {
			return fmt.Errorf("%d applied, %d acknowledged", len(v.Seen), len(acked))
		}
		return nil
	}
}

// TestPausedHolderIsFenced: worker A is frozen inside a store call past its
// lease's TTL while B takes the world over. When A thaws, its commit is
// rejected by the store, and A runs no handler and commits nothing after
// its lease's expiry.
func TestPausedHolderIsFenced(t *testing.T) {
	forEachBackend(t, 11, "paused-holder", func(r *rig) error {
		base, ctx := r.Store, r.Ctx
		if err := createAssigned(ctx, base, "z", "A"); err != nil {
			return err
		}
		var mu sync.Mutex // real backends call the hook from many goroutines
		armed := false
		// paused freezes every store call of A (its world process and its
		// controller alike) until thawed: the whole worker stops.
		paused, frozen := false, r.Ex.NewParker()
		var blocked []actor.Parker
		var fencedErrs []error
		hook := func(op string) error {
			mu.Lock()
			if op == "commit" && !paused && len(blocked) == 0 && armed {
				paused = true
				frozen.Unpark()
			}
			if !paused {
				mu.Unlock()
				return nil
			}
			p := r.Ex.NewParker()
			blocked = append(blocked, p)
			mu.Unlock()
			_ = p.Park(ctx)
			return nil
		}
		stA := r.handle(hook)
		// A's steps and commits after it froze: there must be none, since
		// its lease expires while it is frozen (A's own clock and the
		// store's agree under the lab; on a real store only the store's
		// clock is moved past the expiry).
		var late []plane.HostEvent
		cfgA := r.hostConfig("A", stA, nil)
		cfgA.Observe = func(ev plane.HostEvent) {
			mu.Lock()
			defer mu.Unlock()
			if (ev.Kind == plane.EvStep || ev.Kind == plane.EvCommit) && paused {
				late = append(late, ev)
			}
			if ev.Kind == plane.EvFenced && ev.World == "z" {
				fencedErrs = append(fencedErrs, ev.Err)
			}
		}
		a, err := plane.StartHost(ctx, r.Root, cfgA)
		if err != nil {
			return err
		}
		defer a.Stop(ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: r.Ex})
		if _, err := c.Send(ctx, "z", Add{By: 1, Key: "1"}, "1"); err != nil {
			return err
		}
		if err := r.drained("z"); err != nil {
			return err
		}
		// Freeze A at its next commit: from then on the whole worker is
		// paused, renewals included.
		mu.Lock()
		armed = true
		mu.Unlock()
		if _, err := c.Send(ctx, "z", Add{By: 2, Key: "2"}, "2"); err != nil {
			return err
		}
		if err := frozen.Park(ctx); err != nil {
			return err
		}
		// Frozen past its TTL; B is assigned and takes over.
		if err := r.Advance(cfgA.LeaseTTL); err != nil {
			return err
		}
		if err := base.Assign(ctx, "z", store.Assignment{DesiredWorker: "B"}, nil); err != nil {
			return err
		}
		b, err := plane.StartHost(ctx, r.Root, r.hostConfig("B", r.handle(nil), nil))
		if err != nil {
			return err
		}
		defer b.Stop(ctx)
		if err := r.WaitFor("B takes over", 10*time.Second, func() (bool, error) {
			_, ok := b.Lease("z")
			return ok, nil
		}); err != nil {
			return err
		}
		if err := r.drained("z"); err != nil {
			return err
		}
		mu.Lock()
		paused = false
		thaw := blocked
		blocked = nil
		mu.Unlock()
		for _, p := range thaw { // A resumes, its frozen commit first
			p.Unpark()
		}
		// The world process reports its thawed commit's error when it
		// stops (the controller may have dropped the lease first).
		storeFenced := func() bool {
			for _, err := range fencedErrs {
				if errors.Is(err, store.ErrFenced) {
					return true
				}
			}
			return false
		}
		if err := r.WaitFor("A's thawed commit fenced by the store", 10*time.Second, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return storeFenced(), nil
		}); err != nil {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("%w: A stopped with %v", err, fencedErrs)
		}
		mu.Lock()
		ran := late
		mu.Unlock()
		if len(ran) != 0 {
			return fmt.Errorf("A ran after it froze past its lease: %+v", ran)
		}
		snap, err := parity(ctx, base, "z")
		if err != nil {
			return err
		}
		v, _ := value(snap, "z")
		if v.N != 3 {
			return fmt.Errorf("state %+v, want N=3 (each add once)", v)
		}
		return nil
	})
}
