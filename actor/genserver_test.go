package actor_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// blockServer parks the server in a cast handler that ignores its context,
// with an empty mailbox behind it.
func blockServer(t *testing.T, ref *srvRef) (release func()) {
	t.Helper()
	in, rel := make(chan struct{}), make(chan struct{})
	if err := ref.Cast(context.Background(), func(*actor.Proc) error {
		close(in)
		<-rel
		return nil
	}); err != nil {
		t.Fatalf("Cast blocker: %v", err)
	}
	<-in
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }
}

func TestCallMapsCancellationToCancelled(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		srv := startServer(t, sys.Root(), &fnServer{})
		small := startServer(t, sys.Root(), &fnServer{}, actor.WithMailbox(1))
		bg := context.Background()
		// check accepts a reply equal to okReply (>= 0) or a cancellation,
		// and nothing else: never ServerStopped or NoProc.
		check := func(what string, i int, r callResult, okReply int) {
			t.Helper()
			if r.err == nil {
				if okReply < 0 || r.v != okReply {
					t.Fatalf("iteration %d, %s: Call = %d, nil; want a cancellation", i, what, r.v)
				}
				return
			}
			if !errors.Is(r.err, actor.ErrCallCancelled) || !errors.Is(r.err, context.Canceled) {
				t.Fatalf("iteration %d, %s: %v, want ErrCallCancelled wrapping context.Canceled (never ServerStopped)", i, what, r.err)
			}
			if o := callErr(t, r.err).Outcome(); o.Severity != actor.Cancelled {
				t.Fatalf("iteration %d, %s: outcome %v, want Cancelled", i, what, o)
			}
		}
		call := func(ctx context.Context, ref *srvRef, req call) callResult {
			v, err := ref.Call(ctx, req)
			return callResult{v: v, err: err}
		}
		for i := range 100 {
			// Cancelled before the call.
			ctx, cancel := context.WithCancel(bg)
			cancel()
			check("pre-cancelled", i, call(ctx, srv, reply(1)), -1)

			// Cancelled while the handler runs.
			ctx, cancel = context.WithCancel(bg)
			in, rel := make(chan struct{}), make(chan struct{})
			res := goCall(ctx, srv, func(*actor.Proc, actor.ReplyTo[int]) (int, error) {
				close(in)
				<-rel
				return 2, nil
			})
			<-in
			cancel()
			check("handler running", i, <-res, -1)
			close(rel)

			// Cancelled while queued behind a busy server.
			release := blockServer(t, srv)
			ctx, cancel = context.WithCancel(bg)
			res = goCall(ctx, srv, reply(3))
			synctest.Wait()
			cancel()
			check("queued", i, <-res, -1)
			release()

			// Cancelled while waiting for room in a full mailbox.
			release = blockServer(t, small)
			if err := small.TryCast(func(*actor.Proc) error { return nil }); err != nil {
				t.Fatal(err)
			}
			ctx, cancel = context.WithCancel(bg)
			res = goCall(ctx, small, reply(4))
			synctest.Wait()
			cancel()
			check("mailbox full", i, <-res, -1)
			release()

			// Cancellation racing the reply.
			ctx, cancel = context.WithCancel(bg)
			res = goCall(ctx, srv, reply(5))
			if i%2 == 0 {
				runtime.Gosched()
			}
			cancel()
			check("racing the reply", i, <-res, 5)
		}
		for _, ref := range []*srvRef{srv, small} {
			if v, err := ref.Call(bg, reply(6)); v != 6 || err != nil {
				t.Errorf("Call after the cancellations = %d, %v", v, err)
			}
		}
		closeSys(t, sys)
	})
}

//go:noinline
func dropReply(from actor.ReplyTo[int]) { from.Defer() }

