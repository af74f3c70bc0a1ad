package actor_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// counter records the ids of the messages handled.
type counter struct {
	mu  sync.Mutex
	n   int
	ids []int
}

func (c *counter) msg(id int) fn {
	return func(*actor.Proc) error {
		c.mu.Lock()
		c.n++
		c.ids = append(c.ids, id)
		c.mu.Unlock()
		return nil
	}
}

func (c *counter) handled() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.ids...)
}

// fillCount blocks ref in a handler and counts how many TrySends succeed
// before the first ErrMailboxFull; it then releases the process.
func fillCount(t *testing.T, ref *actor.Ref[fn], c *counter, limit int) int {
	t.Helper()
	release := block(t, ref)
	defer release()
	for i := 0; i < limit; i++ {
		if err := ref.TrySend(c.msg(i)); err != nil {
			if !errors.Is(err, actor.ErrMailboxFull) {
				t.Fatalf("TrySend #%d: %v, want nil or ErrMailboxFull", i, err)
			}
			return i
		}
	}
	return limit
}

func TestMailboxDefaultCapacityIs64(t *testing.T) {
	bubble(t, func(t *testing.T) {
		if actor.DefaultMailboxCapacity != 64 {
			t.Errorf("DefaultMailboxCapacity = %d, want 64", actor.DefaultMailboxCapacity)
		}
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{})
		release := block(t, ref)
		for i := range 64 {
			if err := ref.TrySend(c.msg(i)); err != nil {
				t.Fatalf("TrySend #%d into an empty default mailbox: %v", i, err)
			}
		}
		if err := ref.TrySend(c.msg(64)); !errors.Is(err, actor.ErrMailboxFull) {
			t.Errorf("65th TrySend: %v, want ErrMailboxFull", err)
		}
		if q, r := ref.Pending(); q != 64 || r != 0 {
			t.Errorf("Pending() = %d, %d; want 64, 0", q, r)
		}
		release()
		if _, err := ref.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := c.handled(); len(got) != 64 {
			t.Errorf("handled %d messages, want the 64 accepted", len(got))
		}
		closeSys(t, sys)
	})
}

func TestMailboxCapacityIsConfigurablePerProcess(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		for _, tc := range []struct{ opt, want int }{{1, 1}, {5, 5}, {100, 100}, {0, 64}, {-3, 64}} {
			c := &counter{}
			ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(tc.opt))
			if got := fillCount(t, ref, c, 1000); got != tc.want {
				t.Errorf("WithMailbox(%d): %d sends accepted, want %d", tc.opt, got, tc.want)
			}
			if _, err := ref.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := len(c.handled()); got != tc.want {
				t.Errorf("WithMailbox(%d): %d handled, want %d", tc.opt, got, tc.want)
			}
		}
		closeSys(t, sys)
	})
}

func TestTrySendOnFullReturnsErrMailboxFullAndNeverDrops(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(8))
		var mu sync.Mutex
		accepted := map[int]bool{}
		try := func(id int) {
			err := ref.TrySend(c.msg(id))
			switch {
			case err == nil:
				mu.Lock()
				accepted[id] = true
				mu.Unlock()
			case errors.Is(err, actor.ErrMailboxFull):
			default:
				t.Errorf("TrySend(%d): %v, want nil or ErrMailboxFull", id, err)
			}
		}
		// Deterministic phase: blocked consumer, 8 fit, 12 bounce.
		release := block(t, ref)
		for id := range 20 {
			try(id)
		}
		if len(accepted) != 8 {
			t.Errorf("%d of 20 accepted by a blocked mailbox of 8", len(accepted))
		}
		release()
		// Contended phase: several senders against a live consumer.
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 500 {
					try(1000*(g+1) + i)
				}
			})
		}
		wg.Wait()
		if _, err := ref.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		seen := map[int]int{}
		for _, id := range c.handled() {
			seen[id]++
		}
		for id := range accepted {
			if seen[id] != 1 {
				t.Errorf("accepted message %d handled %d times, want exactly once", id, seen[id])
			}
		}
		for id := range seen {
			if !accepted[id] {
				t.Errorf("message %d was handled although its TrySend failed", id)
			}
		}
		closeSys(t, sys)
	})
}

