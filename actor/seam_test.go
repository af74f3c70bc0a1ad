package actor_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// ---- a manual executor: virtual clock, timers fired only by Advance ----

var fakeEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type fakeExecutor struct {
	mu      sync.Mutex
	cond    *sync.Cond
	now     time.Time
	seq     int
	pending []*fakeTimer
	gos     int
	rng     uint64
}

type fakeTimer struct {
	ex   *fakeExecutor
	when time.Time
	seq  int
	f    func()
	live bool
}

func newFakeExecutor() *fakeExecutor {
	e := &fakeExecutor{now: fakeEpoch}
	e.cond = sync.NewCond(&e.mu)
	return e
}

func (e *fakeExecutor) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *fakeExecutor) AfterFunc(d time.Duration, f func()) actor.Timer {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &fakeTimer{ex: e, f: f}
	e.armLocked(t, d)
	return t
}

func (e *fakeExecutor) armLocked(t *fakeTimer, d time.Duration) {
	e.seq++
	t.when, t.seq, t.live = e.now.Add(d), e.seq, true
	if !slices.Contains(e.pending, t) {
		e.pending = append(e.pending, t)
	}
	e.cond.Broadcast()
}

func (t *fakeTimer) Stop() bool {
	t.ex.mu.Lock()
	defer t.ex.mu.Unlock()
	was := t.live
	t.live = false
	t.ex.pending = slices.DeleteFunc(t.ex.pending, func(x *fakeTimer) bool { return x == t })
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.ex.mu.Lock()
	defer t.ex.mu.Unlock()
	was := t.live
	t.ex.armLocked(t, d)
	return was
}

func (e *fakeExecutor) Go(f func()) {
	e.mu.Lock()
	e.gos++
	e.mu.Unlock()
	go f()
}

func (e *fakeExecutor) NewParker() actor.Parker { return &fakeParker{ch: make(chan struct{}, 1)} }

func (e *fakeExecutor) Uint64() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rng++
	return e.rng
}

// Advance moves the clock by d and runs every timer that became due, in
// (deadline, arming order), each on its own goroutine; it returns once they
// have all returned.
func (e *fakeExecutor) Advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	var due []*fakeTimer
	e.pending = slices.DeleteFunc(e.pending, func(t *fakeTimer) bool {
		if t.live && !t.when.After(e.now) {
			due = append(due, t)
			t.live = false
			return true
		}
		return false
	})
	e.mu.Unlock()
	slices.SortFunc(due, func(a, b *fakeTimer) int {
		return cmp.Or(a.when.Compare(b.when), cmp.Compare(a.seq, b.seq))
	})
	var wg sync.WaitGroup
	for _, t := range due {
		wg.Go(t.f)
	}
	wg.Wait()
}

// waitTimers blocks until at least n timers are pending.
func (e *fakeExecutor) waitTimers(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.pending) < n {
		e.cond.Wait()
	}
}

func (e *fakeExecutor) timers() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

func (e *fakeExecutor) goroutines() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gos
}

type fakeParker struct{ ch chan struct{} }

