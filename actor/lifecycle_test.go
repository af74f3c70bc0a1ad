package actor_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

func TestStartIsSynchronous(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		// Plain variables: the race detector checks that Spawn's return
		// happens after OnStart's writes.
		var started bool
		var startedAt time.Time
		ref, err := actor.Spawn[fn](context.Background(), sys.Root(), &fnActor{start: func(p *actor.Proc) error {
			time.Sleep(time.Second) // virtual; Spawn must wait for it
			started, startedAt = true, time.Now()
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !started {
			t.Fatalf("OnStart had not completed when Spawn returned")
		}
		if !time.Now().Equal(startedAt) {
			t.Errorf("Spawn returned at %v, OnStart finished at %v", time.Now(), startedAt)
		}
		if !ref.PID().Alive() {
			t.Errorf("process not alive after a successful Spawn")
		}

		var initDone bool
		srv, err := actor.StartServer[call, int, cast](context.Background(), sys.Root(), &fnServer{init: func(*actor.Proc) error {
			initDone = true
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !initDone {
			t.Errorf("Init had not completed when StartServer returned")
		}
		if v, err := srv.Call(context.Background(), reply(1)); v != 1 || err != nil {
			t.Errorf("Call after start = %d, %v", v, err)
		}
		closeSys(t, sys)
	})
}

func TestInitSkippedWhenCancelledBeforeInit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ran := false
		_, err := actor.Spawn[fn](ctx, sys.Root(), &fnActor{start: func(*actor.Proc) error { ran = true; return nil }})
		var se *actor.StartError
		if !errors.As(err, &se) {
			t.Fatalf("Spawn with a cancelled ctx: %v, want *StartError", err)
		}
		if se.Outcome.Severity != actor.Cancelled {
			t.Errorf("outcome %v, want Cancelled", se.Outcome)
		}
		if ran {
			t.Errorf("OnStart ran although cancellation was requested before init")
		}
		if se.PID.Alive() {
			t.Errorf("process alive")
		}
		_, err = actor.StartServer[call, int, cast](ctx, sys.Root(), &fnServer{init: func(*actor.Proc) error { ran = true; return nil }})
		if !errors.As(err, &se) || se.Outcome.Severity != actor.Cancelled || ran {
			t.Errorf("StartServer with a cancelled ctx: %v (init ran: %v)", err, ran)
		}
		closeSys(t, sys)
	})
}

func TestInitCancelledDuringInitIsCancelled(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		_, err := actor.Spawn[fn](ctx, sys.Root(), &fnActor{start: func(p *actor.Proc) error {
			<-p.Ctx().Done()
			return p.Ctx().Err()
		}})
		var se *actor.StartError
		if !errors.As(err, &se) {
			t.Fatalf("Spawn: %v, want *StartError", err)
		}
		// INV-6A: a task that is cancelled completes Cancelled, not Err.
		if se.Outcome.Severity != actor.Cancelled {
			t.Errorf("init cancelled through Start's ctx completed as %v, want Cancelled", se.Outcome)
		}
		closeSys(t, sys)
	})
}

//go:noinline
func panicInHandler(v any) { panic(v) }

type panicValue struct{ n int }

func TestHandlerPanicRecoveredAsPanickedWithStack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		stopped := make(chan actor.Outcome, 1)
		ref := spawn(t, sys.Root(), &fnActor{stop: func(_ *actor.Proc, o actor.Outcome) { stopped <- o }})
		_ = ref.Send(context.Background(), func(*actor.Proc) error {
			panicInHandler(panicValue{42})
			return nil
		})
		o, err := ref.PID().Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o.Severity != actor.Panicked || o.Panic == nil {
			t.Fatalf("outcome %v, want Panicked with panic info", o)
		}
		if o.Panic.Value != (panicValue{42}) {
			t.Errorf("panic value %#v, want panicValue{42}", o.Panic.Value)
		}
		if len(o.Panic.Stack) == 0 || !bytes.Contains(o.Panic.Stack, []byte("panicInHandler")) {
			t.Errorf("panic stack does not show the panicking function:\n%s", o.Panic.Stack)
		}
		if so := <-stopped; so.Severity != actor.Panicked {
			t.Errorf("stop hook saw %v, want the Panicked outcome", so)
		}

		// The same for a GenServer cast.
		srv := startServer(t, sys.Root(), &fnServer{})
		_ = srv.Cast(context.Background(), func(*actor.Proc) error { panicInHandler("cast"); return nil })
		if o, _ := srv.PID().Wait(context.Background()); o.Severity != actor.Panicked || o.Panic == nil || o.Panic.Value != "cast" || len(o.Panic.Stack) == 0 {
			t.Errorf("server outcome %v, want Panicked(cast) with a stack", o)
		}
		closeSys(t, sys)
	})
}