func TestReservePermitSendCommitsAndAbortReleases(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(3))
		release := block(t, ref)
		ctx := context.Background()
		p1, err := ref.Reserve(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := ref.Reserve(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.TrySend(c.msg(1)); err != nil { // 1 queued + 2 reserved = 3
			t.Fatal(err)
		}
		if q, r := ref.Pending(); q != 1 || r != 2 {
			t.Errorf("Pending() = %d, %d; want 1, 2", q, r)
		}
		// Position in the mailbox is fixed at commit, not at reserve.
		if err := p1.Send(c.msg(2)); err != nil {
			t.Fatalf("Permit.Send: %v", err)
		}
		p2.Abort()
		if q, r := ref.Pending(); q != 2 || r != 0 {
			t.Errorf("after Send and Abort: Pending() = %d, %d; want 2, 0", q, r)
		}
		if err := ref.TrySend(c.msg(3)); err != nil {
			t.Errorf("TrySend into the slot an aborted permit released: %v", err)
		}
		release()
		if _, err := ref.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.handled(); len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
			t.Errorf("handled %v, want [1 2 3]", got)
		}
		closeSys(t, sys)
	})
}

func TestReserveCountsAgainstCapacity(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(4))
		release := block(t, ref)
		ctx := context.Background()
		var permits []*actor.Permit[fn]
		for range 2 {
			p, err := ref.Reserve(ctx)
			if err != nil {
				t.Fatal(err)
			}
			permits = append(permits, p)
		}
		for i := range 2 {
			if err := ref.TrySend(c.msg(i)); err != nil {
				t.Fatalf("TrySend #%d with 2 of 4 reserved: %v", i, err)
			}
		}
		if err := ref.TrySend(c.msg(9)); !errors.Is(err, actor.ErrMailboxFull) {
			t.Errorf("TrySend with 2 queued + 2 reserved of 4: %v, want ErrMailboxFull", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if p, err := ref.Reserve(cctx); p != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("Reserve on a full mailbox with a cancelled ctx: %v, %v; want nil, context.Canceled", p, err)
		}
		if q, r := ref.Pending(); q != 2 || r != 2 {
			t.Errorf("Pending() = %d, %d; want 2, 2", q, r)
		}
		permits[0].Abort()
		if err := ref.TrySend(c.msg(2)); err != nil {
			t.Errorf("TrySend after one permit was aborted: %v", err)
		}
		if err := permits[1].Send(c.msg(3)); err != nil {
			t.Errorf("Permit.Send on a full mailbox (its slot is reserved): %v", err)
		}
		release()
		if _, err := ref.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.handled(); len(got) != 4 {
			t.Errorf("handled %v, want 4 messages", got)
		}
		closeSys(t, sys)
	})
}

