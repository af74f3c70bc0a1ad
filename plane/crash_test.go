package plane_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
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
	{name: "after-lease-acquire", op: func(op, prev string) bool { return prev == "acquire" }},
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
	for _, cp := range crashPoints {
		for _, successor := range []string{"A", "B"} {
			t.Run(cp.name+"/restart-on-"+successor, func(t *testing.T) {
				for seed := uint64(1); seed <= 5; seed++ {
					res := lab.Run(lab.Config{Seed: seed, Faults: lab.Faults{DelayWakeups: 0.05}, Name: "crash-matrix"}, crashScenario(cp, successor))
					if res.Failure != nil {
						t.Fatalf("seed %d: %v", seed, res.Failure)
					}
				}
			})
		}
	}
}

func crashScenario(cp crashPoint, successor string) lab.Scenario {
	return func(env *lab.Env) error {
		base := newStore(env)
		if err := createAssigned(env.Ctx, base, "c", "A"); err != nil {
			return err
		}
		crashed := false
		wake := env.Lab.NewParker()
		var stA *memstore.Store
		prev := ""
		crash := func() {
			if !crashed {
				crashed = true
				stA.Crash()
				wake.Unpark()
			}
		}
		hook := func(op string) error {
			defer func() { prev = op }()
			if crashed {
				return errCrash
			}
			if cp.op != nil && cp.op(op, prev) && prev != "" {
				crash()
				return errCrash
			}
			return nil
		}
		stA = base.Restart(memstore.WithHook(hook))
		var commits []plane.HostEvent
		cfgA := hostConfig("A", stA, nil)
		cfgA.Observe = func(ev plane.HostEvent) {
			if cp.ev != nil && cp.ev(ev) {
				crash()
			}
			if ev.Kind == plane.EvCommit && !crashed {
				commits = append(commits, plane.HostEvent{Kind: "A", Epoch: ev.Epoch, Height: ev.Height})
			}
		}
		a, err := plane.StartHost(env.Ctx, env.Root, cfgA)
		if err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: env.Lab})
		acked := map[string]uint64{}
		send := func(i int) error {
			key := fmt.Sprint("k", i)
			ack, err := c.Send(env.Ctx, "c", Add{By: int64(i), Key: key}, key)
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
		if err := wake.Park(env.Ctx); err != nil { // A has crashed
			return err
		}
		a.Kill(env.Ctx)
		oldEpoch := uint64(0)
		if l, ok, _ := base.GetLease(env.Ctx, "c"); ok {
			oldEpoch = l.Epoch
		}
		if successor != "A" {
			if err := base.Assign(env.Ctx, "c", store.Assignment{DesiredWorker: successor}); err != nil {
				return err
			}
		}
		cfgS := hostConfig(successor, base.Restart(memstore.WithHook(nil)), nil)
		cfgS.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvCommit {
				commits = append(commits, plane.HostEvent{Kind: successor + "'", Epoch: ev.Epoch, Height: ev.Height})
			}
		}
		s, err := plane.StartHost(env.Ctx, env.Root, cfgS)
		if err != nil {
			return err
		}
		defer s.Stop(env.Ctx)
		for i := 6; i < 12; i++ {
			if err := send(i); err != nil {
				return err
			}
		}
		if err := drained(env, base, "c"); err != nil {
			return err
		}
		// The crashed handle can write nothing, and a write at the old
		// epoch after a takeover by another worker is fenced.
		if _, _, err := stA.Enqueue(env.Ctx, "c", store.InboxItem{Kind: "event", Payload: []byte{0xa0}}); err == nil {
			return fmt.Errorf("the crashed handle still writes")
		}
		if successor != "A" && oldEpoch > 0 {
			cur, _ := base.Cursor(env.Ctx, "c")
			head, _ := base.Head(env.Ctx, "c")
			_, err := base.Commit(env.Ctx, "c", oldEpoch, store.CommitBatch{ExpectedCursor: cur, NewCursor: cur, ExpectedHead: head})
			if !errors.Is(err, store.ErrFenced) {
				return fmt.Errorf("a commit at the old epoch %d: %v", oldEpoch, err)
			}
		}
		// Commits: A's, then the successor's, epochs never going down.
		for i := 1; i < len(commits); i++ {
			if commits[i].Epoch < commits[i-1].Epoch || commits[i].Height <= commits[i-1].Height {
				return fmt.Errorf("commits out of order: %+v", commits)
			}
		}
		snap, err := parity(env.Ctx, base, "c")
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
	res := lab.Run(lab.Config{Seed: 11, Name: "paused-holder"}, func(env *lab.Env) error {
		base := newStore(env)
		if err := createAssigned(env.Ctx, base, "z", "A"); err != nil {
			return err
		}
		armed := false
		// paused freezes every store call of A (its world process and its
		// controller alike) until thawed: the whole worker stops.
		paused, frozen := false, env.Lab.NewParker()
		var blocked []actor.Parker
		var commitErr error
		hook := func(op string) error {
			if op == "commit" && !paused && len(blocked) == 0 && armed {
				paused = true
				frozen.Unpark()
			}
			if paused {
				p := env.Lab.NewParker()
				blocked = append(blocked, p)
				_ = p.Park(env.Ctx)
			}
			return nil
		}
		stA := base.Restart(memstore.WithHook(hook))
		var expiry time.Time
		var late []plane.HostEvent
		cfgA := hostConfig("A", stA, nil)
		cfgA.Observe = func(ev plane.HostEvent) {
			if (ev.Kind == plane.EvStep || ev.Kind == plane.EvCommit) && !expiry.IsZero() && !ev.At.Before(expiry) {
				late = append(late, ev)
			}
			if ev.Kind == plane.EvFenced && ev.World == "z" {
				commitErr = ev.Err
			}
		}
		a, err := plane.StartHost(env.Ctx, env.Root, cfgA)
		if err != nil {
			return err
		}
		defer a.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: env.Lab})
		if _, err := c.Send(env.Ctx, "z", Add{By: 1, Key: "1"}, "1"); err != nil {
			return err
		}
		if err := drained(env, base, "z"); err != nil {
			return err
		}
		// Freeze A at its next commit: from then on the whole worker is
		// paused, renewals included.
		armed = true
		if _, err := c.Send(env.Ctx, "z", Add{By: 2, Key: "2"}, "2"); err != nil {
			return err
		}
		if err := frozen.Park(env.Ctx); err != nil {
			return err
		}
		l, _, _ := base.GetLease(env.Ctx, "z")
		expiry = l.ExpiresAt
		if err := base.Assign(env.Ctx, "z", store.Assignment{DesiredWorker: "B"}); err != nil {
			return err
		}
		b, err := plane.StartHost(env.Ctx, env.Root, hostConfig("B", base.Restart(memstore.WithHook(nil)), nil))
		if err != nil {
			return err
		}
		defer b.Stop(env.Ctx)
		if err := waitFor(env, "B takes over", 10*time.Second, func() (bool, error) {
			_, ok := b.Lease("z")
			return ok, nil
		}); err != nil {
			return err
		}
		if err := drained(env, base, "z"); err != nil {
			return err
		}
		_ = actor.Sleep(env.Ctx, env.Lab, 10*time.Millisecond)
		paused = false
		for _, p := range blocked { // A resumes, its frozen commit first
			p.Unpark()
		}
		if err := sleep(env, time.Second); err != nil {
			return err
		}
		if len(late) != 0 {
			return fmt.Errorf("A ran after its lease expired at %v: %+v", expiry, late)
		}
		if !errors.Is(commitErr, store.ErrFenced) {
			return fmt.Errorf("A's thawed commit was not fenced by the store: %v", commitErr)
		}
		snap, err := parity(env.Ctx, base, "z")
		if err != nil {
			return err
		}
		v, _ := value(snap, "z")
		if v.N != 3 {
			return fmt.Errorf("state %+v, want N=3 (each add once)", v)
		}
		return nil
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
}