// Not in a bubble: the runtime runs cleanups outside any bubble.
func TestNoReplyIsTraceVisibleAndPanickedSeverity(t *testing.T) {
	tl := &traceLog{}
	sys := newSys(t, tl.opt())
	srv := startServer(t, sys.Root(), &fnServer{})
	res := goCall(context.Background(), srv, func(_ *actor.Proc, from actor.ReplyTo[int]) (int, error) {
		dropReply(from) // a bug: the obligation is dropped unresolved
		return 0, nil
	})
	var r callResult
	got := false
	// The trace event follows the caller's release: wait for both.
	collectUntil(t, "the failure of the caller of a dropped reply obligation and its obligation-leak trace", func() bool {
		if !got {
			r, got = ready(res)
		}
		return got && len(tl.of(actor.TraceObligationLeak)) > 0
	})
	if !errors.Is(r.err, actor.ErrNoReply) {
		t.Fatalf("Call = %d, %v; want ErrNoReply", r.v, r.err)
	}
	if o := callErr(t, r.err).Outcome(); o.Severity != actor.Panicked {
		t.Errorf("NoReply outcome %v, want Panicked severity", o)
	}
	leaks := tl.of(actor.TraceObligationLeak)
	if len(leaks) != 1 || leaks[0].PID != srv.PID() || leaks[0].Outcome.Severity != actor.Panicked {
		t.Errorf("obligation-leak trace events %+v, want one at Panicked severity for %v", leaks, srv.PID())
	}
	if v, err := srv.Call(context.Background(), reply(1)); v != 1 || err != nil {
		t.Errorf("server after the leak: %d, %v", v, err)
	}
	closeSys(t, sys)
}

// Not in a bubble: it runs the GC to give a leak every chance to show.
func TestNoReplyNeverOccursInNormalOperation(t *testing.T) {
	tl := &traceLog{}
	sys := newSys(t, tl.opt())
	bg := context.Background()
	errApp := errors.New("app")
	type later struct {
		d *actor.Deferred[int]
		v int
	}
	var pending []later // touched on the server goroutine only
	const flush = "flush"
	srv := startServer(t, sys.Root(), &fnServer{info: func(_ *actor.Proc, info any) error {
		if info == flush {
			for _, l := range pending {
				_ = l.d.Reply(l.v)
			}
			pending = nil
		}
		return nil
	}})
	req := func(kind, v int) call {
		return func(p *actor.Proc, from actor.ReplyTo[int]) (int, error) {
			switch kind {
			case 0: // reply by return
				return v, nil
			case 1: // deferred, replied from another goroutine
				d := from.Defer()
				go func() { _ = d.Reply(v) }()
			case 2: // deferred, replied by a later message to the server
				pending = append(pending, later{from.Defer(), v})
				p.SendAfter(0, flush)
			default: // deferred, failed from another goroutine
				d := from.Defer()
				go func() { _ = d.Fail(errApp) }()
			}
			return -1, nil
		}
	}
	var wg sync.WaitGroup
	var noReply atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 60 {
				kind, v := (g+i)%4, g*1000+i
				ctx, cancel := context.WithCancel(bg)
				cancelled := i%5 == 4
				if cancelled {
					go cancel() // races the call and its reply
				}
				got, err := srv.Call(ctx, req(kind, v))
				cancel()
				switch {
				case errors.Is(err, actor.ErrNoReply):
					noReply.Add(1)
				case err == nil && kind != 3 && got == v:
				case err != nil && kind == 3 && errors.Is(err, errApp):
				case err != nil && cancelled && errors.Is(err, actor.ErrCallCancelled):
				default:
					t.Errorf("call kind %d (cancelled=%v) = %d, %v; want %d", kind, cancelled, got, err, v)
				}
			}
		})
	}
	wg.Wait()
	for range 5 {
		runtime.GC()
		runtime.Gosched()
	}
	closeSys(t, sys)
	runtime.GC()
	runtime.Gosched()
	if n := noReply.Load(); n != 0 {
		t.Errorf("%d calls failed with NoReply in normal operation", n)
	}
	if leaks := tl.of(actor.TraceObligationLeak); len(leaks) != 0 {
		t.Errorf("obligation leaks traced in normal operation: %+v", leaks)
	}
}