func TestHandlerErrorIsErrOutcome(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		errApp := errors.New("handler failed")
		stopped := make(chan actor.Outcome, 1)
		ref := spawn(t, sys.Root(), &fnActor{stop: func(_ *actor.Proc, o actor.Outcome) { stopped <- o }})
		_ = ref.Send(context.Background(), func(*actor.Proc) error { return errApp })
		o, _ := ref.PID().Wait(context.Background())
		if o.Severity != actor.Err || !errors.Is(o.Err, errApp) {
			t.Errorf("outcome %v, want Err(%v)", o, errApp)
		}
		if so := <-stopped; !errors.Is(so.Err, errApp) {
			t.Errorf("stop hook saw %v", so)
		}

		srv := startServer(t, sys.Root(), &fnServer{})
		_ = srv.Cast(context.Background(), func(*actor.Proc) error { return errApp })
		if o, _ := srv.PID().Wait(context.Background()); o.Severity != actor.Err || !errors.Is(o.Err, errApp) {
			t.Errorf("server outcome after a failing cast %v, want Err", o)
		}
		closeSys(t, sys)
	})
}

// seqActor logs every message it handles and its stop hook.
func seqActor(log *orderLog) *fnActor {
	return &fnActor{stop: func(_ *actor.Proc, o actor.Outcome) { log.add("stop:%v", o.Severity) }}
}

func logMsg(log *orderLog, s string) fn {
	return func(*actor.Proc) error { log.add("%s", s); return nil }
}

func TestDrainIsBoundedByCapacity(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		log := &orderLog{}
		var self *actor.Ref[fn]
		var mu sync.Mutex
		var selfSendErrs []error
		ref := spawn(t, sys.Root(), seqActor(log), actor.WithMailbox(4))
		self = ref
		release := block(t, ref)
		for range 4 {
			_ = ref.TrySend(func(*actor.Proc) error {
				log.add("m")
				// Work created during the drain is refused: the drain ends.
				err := self.TrySend(logMsg(log, "extra"))
				mu.Lock()
				selfSendErrs = append(selfSendErrs, err)
				mu.Unlock()
				return nil
			})
		}
		ref.PID().Cancel(actor.CancelReason{Kind: actor.CancelRequested})
		release()
		if _, err := ref.PID().Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := log.get(), []string{"m", "m", "m", "m", "stop:cancelled"}; !slices.Equal(got, want) {
			t.Errorf("log %v, want %v", got, want)
		}
		for _, err := range selfSendErrs {
			if !errors.Is(err, actor.ErrMailboxClosed) {
				t.Errorf("send during drain: %v, want ErrMailboxClosed", err)
			}
		}
		closeSys(t, sys)
	})
}

func TestDrainAndOnStopAreMaskedAndBudgeted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		const budget = 3 * time.Second
		type obs struct {
			err      error
			deadline time.Time
			hasDL    bool
			at       time.Time
		}
		var blockedCtxErr error
		var drain, stopIn, stopOut obs
		ref := spawn(t, sys.Root(), &fnActor{stop: func(p *actor.Proc, _ actor.Outcome) {
			dl, ok := p.Ctx().Deadline()
			stopIn = obs{p.Ctx().Err(), dl, ok, time.Now()}
			<-p.Ctx().Done() // a stop hook that waits for its budget
			stopOut = obs{p.Ctx().Err(), dl, ok, time.Now()}
		}}, actor.WithStopTimeout(budget))

		in, rel := make(chan struct{}), make(chan struct{})
		_ = ref.Send(context.Background(), func(p *actor.Proc) error {
			close(in)
			<-rel
			blockedCtxErr = p.Ctx().Err() // the running handler sees the request
			return nil
		})
		<-in
		_ = ref.TrySend(func(p *actor.Proc) error {
			dl, ok := p.Ctx().Deadline()
			drain = obs{p.Ctx().Err(), dl, ok, time.Now()}
			time.Sleep(time.Second) // drain work uses part of the budget
			return nil
		})
		res := make(chan actor.Outcome, 1)
		go func() { o, _ := ref.Stop(context.Background()); res <- o }()
		synctest.Wait()
		t0 := time.Now() // the stop request
		close(rel)
		o := <-res

		if blockedCtxErr == nil {
			t.Errorf("the handler running when Stop was requested saw a live context")
		}
		if drain.err != nil {
			t.Errorf("drain handler context cancelled (%v): drain must be masked", drain.err)
		}
		if !drain.hasDL || !drain.deadline.Equal(t0.Add(budget)) {
			t.Errorf("drain deadline %v (set=%v), want stop request + %v = %v", drain.deadline, drain.hasDL, budget, t0.Add(budget))
		}
		if stopIn.err != nil {
			t.Errorf("stop hook entered with a cancelled context (%v): it must be masked", stopIn.err)
		}
		if !stopIn.hasDL || !stopIn.deadline.Equal(t0.Add(budget)) {
			t.Errorf("stop hook deadline %v (set=%v), want %v (one budget for drain + stop hook)", stopIn.deadline, stopIn.hasDL, t0.Add(budget))
		}
		if !stopOut.at.Equal(t0.Add(budget)) {
			t.Errorf("stop hook's context ended at +%v, want +%v", stopOut.at.Sub(t0), budget)
		}
		if !errors.Is(stopOut.err, context.DeadlineExceeded) {
			t.Errorf("stop hook context error %v, want DeadlineExceeded", stopOut.err)
		}
		if o.Severity != actor.Cancelled {
			t.Errorf("outcome %v, want Cancelled", o)
		}
		closeSys(t, sys)
	})
}