func (p *fakeParker) Park(ctx context.Context) error {
	select {
	case <-p.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *fakeParker) Unpark() {
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

func TestTimeGoesThroughExecutor(t *testing.T) {
	ex := newFakeExecutor()
	tl := &traceLog{}
	sys := actor.NewSystem(actor.WithExecutor(ex), tl.opt())
	t.Cleanup(func() { _, _ = sys.Close(context.Background()) })
	bg := context.Background()

	t.Run("SendAfter", func(t *testing.T) {
		pr := spawnProbe(t, sys.Root())
		var now time.Time
		before := ex.timers()
		do(t, pr.ref, func(p *actor.Proc) {
			now = p.Now()
			p.SendAfter(5*time.Second, "tick")
		})
		if !now.Equal(ex.Now()) {
			t.Errorf("Proc.Now() = %v, want the executor's clock %v", now, ex.Now())
		}
		if ex.timers() != before+1 {
			t.Fatalf("SendAfter armed %d executor timers, want 1", ex.timers()-before)
		}
		ex.Advance(4 * time.Second)
		pr.noInfo(t)
		ex.Advance(time.Second)
		if got := <-pr.infos; got != "tick" {
			t.Errorf("got %#v, want the tick", got)
		}
		if _, err := pr.ref.Stop(bg); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stop budget", func(t *testing.T) {
		const budget = 10 * time.Second
		entered, returned := make(chan time.Time, 1), make(chan error, 1)
		ref := spawn(t, sys.Root(), &fnActor{stop: func(p *actor.Proc, _ actor.Outcome) {
			dl, _ := p.Ctx().Deadline()
			entered <- dl
			<-p.Ctx().Done()
			returned <- p.Ctx().Err()
		}}, actor.WithStopTimeout(budget))
		stopped := make(chan actor.Outcome, 1)
		go func() { o, _ := ref.Stop(bg); stopped <- o }()
		dl := <-entered
		if want := ex.Now().Add(budget); !dl.Equal(want) {
			t.Errorf("stop hook deadline %v, want executor now + %v = %v", dl, budget, want)
		}
		ex.Advance(budget - time.Second)
		if _, done := ready(returned); done {
			t.Fatalf("stop budget expired before the executor's clock reached it")
		}
		ex.Advance(time.Second)
		if err := <-returned; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("stop hook context: %v, want DeadlineExceeded", err)
		}
		if o := <-stopped; o.Severity != actor.Cancelled {
			t.Errorf("outcome %v", o)
		}
	})

	t.Run("init budget", func(t *testing.T) {
		entered := make(chan struct{})
		res := make(chan error, 1)
		before := ex.timers()
		go func() {
			_, err := actor.Spawn[fn](bg, sys.Root(), &fnActor{start: func(p *actor.Proc) error {
				ctx := p.Ctx()
				close(entered)
				<-ctx.Done()
				return ctx.Err()
			}}, actor.WithInitTimeout(2*time.Second))
			res <- err
		}()
		<-entered
		ex.waitTimers(before + 1)
		ex.Advance(2 * time.Second)
		var se *actor.StartError
		if err := <-res; !errors.As(err, &se) || se.Outcome.Cancel.Kind != actor.CancelTimeout {
			t.Errorf("Spawn = %v, want a StartError with cancelled(timeout)", err)
		}
	})

	t.Run("call timeouts", func(t *testing.T) {
		deferred := make(chan *actor.Deferred[int], 2)
		hold := func(_ *actor.Proc, from actor.ReplyTo[int]) (int, error) {
			deferred <- from.Defer()
			return 0, nil
		}
		srv := startServer(t, sys.Root(), &fnServer{})

		ctx, cancel := actor.WithTimeout(bg, ex, time.Second)
		defer cancel()
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(ex.Now().Add(time.Second)) {
			t.Errorf("actor.WithTimeout deadline %v, want executor now + 1s", dl)
		}
		res := goCall(ctx, srv, hold)
		<-deferred
		ex.Advance(time.Second)
		if r := <-res; !errors.Is(r.err, actor.ErrCallTimeout) {
			t.Errorf("Call with actor.WithTimeout: %v, want timeout", r.err)
		}

		before := ex.timers()
		res2 := make(chan error, 1)
		go func() { _, err := srv.CallTimeout(bg, hold, time.Second); res2 <- err }()
		<-deferred
		ex.waitTimers(before + 1)
		ex.Advance(time.Second)
		if err := <-res2; !errors.Is(err, actor.ErrCallTimeout) {
			t.Errorf("CallTimeout: %v, want timeout", err)
		}
		if _, err := srv.Stop(bg); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Sleep", func(t *testing.T) {
		done := make(chan error, 1)
		before := ex.timers()
		go func() { done <- actor.Sleep(bg, ex, 3*time.Second) }()
		ex.waitTimers(before + 1)
		ex.Advance(2 * time.Second)
		if _, ok := ready(done); ok {
			t.Fatalf("Sleep returned before the executor's clock reached its end")
		}
		ex.Advance(time.Second)
		if err := <-done; err != nil {
			t.Errorf("Sleep: %v", err)
		}
	})

	if _, err := sys.Close(bg); err != nil {
		t.Fatal(err)
	}
	if ex.goroutines() == 0 {
		t.Errorf("no process goroutine was started through Executor.Go")
	}
	for _, ev := range tl.events() {
		if ev.Time.Before(fakeEpoch) || ev.Time.After(ex.Now()) {
			t.Errorf("trace event %v stamped %v, outside the executor's clock [%v, %v]", ev.Kind, ev.Time, fakeEpoch, ex.Now())
			break
		}
	}
}