// Kept beside lab's TestLabPendingCallsAbortedAtStop: a deferred reply held across a requested stop is what the lab's reply-obligation-leak oracle rejects, so the table cannot state it.
func TestServerStopMidCallFailsPendingCallers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tl := &traceLog{}
		sys := newSys(t, tl.opt())
		srv := startServer(t, sys.Root(), &fnServer{})
		deferred := make(chan *actor.Deferred[int], 2)
		hold := func(_ *actor.Proc, from actor.ReplyTo[int]) (int, error) {
			deferred <- from.Defer()
			return 0, nil
		}
		bg := context.Background()
		r1 := goCall(bg, srv, hold)
		d1 := <-deferred
		r2 := goCall(bg, srv, hold)
		d2 := <-deferred
		if o, err := srv.Stop(bg); err != nil || o.Severity != actor.Cancelled {
			t.Fatalf("Stop = %v, %v", o, err)
		}
		for i, ch := range []<-chan callResult{r1, r2} {
			r := <-ch
			if !errors.Is(r.err, actor.ErrServerStopped) {
				t.Errorf("pending call %d: %v, want ServerStopped", i, r.err)
				continue
			}
			if s := callErr(t, r.err).Server; s.Severity != actor.Cancelled {
				t.Errorf("pending call %d: CallError.Server = %v, want Cancelled", i, s)
			}
		}
		for _, d := range []*actor.Deferred[int]{d1, d2} {
			if err := d.Reply(1); !errors.Is(err, actor.ErrAlreadyReplied) {
				t.Errorf("Reply after the server stopped: %v, want ErrAlreadyReplied", err)
			}
		}
		if n := len(tl.of(actor.TraceCallAborted)); n != 2 {
			t.Errorf("%d call-aborted trace events, want 2", n)
		}
		closeSys(t, sys)
	})
}

type unboundTarget struct{}

func (unboundTarget) Resolve() (*srvRef, error) { return nil, &actor.CallError{Kind: actor.CallNoProc} }

func TestCallUnknownOrDeadTargetIsNoProc(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		bg := context.Background()
		ends := map[string]struct {
			end func(*srvRef)
			sev actor.Severity
		}{
			"stopped": {func(s *srvRef) { _, _ = s.Stop(bg) }, actor.Cancelled},
			"crashed": {func(s *srvRef) {
				_ = s.Cast(bg, func(*actor.Proc) error { panic("x") })
				_, _ = s.PID().Wait(bg)
			}, actor.Panicked},
			"aborted": {func(s *srvRef) { s.Abort() }, actor.Cancelled},
		}
		for name, e := range ends {
			srv := startServer(t, sys.Root(), &fnServer{})
			e.end(srv)
			_, err := srv.Call(bg, reply(1))
			if !errors.Is(err, actor.ErrCallNoProc) {
				t.Errorf("%s: Call = %v, want NoProc", name, err)
				continue
			}
			ce := callErr(t, err)
			if ce.Target != srv.PID() || ce.Server.Severity != e.sev {
				t.Errorf("%s: CallError{Target: %v, Server: %v}, want the target and its %v outcome", name, ce.Target, ce.Server, e.sev)
			}
		}
		if _, err := actor.Call(bg, unboundTarget{}, reply(1)); !errors.Is(err, actor.ErrCallNoProc) {
			t.Errorf("Call to an unresolvable target: %v, want NoProc", err)
		}
		closeSys(t, sys)
	})
}

