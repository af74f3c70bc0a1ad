package registry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

func secs(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// advance moves the bubble's clock by d through the executor seam and lets
// every timer that fired run to completion.
func advance(t *testing.T, ex actor.Executor, d time.Duration) {
	t.Helper()
	if err := actor.Sleep(context.Background(), ex, d); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
}

// Kept beside lab's TestLabRegistryTTLExpiry: it checks that the expiry timer, not a lazy Whereis, empties the table (rawBound, Names), and the LeaseError's state.
func TestTTLExpiresUnlessRenewed(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ex := sys.Executor()
		a := spawnIdle(t, sys, "a")
		start := ex.Now()
		l := mustRegister(t, reg, "svc", a, WithTTL(secs(10)))
		if at, ok := l.ExpiresAt(); !ok || !at.Equal(start.Add(secs(10))) {
			t.Fatalf("ExpiresAt = %v, %v; want %v", at, ok, start.Add(secs(10)))
		}

		advance(t, ex, secs(9.999))
		wantBound(t, reg, "svc", a)
		if l.State() != LeaseActive {
			t.Fatalf("state before TTL = %s", l.State())
		}

		advance(t, ex, time.Millisecond)
		if rawBound(reg, "svc") {
			t.Fatal("the expiry timer did not unbind the name")
		}
		wantUnbound(t, reg, "svc")
		if st := l.State(); st != LeaseExpired {
			t.Fatalf("state after TTL = %s, want expired", st)
		}
		if len(reg.Names()) != 0 {
			t.Fatalf("Names() after expiry = %q", reg.Names())
		}
		err := l.Renew()
		var le *LeaseError
		if !errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseReleased) || !errors.As(err, &le) || le.State != LeaseExpired {
			t.Fatalf("Renew after expiry = %v, want *LeaseError ErrLeaseExpired", err)
		}
		if _, ok := l.ExpiresAt(); ok {
			t.Fatal("ExpiresAt reports a deadline for an expired lease")
		}
		// Expiry unbinds the name only; the process is untouched, and the
		// name is free again.
		if !a.Alive() {
			t.Fatal("expiry stopped the holder")
		}
		mustRegister(t, reg, "svc", a)
		if elapsed := ex.Now().Sub(start); elapsed != secs(10) {
			t.Fatalf("virtual time elapsed %v, want exactly 10s", elapsed)
		}
	})
}

// manualExecutor is a clock that moves only when told and timers that never
// fire: it shows that expiry is decided by the clock, not by when (or
// whether) a timer callback gets to run.
type manualExecutor struct {
	actor.Executor
	now time.Time
}

type deadTimer struct{}

func (deadTimer) Stop() bool { return true }

func (deadTimer) Reset(time.Duration) bool { return true }

func (m *manualExecutor) Now() time.Time { return m.now }

func (m *manualExecutor) AfterFunc(time.Duration, func()) actor.Timer { return deadTimer{} }

func TestExpiryFollowsTheClockEvenIfTheTimerIsLate(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, _ *Registry) {
		ex := &manualExecutor{Executor: sys.Executor(), now: sys.Executor().Now()}
		reg := New(ex)
		a := spawnIdle(t, sys, "a")
		l := mustRegister(t, reg, "svc", a, WithTTL(secs(10)))
		ex.now = ex.now.Add(secs(9))
		if err := l.Renew(); err != nil {
			t.Fatal(err)
		}
		ex.now = ex.now.Add(secs(9.999))
		wantBound(t, reg, "svc", a)
		ex.now = ex.now.Add(time.Millisecond)
		wantUnbound(t, reg, "svc")
		if !errors.Is(l.Renew(), ErrLeaseExpired) || l.State() != LeaseExpired {
			t.Fatalf("lease past its deadline: %s, %v", l.State(), l.Renew())
		}
		mustRegister(t, reg, "svc", a) // the name is free at once
	})
}

