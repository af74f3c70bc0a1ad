package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

func TestRegisterDeadPIDIsNoProc(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		dead := deadPID(t, sys)
		for _, pid := range []actor.PID{dead, {}} {
			l, err := reg.Register("svc", pid)
			if l != nil || !errors.Is(err, actor.ErrNoProc) {
				t.Fatalf("Register(dead %s) = %v, %v; want nil, actor.ErrNoProc", pid, l, err)
			}
			var np *NoProcError
			if !errors.As(err, &np) || np.Name != "svc" || np.PID != pid {
				t.Fatalf("Register(dead %s): %#v, want *NoProcError", pid, err)
			}
		}
		wantUnbound(t, reg, "svc")
		if n := reg.Names(); len(n) != 0 {
			t.Fatalf("Names() = %q after failed registrations, want none", n)
		}
	})
}

func TestRegisterRejectsEmptyNameAndNonPositiveTTL(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		a := spawnIdle(t, sys, "a")
		if _, err := reg.Register("", a); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("Register(\"\") = %v, want ErrInvalidName", err)
		}
		for _, d := range []time.Duration{0, -1} {
			if _, err := reg.Register("svc", a, WithTTL(d)); !errors.Is(err, ErrInvalidTTL) {
				t.Fatalf("WithTTL(%d): %v, want ErrInvalidTTL", d, err)
			}
		}
		wantUnbound(t, reg, "svc")
	})
}

// stopper is a holder that ends itself on request, in the way the message
// names.
type stopper struct{ actor.Base }

func (stopper) Handle(p *actor.Proc, how string) error {
	switch how {
	case "error":
		return errors.New("boom")
	case "panic":
		panic("boom")
	case "exit":
		p.Exit(nil)
	}
	return nil
}

// observation is what a watcher saw about the name when it was told the
// holder had exited.
type observation struct {
	via    string // "down" or "exit"
	bound  bool
	raw    bool // the table entry itself, as the exit hook left it
	holder actor.PID
	lease  LeaseState
}

// watcher monitors (or, trapping exits, is linked to) the holder and records
// the registry's view at the moment the notification is handled.
type watcher struct {
	actor.Base
	holder actor.PID
	reg    *Registry
	lease  *Lease
	name   string
	seen   chan observation
}

func (w *watcher) OnStart(p *actor.Proc) error {
	p.Monitor(w.holder)
	return nil
}

func (w *watcher) Handle(*actor.Proc, struct{}) error { return nil }

func (w *watcher) HandleInfo(_ *actor.Proc, info any) error {
	via := ""
	switch m := info.(type) {
	case actor.Down:
		if m.PID == w.holder {
			via = "down"
		}
	case actor.Exit:
		if m.From == w.holder {
			via = "exit"
		}
	}
	if via != "" {
		raw := rawBound(w.reg, w.name) // before Whereis, which would clean up lazily
		pid, bound := w.reg.Whereis(w.name)
		w.seen <- observation{via: via, bound: bound, raw: raw, holder: pid, lease: w.lease.State()}
	}
	return nil
}