func TestCallFromPlainGoroutinesAndFromProcesses(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		bg := context.Background()
		srv := startServer(t, sys.Root(), &fnServer{})

		// Plain goroutines, concurrently.
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					if v, err := srv.Call(bg, reply(g*1000+i)); err != nil || v != g*1000+i {
						t.Errorf("goroutine %d call %d = %d, %v", g, i, v, err)
						return
					}
				}
			})
		}
		wg.Wait()

		// From an actor's handler.
		client := spawn(t, sys.Root(), &fnActor{})
		var v int
		var err error
		do(t, client, func(p *actor.Proc) { v, err = srv.Call(p.Ctx(), reply(7)) })
		if v != 7 || err != nil {
			t.Errorf("call from an actor handler = %d, %v", v, err)
		}

		// From another server's HandleCall (a chain).
		front := startServer(t, sys.Root(), &fnServer{})
		v, err = front.Call(bg, func(p *actor.Proc, _ actor.ReplyTo[int]) (int, error) {
			w, err := srv.Call(p.Ctx(), reply(8))
			return w + 1, err
		})
		if v != 9 || err != nil {
			t.Errorf("chained call = %d, %v; want 9", v, err)
		}

		// From init and from a stop hook (masked context).
		var fromInit, fromStop callResult
		ref := spawn(t, sys.Root(), &fnActor{
			start: func(p *actor.Proc) error {
				w, err := srv.Call(p.Ctx(), reply(10))
				fromInit = callResult{v: w, err: err}
				return nil
			},
			stop: func(p *actor.Proc, _ actor.Outcome) {
				w, err := srv.Call(p.Ctx(), reply(11))
				fromStop = callResult{v: w, err: err}
			},
		})
		if _, err := ref.Stop(bg); err != nil {
			t.Fatal(err)
		}
		if fromInit.v != 10 || fromInit.err != nil {
			t.Errorf("call from init = %d, %v", fromInit.v, fromInit.err)
		}
		if fromStop.v != 11 || fromStop.err != nil {
			t.Errorf("call from a stop hook = %d, %v", fromStop.v, fromStop.err)
		}
		closeSys(t, sys)
	})
}

func TestCallAbortedObligationSkipsHandlerButStartedOneRunsCleanup(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tl := &traceLog{}
		sys := newSys(t, tl.opt())
		fs := &fnServer{}
		srv := startServer(t, sys.Root(), fs)
		bg := context.Background()

		// Abandoned before the handler began: the handler never runs.
		release := blockServer(t, srv)
		ctx, cancel := context.WithTimeout(bg, time.Second)
		ran := false
		if _, err := srv.Call(ctx, func(*actor.Proc, actor.ReplyTo[int]) (int, error) { ran = true; return 1, nil }); !errors.Is(err, actor.ErrCallTimeout) {
			t.Errorf("queued call: %v, want timeout", err)
		}
		cancel()
		release()
		synctest.Wait()
		if ran || fs.calls.Load() != 0 {
			t.Errorf("HandleCall ran for a call whose caller had already given up")
		}

		// Abandoned while the handler runs: the handler completes, its
		// cleanup runs, and its reply is discarded.
		var cleaned, finished bool
		in, rel := make(chan struct{}), make(chan struct{})
		ctx, cancel = context.WithTimeout(bg, time.Second)
		res := goCall(ctx, srv, func(*actor.Proc, actor.ReplyTo[int]) (int, error) {
			defer func() { cleaned = true }()
			close(in)
			<-rel
			finished = true
			return 42, nil
		})
		<-in
		r := <-res
		cancel()
		if !errors.Is(r.err, actor.ErrCallTimeout) {
			t.Errorf("call timing out mid-handler: %d, %v; want timeout", r.v, r.err)
		}
		close(rel)
		synctest.Wait()
		if !finished || !cleaned {
			t.Errorf("started handler: finished=%v cleanup=%v, want both (it runs to completion)", finished, cleaned)
		}
		if v, err := srv.Call(bg, reply(7)); v != 7 || err != nil {
			t.Errorf("next call = %d, %v; want 7 (the discarded 42 must not leak into it)", v, err)
		}
		if !srv.PID().Alive() {
			t.Errorf("server died")
		}
		if n := len(tl.of(actor.TraceObligationLeak)); n != 0 {
			t.Errorf("%d obligation leaks traced for aborted calls", n)
		}
		closeSys(t, sys)
	})
}