func TestRenewWithoutTTLOnlyConfirms(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		a := spawnIdle(t, sys, "a")
		l := mustRegister(t, reg, "svc", a)
		if err := l.Renew(); err != nil {
			t.Fatalf("Renew without TTL: %v", err)
		}
		if _, ok := l.ExpiresAt(); ok || l.TTL() != 0 {
			t.Fatal("a lease without TTL reports a deadline")
		}
		advance(t, sys.Executor(), 1000*time.Hour)
		wantBound(t, reg, "svc", a)
	})
}

// Kept beside lab's TestLabRegistryTTLExpiry: it runs an ended lease's late timer and exit hook by hand (internal), and Unregister and re-registration by the same process.
func TestStaleLeaseNeverRemovesNewerRegistration(t *testing.T) {
	t.Run("expired lease released and renewed", func(t *testing.T) {
		inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
			a, b := spawnIdle(t, sys, "a"), spawnIdle(t, sys, "b")
			old := mustRegister(t, reg, "svc", a, WithTTL(secs(1)))
			advance(t, sys.Executor(), secs(1))
			mustRegister(t, reg, "svc", b)
			old.Release()
			if !errors.Is(old.Renew(), ErrLeaseExpired) {
				t.Fatalf("stale Renew = %v", old.Renew())
			}
			wantBound(t, reg, "svc", b)
			if old.State() != LeaseExpired {
				t.Fatalf("stale lease state changed to %s", old.State())
			}
			a.Abort() // its exit hook was removed at expiry
			wantBound(t, reg, "svc", b)
		})
	})
	t.Run("unregistered holder exits later", func(t *testing.T) {
		inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
			a, c := spawnIdle(t, sys, "a"), spawnIdle(t, sys, "c")
			mustRegister(t, reg, "svc", a)
			reg.Unregister("svc")
			mustRegister(t, reg, "svc", c)
			a.Abort()
			wantBound(t, reg, "svc", c)
		})
	})
	t.Run("same process re-registers after release", func(t *testing.T) {
		inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
			ex := sys.Executor()
			a := spawnIdle(t, sys, "a")
			old := mustRegister(t, reg, "svc", a, WithTTL(secs(5)))
			advance(t, ex, secs(3))
			old.Release()
			cur := mustRegister(t, reg, "svc", a, WithTTL(secs(5)))
			advance(t, ex, secs(3)) // past the old deadline, before the new one
			wantBound(t, reg, "svc", a)
			old.Release()
			if cur.State() != LeaseActive || !errors.Is(old.Renew(), ErrLeaseReleased) {
				t.Fatalf("cur %s, old Renew %v", cur.State(), old.Renew())
			}
			a.Abort() // the one live hook ends the current lease only
			if cur.State() != LeaseHolderExited || old.State() != LeaseReleased {
				t.Fatalf("after exit: cur %s, old %s", cur.State(), old.State())
			}
		})
	})
	// The callbacks of an ended lease can still run late (a timer that fired
	// as it was being stopped, an exit hook already taken by the exiting
	// process). Run them by hand against a newer registration.
	t.Run("late timer and exit hook of an ended lease", func(t *testing.T) {
		inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
			a, b := spawnIdle(t, sys, "a"), spawnIdle(t, sys, "b")
			old := mustRegister(t, reg, "svc", a, WithTTL(secs(5)))
			reg.mu.Lock()
			staleArm := old.arm
			reg.mu.Unlock()
			old.Release()
			cur := mustRegister(t, reg, "svc", b, WithTTL(secs(5)))
			old.expire(staleArm)
			old.end(LeaseHolderExited)
			old.end(LeaseExpired)
			wantBound(t, reg, "svc", b)
			if cur.State() != LeaseActive || old.State() != LeaseReleased {
				t.Fatalf("cur %s, old %s", cur.State(), old.State())
			}
			if cur.Generation() <= old.Generation() {
				t.Fatalf("generations not increasing: old %d, cur %d", old.gen, cur.gen)
			}
			// A superseded timer of the current lease is stale too.
			reg.mu.Lock()
			superseded := cur.arm
			reg.mu.Unlock()
			if err := cur.Renew(); err != nil {
				t.Fatal(err)
			}
			cur.expire(superseded)
			wantBound(t, reg, "svc", b)
		})
	})
}