//go:noinline
func dropPermit(t *testing.T, ref *actor.Ref[fn]) {
	if _, err := ref.Reserve(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Not in a bubble: the runtime runs cleanups outside any bubble.
func TestDroppedPermitReleasesSlot(t *testing.T) {
	tl := &traceLog{}
	sys := newSys(t, tl.opt())
	c := &counter{}
	ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(1))
	release := block(t, ref)
	defer release()
	dropPermit(t, ref)
	if err := ref.TrySend(c.msg(0)); !errors.Is(err, actor.ErrMailboxFull) {
		t.Fatalf("TrySend while the only slot is reserved: %v, want ErrMailboxFull", err)
	}
	// The trace event follows the slot's release: wait for both.
	collectUntil(t, "the release of a dropped permit's slot and its obligation-leak trace", func() bool {
		_, r := ref.Pending()
		return r == 0 && len(tl.of(actor.TraceObligationLeak)) > 0
	})
	if err := ref.TrySend(c.msg(1)); err != nil {
		t.Errorf("TrySend after the dropped permit's slot came back: %v", err)
	}
	leaks := tl.of(actor.TraceObligationLeak)
	if len(leaks) != 1 || leaks[0].PID != ref.PID() {
		t.Errorf("obligation-leak trace events %v, want one for %v", leaks, ref.PID())
	} else if leaks[0].Outcome.Severity != actor.Panicked {
		t.Errorf("leak traced at %v, want panicked severity", leaks[0].Outcome.Severity)
	}
	release()
	closeSys(t, sys)
	if got := c.handled(); len(got) != 1 || got[0] != 1 {
		t.Errorf("handled %v, want [1]", got)
	}
}

func TestBlockingSendHonoursContext(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(1))
		release := block(t, ref)
		if err := ref.TrySend(c.msg(0)); err != nil {
			t.Fatal(err)
		}

		// Cancelled while waiting for room.
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { res <- ref.Send(ctx, c.msg(1)) }()
		synctest.Wait()
		if _, done := ready(res); done {
			t.Fatalf("Send on a full mailbox returned without waiting")
		}
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Send: %v, want context.Canceled", err)
		}

		// Deadline while waiting for room (virtual time).
		tctx, tcancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		if err := ref.Send(tctx, c.msg(2)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Send past its deadline: %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Send waited %v, want 1s", d)
		}
		tcancel()

		// Already cancelled.
		if err := ref.Send(ctx, c.msg(3)); !errors.Is(err, context.Canceled) {
			t.Errorf("Send with a cancelled ctx: %v, want context.Canceled", err)
		}

		if q, r := ref.Pending(); q != 1 || r != 0 {
			t.Errorf("Pending() = %d, %d; want 1, 0: a failed Send must enqueue or hold nothing", q, r)
		}
		release()
		synctest.Wait() // the consumer took message 0 and is idle
		// No abandoned waiter is left in line ahead of new senders.
		if err := ref.TrySend(c.msg(4)); err != nil {
			t.Errorf("TrySend into an empty mailbox after cancelled Sends: %v", err)
		}
		if _, err := ref.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := c.handled(); len(got) != 2 || got[0] != 0 || got[1] != 4 {
			t.Errorf("handled %v, want [0 4]", got)
		}
		closeSys(t, sys)
	})
}

func TestBlockingSendFailsWhenReceiverStops(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(1))
		release := block(t, ref)
		_ = ref.TrySend(c.msg(0))
		res := make(chan error, 1)
		go func() { res <- ref.Send(context.Background(), c.msg(1)) }()
		synctest.Wait()
		ref.PID().Cancel(actor.CancelReason{Kind: actor.CancelRequested})
		release()
		if err := <-res; !errors.Is(err, actor.ErrMailboxClosed) {
			t.Errorf("Send blocked on a stopping process: %v, want ErrMailboxClosed", err)
		}
		_, _ = ref.PID().Wait(context.Background())
		if got := c.handled(); len(got) != 1 || got[0] != 0 {
			t.Errorf("handled %v, want [0]", got)
		}
		if err := ref.TrySend(c.msg(2)); !errors.Is(err, actor.ErrMailboxClosed) {
			t.Errorf("TrySend to a stopped process: %v, want ErrMailboxClosed", err)
		}
		closeSys(t, sys)
	})
}