// Kept beside lab's TestLabRegistryNameReleasedNoLaterThanDown: it checks the registry's table itself (rawBound) at the Down and at a linked Exit, which only an internal test can.
func TestNameReleasedOnExitBeforeDown(t *testing.T) {
	ends := map[string]func(context.Context, *actor.Ref[string]){
		"stop":  func(ctx context.Context, r *actor.Ref[string]) { _, _ = r.Stop(ctx) },
		"abort": func(_ context.Context, r *actor.Ref[string]) { r.Abort() },
		"error": func(ctx context.Context, r *actor.Ref[string]) { _ = r.Send(ctx, "error") },
		"panic": func(ctx context.Context, r *actor.Ref[string]) { _ = r.Send(ctx, "panic") },
		"exit":  func(ctx context.Context, r *actor.Ref[string]) { _ = r.Send(ctx, "exit") },
	}
	for _, how := range []string{"stop", "abort", "error", "panic", "exit"} {
		t.Run(how, func(t *testing.T) {
			inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
				ctx := context.Background()
				holder, err := actor.Spawn[string](ctx, sys.Root(), stopper{}, actor.WithName("holder"))
				if err != nil {
					t.Fatal(err)
				}
				lease := mustRegister(t, reg, "svc", holder.PID())
				seen := make(chan observation, 2)
				w := &watcher{holder: holder.PID(), reg: reg, lease: lease, name: "svc", seen: seen}
				if _, err := actor.Spawn[struct{}](ctx, sys.Root(), w, actor.WithName("monitor")); err != nil {
					t.Fatal(err)
				}
				// A second watcher linked to the holder and trapping exits.
				lw := &watcher{holder: holder.PID(), reg: reg, lease: lease, name: "svc", seen: seen}
				if _, err := actor.Spawn[struct{}](ctx, sys.Root(), linkOnly{lw}, actor.WithName("linked"),
					actor.WithLink(holder.PID()), actor.WithTrapExits()); err != nil {
					t.Fatal(err)
				}
				wantBound(t, reg, "svc", holder.PID())

				ends[how](ctx, holder)

				got := map[string]bool{}
				for range 2 {
					o := <-seen
					got[o.via] = true
					if o.bound || o.raw {
						t.Fatalf("%s handled with the name still bound to %s (table entry present: %v)", o.via, o.holder, o.raw)
					}
					if o.lease != LeaseHolderExited {
						t.Fatalf("lease state at %s = %s, want holder exited", o.via, o.lease)
					}
				}
				if !got["down"] || !got["exit"] {
					t.Fatalf("notifications seen: %v, want down and exit", got)
				}
				err = lease.Renew()
				if !errors.Is(err, ErrLeaseReleased) || !errors.Is(err, actor.ErrNoProc) {
					t.Fatalf("Renew after exit = %v, want ErrLeaseReleased and actor.ErrNoProc", err)
				}
			})
		})
	}
}

// linkOnly is a watcher that relies on its link (set at spawn) rather than
// a monitor.
type linkOnly struct{ *watcher }

func (linkOnly) OnStart(*actor.Proc) error { return nil }

func TestReleaseIsIdempotentAndFreesTheName(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		a, b := spawnIdle(t, sys, "a"), spawnIdle(t, sys, "b")
		l := mustRegister(t, reg, "svc", a)
		l.Release()
		l.Release()
		if l.State() != LeaseReleased {
			t.Fatalf("state after Release = %s", l.State())
		}
		wantUnbound(t, reg, "svc")
		err := l.Renew()
		var le *LeaseError
		if !errors.Is(err, ErrLeaseReleased) || errors.Is(err, ErrLeaseExpired) || !errors.As(err, &le) || le.Name != "svc" {
			t.Fatalf("Renew after Release = %v, want *LeaseError ErrLeaseReleased", err)
		}
		if l.Err() == nil || !errors.Is(l.Err(), ErrLeaseReleased) {
			t.Fatalf("Err after Release = %v", l.Err())
		}
		mustRegister(t, reg, "svc", b)
		l.Release() // a third time, with a newer holder
		var none *Lease
		none.Release() // nil-safe, for defer after a failed Register
		wantBound(t, reg, "svc", b)
		// The holder's exit after Release does not disturb the new holder
		// either: Release removed the old exit hook.
		a.Abort()
		wantBound(t, reg, "svc", b)
	})
}

func TestUnregisterReleasesWhateverHolds(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		a := spawnIdle(t, sys, "a")
		l := mustRegister(t, reg, "svc", a)
		if !reg.Unregister("svc") {
			t.Fatal("Unregister of a bound name reported false")
		}
		if reg.Unregister("svc") {
			t.Fatal("Unregister of an unbound name reported true")
		}
		wantUnbound(t, reg, "svc")
		if l.State() != LeaseReleased || !errors.Is(l.Renew(), ErrLeaseReleased) {
			t.Fatalf("lease after Unregister: %s, %v", l.State(), l.Renew())
		}
	})
}