func TestProcExitNormalIsOk(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		log := &orderLog{}
		ref := spawn(t, sys.Root(), seqActor(log))
		release := block(t, ref)
		_ = ref.TrySend(func(p *actor.Proc) error { log.add("exit"); p.Exit(nil); return nil })
		_ = ref.TrySend(logMsg(log, "after"))
		release()
		o, _ := ref.PID().Wait(context.Background())
		if !o.IsOk() {
			t.Errorf("Proc.Exit(nil) outcome %v, want Ok", o)
		}
		if got, want := log.get(), []string{"exit", "after", "stop:ok"}; !slices.Equal(got, want) {
			t.Errorf("log %v, want %v (a normal exit drains committed messages)", got, want)
		}

		errBye := errors.New("bye")
		ref2 := spawn(t, sys.Root(), &fnActor{})
		_ = ref2.Send(context.Background(), func(p *actor.Proc) error { p.Exit(errBye); return nil })
		if o, _ := ref2.PID().Wait(context.Background()); o.Severity != actor.Err || !errors.Is(o.Err, errBye) {
			t.Errorf("Proc.Exit(err) outcome %v, want Err(bye)", o)
		}
		if o := closeSys(t, sys); o.Severity != actor.Err {
			t.Errorf("root outcome %v, want Err from the second process only", o)
		}
	})
}

func TestStopReturnsCancelledOutcome(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		ref := spawn(t, sys.Root(), &fnActor{})
		o, err := ref.Stop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o.Severity != actor.Cancelled || o.Cancel.Kind != actor.CancelRequested {
			t.Errorf("Stop = %v, want cancelled(requested)", o)
		}
		if po, dead := ref.PID().Outcome(); !dead || !same(po, o) {
			t.Errorf("PID.Outcome = %v (dead=%v), want %v", po, dead, o)
		}
		// The outcome is immutable: stopping again changes nothing.
		o2, err := ref.Stop(context.Background())
		if err != nil || !same(o2, o) {
			t.Errorf("second Stop = %v, %v; want %v", o2, err, o)
		}
		ref.Abort()
		if o3, _ := ref.PID().Wait(context.Background()); !same(o3, o) {
			t.Errorf("Abort after completion changed the outcome to %v", o3)
		}
		closeSys(t, sys)
	})
}

func TestStopCancelsRunningHandlerContext(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		ref := spawn(t, sys.Root(), &fnActor{})
		in := make(chan struct{})
		var cause error
		_ = ref.Send(context.Background(), func(p *actor.Proc) error {
			ctx := p.Ctx() // taken before the stop request
			close(in)
			<-ctx.Done() // a deadlock here is the failure
			cause = context.Cause(ctx)
			return nil
		})
		<-in
		o, err := ref.Stop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o.Severity != actor.Cancelled {
			t.Errorf("outcome %v, want Cancelled", o)
		}
		if !errors.Is(cause, actor.ErrCancelled) {
			t.Errorf("handler context cause %v, want ErrCancelled", cause)
		}
		closeSys(t, sys)
	})
}

func TestOnExitRunsBeforeLinksAndMonitors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		target := spawnProbe(t, sys.Root())
		var mu sync.Mutex
		var hooked []actor.Outcome
		remove, ok := target.pid().OnExit(func(o actor.Outcome) {
			mu.Lock()
			hooked = append(hooked, o)
			mu.Unlock()
		})
		if !ok {
			t.Fatalf("OnExit on a live process reported false")
		}
		removedRan := false
		removeMe, _ := target.pid().OnExit(func(actor.Outcome) { removedRan = true })
		removeMe()
		hookSeen := make(chan int, 2)
		w := spawn(t, sys.Root(), &fnActor{info: func(_ *actor.Proc, info any) error {
			mu.Lock()
			hookSeen <- len(hooked) // hooks must have run before this Down or Exit
			mu.Unlock()
			return nil
		}}, actor.WithTrapExits())
		do(t, w, func(p *actor.Proc) {
			p.Monitor(target.pid())
			_ = p.Link(target.pid())
		})
		_ = target.ref.Send(context.Background(), func(*actor.Proc) error { return errors.New("x") })
		for range 2 {
			if n := <-hookSeen; n != 1 {
				t.Errorf("a Down/Exit arrived with %d exit hooks run, want 1", n)
			}
		}
		if removedRan {
			t.Errorf("an unregistered exit hook ran")
		}
		if len(hooked) != 1 || hooked[0].Severity != actor.Err {
			t.Errorf("exit hook saw %v, want one Err outcome", hooked)
		}
		remove()
		if _, ok := target.pid().OnExit(func(actor.Outcome) {}); ok {
			t.Errorf("OnExit on a dead process reported true")
		}
		closeSys(t, sys)
	})
}