func TestReserveCancelSafe(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(1))

		type result struct {
			p   *actor.Permit[fn]
			err error
		}
		for i := range 200 {
			release := block(t, ref)
			if err := ref.TrySend(c.msg(i)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan result, 1)
			go func() {
				p, err := ref.Reserve(ctx)
				res <- result{p, err}
			}()
			synctest.Wait() // the reserver is parked in line
			// Race the grant (the consumer frees the slot) against the
			// cancellation; the first iteration cancels alone.
			switch {
			case i == 0:
				cancel()
			case i%2 == 0:
				cancel()
				release()
			default:
				release()
				cancel()
			}
			r := <-res
			switch {
			case r.err == nil && r.p != nil:
				r.p.Abort()
			case r.err != nil && r.p == nil:
				if !errors.Is(r.err, context.Canceled) {
					t.Fatalf("iteration %d: Reserve: %v, want context.Canceled", i, r.err)
				}
			default:
				t.Fatalf("iteration %d: Reserve returned %v, %v", i, r.p, r.err)
			}
			if i == 0 {
				if q, r := ref.Pending(); q != 1 || r != 0 {
					t.Fatalf("cancelled Reserve left Pending() = %d, %d; want 1, 0", q, r)
				}
			}
			release()
			synctest.Wait()
			if q, r := ref.Pending(); q != 0 || r != 0 {
				t.Fatalf("iteration %d: Pending() = %d, %d after the dust settled; want 0, 0 (a slot leaked)", i, q, r)
			}
		}
		// The whole capacity is still there.
		if got := fillCount(t, ref, c, 10); got != 1 {
			t.Errorf("%d sends fit in the mailbox of 1 after the races, want 1", got)
		}
		if _, err := ref.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		closeSys(t, sys)
	})
}

func TestPerSenderFIFO(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		const senders, per = 4, 300
		var mu sync.Mutex
		next := make([]int, senders)
		var violations []string
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(16))
		msg := func(s, i int) fn {
			return func(*actor.Proc) error {
				mu.Lock()
				defer mu.Unlock()
				if next[s] != i && len(violations) < 10 {
					violations = append(violations, fmt.Sprintf("sender %d: expected message %d, got %d", s, next[s], i))
				}
				next[s] = i + 1
				return nil
			}
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		for s := range senders {
			wg.Go(func() {
				for i := range per {
					var err error
					switch s % 3 {
					case 0: // blocking Send
						err = ref.Send(ctx, msg(s, i))
					case 1: // TrySend, retried while full
						for err = ref.TrySend(msg(s, i)); errors.Is(err, actor.ErrMailboxFull); err = ref.TrySend(msg(s, i)) {
							runtime.Gosched()
						}
					case 2: // two-phase
						var p *actor.Permit[fn]
						if p, err = ref.Reserve(ctx); err == nil {
							err = p.Send(msg(s, i))
						}
					}
					if err != nil {
						t.Errorf("sender %d message %d: %v", s, i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if _, err := ref.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for _, v := range violations {
			t.Error(v)
		}
		for s, n := range next {
			if n != per {
				t.Errorf("sender %d: %d messages arrived, want %d", s, n, per)
			}
		}
		closeSys(t, sys)
	})
}

func TestPermitUsedTwice(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		c := &counter{}
		ref := spawn(t, sys.Root(), &fnActor{}, actor.WithMailbox(2))
		release := block(t, ref)
		ctx := context.Background()

		p, _ := ref.Reserve(ctx)
		if err := p.Send(c.msg(1)); err != nil {
			t.Fatal(err)
		}
		if err := p.Send(c.msg(2)); !errors.Is(err, actor.ErrPermitUsed) {
			t.Errorf("second Send: %v, want ErrPermitUsed", err)
		}
		p.Abort() // after Send: no effect

		q, _ := ref.Reserve(ctx)
		q.Abort()
		q.Abort() // twice: still one slot released
		if err := q.Send(c.msg(3)); !errors.Is(err, actor.ErrPermitUsed) {
			t.Errorf("Send after Abort: %v, want ErrPermitUsed", err)
		}
		if qd, r := ref.Pending(); qd != 1 || r != 0 {
			t.Errorf("Pending() = %d, %d; want 1, 0", qd, r)
		}
		// Exactly one slot is free: the extra Aborts released nothing.
		if err := ref.TrySend(c.msg(4)); err != nil {
			t.Errorf("TrySend into the one free slot: %v", err)
		}
		if err := ref.TrySend(c.msg(5)); !errors.Is(err, actor.ErrMailboxFull) {
			t.Errorf("TrySend beyond capacity: %v, want ErrMailboxFull (a reused permit freed a slot twice)", err)
		}
		release()
		if _, err := ref.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.handled(); len(got) != 2 || got[0] != 1 || got[1] != 4 {
			t.Errorf("handled %v, want [1 4]", got)
		}
		closeSys(t, sys)
	})
}