func TestNamesSorted(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		a := spawnIdle(t, sys, "a")
		in := []string{"zeta", "alpha", "Mu", "beta", "ä", "alpha2", "0"}
		for _, n := range in {
			mustRegister(t, reg, n, a)
		}
		want := slices.Sorted(slices.Values(in))
		for range 5 { // map order varies per call; the result must not
			if got := reg.Names(); !slices.Equal(got, want) {
				t.Fatalf("Names() = %q, want %q", got, want)
			}
		}
		reg.Unregister("beta")
		want = slices.DeleteFunc(want, func(s string) bool { return s == "beta" })
		if got := reg.Names(); !slices.Equal(got, want) {
			t.Fatalf("Names() after Unregister = %q, want %q", got, want)
		}
	})
}

func TestCloseReleasesEveryNameAndRefusesMore(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		a := spawnIdle(t, sys, "a")
		var leases []*Lease
		for _, n := range []string{"c", "a", "b"} {
			leases = append(leases, mustRegister(t, reg, n, a))
		}
		reg.Close()
		reg.Close()
		if n := reg.Names(); len(n) != 0 {
			t.Fatalf("Names() after Close = %q", n)
		}
		for _, l := range leases {
			if l.State() != LeaseReleased {
				t.Fatalf("lease %q after Close: %s", l.Name(), l.State())
			}
		}
		if _, err := reg.Register("a", a); !errors.Is(err, ErrClosed) {
			t.Fatalf("Register after Close = %v, want ErrClosed", err)
		}
	})
}

func TestNoGlobalRegistry(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, _ *Registry) {
		r1, r2 := New(sys.Executor()), New(sys.Executor())
		a, b := spawnIdle(t, sys, "a"), spawnIdle(t, sys, "b")
		mustRegister(t, r1, "svc", a)
		wantUnbound(t, r2, "svc")
		mustRegister(t, r2, "svc", b) // no collision across registries
		wantBound(t, r1, "svc", a)
		wantBound(t, r2, "svc", b)
		r1.Unregister("svc")
		wantUnbound(t, r1, "svc")
		wantBound(t, r2, "svc", b)
		r2.Close()
		mustRegister(t, r1, "svc", a) // closing one leaves the other open
		if !slices.Equal(r1.Names(), []string{"svc"}) || len(r2.Names()) != 0 {
			t.Fatalf("Names: r1 %q, r2 %q", r1.Names(), r2.Names())
		}
	})
	// And statically: the package declares no mutable package-level state.
	checkNoPackageState(t)
}

func TestZeroRegistryIsUsable(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, _ *Registry) {
		var reg Registry
		a := spawnIdle(t, sys, "a")
		l := mustRegister(t, &reg, "svc", a, WithTTL(secs(1))) // TTL from the process's executor
		wantBound(t, &reg, "svc", a)
		if err := actor.Sleep(context.Background(), sys.Executor(), secs(1)); err != nil {
			t.Fatal(err)
		}
		wantUnbound(t, &reg, "svc")
		if l.State() != LeaseExpired {
			t.Fatalf("state %s, want expired", l.State())
		}
	})
}

// Real goroutines racing (no bubble): exactly one registration wins and
// every loser is told who did.
// Kept beside lab's TestLabRegistryCollisionDeterminism: real goroutines racing outside a bubble, which neither table executor gives.
func TestConcurrentRegistrationsHaveOneWinner(t *testing.T) {
	sys := actor.NewSystem(actor.WithExecutor(actor.NewExecutor(1)))
	defer closeSystem(t, sys)
	reg := New(sys.Executor())
	const n = 16
	pids := make([]actor.PID, n)
	for i := range pids {
		pids[i] = spawnIdle(t, sys, fmt.Sprint("p", i))
	}
	for round := range 20 {
		name := fmt.Sprint("name", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		leases := make([]*Lease, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				leases[i], errs[i] = reg.Register(name, pids[i])
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range n {
			if errs[i] == nil {
				if winner >= 0 {
					t.Fatalf("%s: both %d and %d won", name, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody won", name)
		}
		wantBound(t, reg, name, pids[winner])
		for i := range n {
			var taken *NameTakenError
			if i != winner && (!errors.As(errs[i], &taken) || taken.Holder != pids[winner]) {
				t.Fatalf("%s: loser %d got %v, want NameTakenError with holder %s", name, i, errs[i], pids[winner])
			}
		}
	}
}
