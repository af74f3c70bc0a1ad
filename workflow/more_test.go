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
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
)

type echoIn struct {
	Key string `cbor:"key"`
}

type echoOut struct {
	Echo string `cbor:"echo"`
}

// echoEffect is workflow name: one Effect step of kind on the run's
// input, whose answer's Echo is the run's output.
func echoEffect(name, step, kind string, opts ...workflow.StepOption) *workflow.Def[string, string] {
	return workflow.New(name, 1, func(c *workflow.Ctx, key string) (string, error) {
		out, err := workflow.Effect[echoOut](c, step, kind, echoIn{Key: key}, opts...)
		return out.Echo, err
	})
}

type startedPayload struct {
	Intent     string `cbor:"intent"`
	EffectKind string `cbor:"effect_kind"`
}

func TestEffectCompletedByAnAdapterAndRetriedOnAnErrorReceipt(t *testing.T) {
	onMemstore(t, 13, func(r *rig) error {
		def := workflow.New("effects", 1, func(c *workflow.Ctx, key string) (string, error) {
			out, err := workflow.Effect[echoOut](c, "echo", "test.echo", echoIn{Key: key},
				workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Base: time.Second}))
			if err != nil {
				return "", err
			}
			return out.Echo, nil
		})
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		// The adapter answers the first intent with an error receipt and
		// the second with an ok one.
		var mu sync.Mutex
		var seen []vocab.EffectItem
		stopAdapter, err := r.Background("adapter", func(ctx context.Context) error {
			return runAdapter(ctx, r.Ex, r.Store, "test.echo", func(it vocab.EffectItem) (vocab.ReceiptStatus, any) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, it)
				if len(seen) == 1 {
					return vocab.ReceiptError, map[string]string{"error": "upstream down"}
				}
				var in echoIn
				if err := event.Unmarshal(it.Params, &in); err != nil {
					return vocab.ReceiptError, map[string]string{"error": err.Error()}
				}
				return vocab.ReceiptOK, echoOut{Echo: in.Key + "!"}
			})
		})
		if err != nil {
			return err
		}
		w, cl, err := r.serveWith("w", r.WorkerStore(), wfs, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		got, err := startResult(r, def, cl, "run", "hi")
		if err != nil || got != "hi!" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		if err := stopAdapter(); err != nil {
			return err
		}
		evs, err := r.streamShapes("run", retriedOnce("echo"))
		if err != nil {
			return err
		}
		var p1, p2 startedPayload
		if err := errors.Join(event.Unmarshal(evs[1].Payload, &p1), event.Unmarshal(evs[3].Payload, &p2)); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 || seen[0].IntentHash != p1.Intent || seen[1].IntentHash != p2.Intent || p1.Intent == p2.Intent {
			return fmt.Errorf("the adapter executed %d intents; the attempts recorded %s and %s", len(seen), p1.Intent, p2.Intent)
		}
		if seen[0].World != "run" || seen[0].Kind != "test.echo" || p1.EffectKind != "test.echo" {
			return fmt.Errorf("intent %+v", seen[0])
		}
		var f failedPayload
		if err := event.Unmarshal(evs[2].Payload, &f); err != nil || f.Final || f.Error != "effect receipt error: upstream down" {
			return fmt.Errorf("the error receipt's failure %+v, %v", f, err)
		}
		for _, h := range []string{p1.Intent, p2.Intent} {
			st, err := r.Store.EffectStatus(r.Ctx, h)
			if err != nil || st.State != vocab.EffectDone {
				return fmt.Errorf("intent %s: %+v, %v", h, st, err)
			}
		}
		return nil
	})
}

func TestEffectInFlightIsNotAskedForAgainAfterACrash(t *testing.T) {
	onMemstore(t, 14, func(r *rig) error {
		def := echoEffect("once", "echo", "test.echo")
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hA := r.Mem.Restart()
		wA, err := r.worker("A", hA, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "run", "k"); err != nil {
			return err
		}
		if err := r.WaitFor("the intent", 10*time.Second, func() (bool, error) {
			its, err := r.Store.ListEffects(r.Ctx, "run", 0, 10)
			return len(its) == 1, err
		}); err != nil {
			return err
		}
		wB, err := r.crashOver(hA, wA, "B", wfs)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		n := 0
		stopAdapter, err := r.Background("adapter", func(ctx context.Context) error {
			return runAdapter(ctx, r.Ex, r.Store, "test.echo", func(it vocab.EffectItem) (vocab.ReceiptStatus, any) {
				n++
				return vocab.ReceiptOK, echoOut{Echo: "done"}
			})
		})
		if err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "run"); err != nil || got != "done" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		if err := stopAdapter(); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("the effect executed %d times", n)
		}
		return r.shapesAre("run", []shape{{event.RunStarted, "", 1}, {event.StepStarted, "echo", 1},
			{event.StepCompleted, "echo", 1}, {event.RunCompleted, "", 1}})
	})
}

func TestChildRun(t *testing.T) {
	forEachBackend(t, 15, func(r *rig) error {
		child := workflow.New("child", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Step(c, "twice", func(context.Context) (int, error) { return in * 2, nil })
		})
		failing := workflow.New("failing", 1, func(c *workflow.Ctx, in int) (int, error) {
			return 0, errors.New("child says no")
		})
		parent := workflow.New("parent", 1, func(c *workflow.Ctx, in int) (string, error) {
			v, err := workflow.Child(c, child, c.RunID()+"-kid", in)
			if err != nil {
				return "", err
			}
			_, err = workflow.Child(c, failing, c.RunID()+"-bad", in)
			var se *workflow.StepError
			if !errors.As(err, &se) {
				return "", fmt.Errorf("the failing child: %v", err)
			}
			return workflow.Step(c, "show", func(context.Context) (string, error) { return fmt.Sprintf("%d/%s", v, se.Message), nil })
		})
		_, w, cl, err := r.serve("w", parent, child, failing)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		got, err := startResult(r, parent, cl, "p", 21)
		if err != nil || got != "42/child run p-bad failed: child says no" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		if v, err := child.Result(r.Ctx, cl, "p-kid"); err != nil || v != 42 {
			return fmt.Errorf("the child's own result %d, %v", v, err)
		}
		evs, err := r.streamShapes("p", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "sys:child:p-kid", 1}, {event.StepCompleted, "sys:child:p-kid", 1},
			{event.StepStarted, "sys:child:p-bad", 1}, {event.StepFailed, "sys:child:p-bad", 1},
			{event.StepStarted, "show", 1}, {event.StepCompleted, "show", 1},
			{event.RunCompleted, "", 1},
		})
		if err != nil {
			return err
		}
		return checkEnvelopes(evs, "p", "parent", 1)
	})
}

func TestAdmissionQueuesRunsBeyondMaxActive(t *testing.T) {
	onMemstore(t, 16, func(r *rig) error {
		g := newGate(r.Ex)
		var mu sync.Mutex
		active, most := 0, 0
		def := workflow.New("admitted", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Step(c, "work", func(ctx context.Context) (int, error) {
				mu.Lock()
				active++
				most = max(most, active)
				mu.Unlock()
				defer func() { mu.Lock(); active--; mu.Unlock() }()
				return in, g.wait(ctx)
			})
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		for i, id := range []string{"r1", "r2", "r3"} {
			if err := def.Start(r.Ctx, cl, id, i); err != nil {
				return err
			}
			if err := r.Advance(time.Millisecond); err != nil { // distinct creation times: r1 first
				return err
			}
		}
		ev := &events{}
		w, err := r.worker("w", r.WorkerStore(), wfs, ev, func(c *workflow.WorkerConfig) { c.MaxActiveRuns = 1 })
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := r.WaitFor("r2 and r3 queued", 10*time.Second, func() (bool, error) {
			return ev.count(workflow.EvQueued, "") == 2, nil
		}); err != nil {
			return err
		}
		if got := w.Runs(); len(got) != 1 || got[0] != "r1" {
			return fmt.Errorf("running %v, want [r1]", got)
		}
		for _, id := range []string{"r2", "r3"} {
			if s, err := cl.Get(r.Ctx, id); err != nil || s.Status != workflow.StatusQueued {
				return fmt.Errorf("%s: %+v, %v", id, s, err)
			}
		}
		g.release()
		for i, id := range []string{"r1", "r2", "r3"} {
			if v, err := def.Result(r.Ctx, cl, id); err != nil || v != i {
				return fmt.Errorf("%s: %d, %v", id, v, err)
			}
		}
		if most != 1 {
			return fmt.Errorf("%d runs ran at once, want at most 1", most)
		}
		for _, id := range []string{"r2", "r3"} {
			evs, err := r.stream(id)
			if err != nil {
				return err
			}
			if err := sameShapes(evs, []shape{{event.RunQueued, "", 1}, {event.RunStarted, "", 1},
				{event.StepStarted, "work", 1}, {event.StepCompleted, "work", 1}, {event.RunCompleted, "", 1}}); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if err := checkEnvelopes(evs, id, "admitted", 1); err != nil {
				return err
			}
		}
		all, err := cl.List(r.Ctx, "admitted")
		if err != nil || len(all) != 3 {
			return fmt.Errorf("list %v, %v", all, err)
		}
		for _, s := range all {
			if s.Status != workflow.StatusCompleted {
				return fmt.Errorf("%s is %s", s.ID, s.Status)
			}
		}
		return nil
	})
}

func TestInvalidDefinitionsAndNames(t *testing.T) {
	ok := func(*workflow.Ctx, int) (int, error) { return 0, nil }
	for _, d := range []workflow.Workflow{
		workflow.New[int, int]("", 1, ok),
		workflow.New[int, int]("a/b", 1, ok),
		workflow.New[int, int]("v0", 0, ok),
		workflow.New[int, int]("nofn", 1, nil),
	} {
		if _, err := workflow.NewWorkflows(d); !errors.Is(err, workflow.ErrInvalid) {
			t.Errorf("%q v%d: %v, want ErrInvalid", d.Name(), d.Version(), err)
		}
	}
	a := workflow.New("a", 1, ok)
	if _, err := workflow.NewWorkflows(a, workflow.New("a", 1, ok)); !errors.Is(err, workflow.ErrInvalid) {
		t.Errorf("a name and version registered twice: %v", err)
	}
	// A step name breaking the rules is refused before anything is
	// recorded (the run fails with the function's error).
	onMemstore(t, 17, func(r *rig) error {
		def := workflow.New("names", 1, func(c *workflow.Ctx, _ int) (int, error) {
			for _, name := range []string{"", "a#2", "sys:x"} {
				if _, err := workflow.Step(c, name, func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, workflow.ErrInvalid) {
					return 0, fmt.Errorf("step name %q: %v", name, err)
				}
			}
			return 1, nil
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if v, err := startResult(r, def, cl, "run", 0); err != nil || v != 1 {
			return fmt.Errorf("result %d, %v", v, err)
		}
		return r.shapesAre("run", []shape{{event.RunStarted, "", 1}, {event.RunCompleted, "", 1}})
	})
}

// Cancelling a run cancels its children that have not ended, down the
// tree: a child waiting for its own child, and that grandchild (paused
// meanwhile, so held by nobody), end cancelled, while a child that had
// completed keeps its result.
func TestCancellingAParentCancelsItsLiveChildren(t *testing.T) {
	forEachBackend(t, 17, func(r *rig) error {
		leaf := workflow.New("leaf", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Await[int](c, "never")
		})
		done := workflow.New("done", 1, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
		middle := workflow.New("middle", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Child(c, leaf, c.RunID()+"-leaf", in)
		})
		root := workflow.New("root", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Child(c, done, "done-kid", in); err != nil {
				return 0, err
			}
			return workflow.Child(c, middle, "mid", in)
		})
		_, w, cl, err := r.serve("w", root, middle, leaf, done)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := root.Start(r.Ctx, cl, "root", 7); err != nil {
			return err
		}
		if err := r.waitStreamLen("the leaf to await", "mid-leaf", 2); err != nil {
			return err
		}
		if err := cl.Pause(r.Ctx, "mid-leaf", ""); err != nil {
			return err
		}
		if err := r.WaitFor("the leaf to pause", 10*time.Second, func() (bool, error) {
			sum, err := cl.Get(r.Ctx, "mid-leaf")
			return sum.Status == workflow.StatusPaused, err
		}); err != nil {
			return err
		}
		if err := cl.Cancel(r.Ctx, "root", "enough"); err != nil {
			return err
		}
		for _, id := range []string{"root", "mid", "mid-leaf"} {
			if _, err := cl.Result(r.Ctx, id); !errors.Is(err, workflow.ErrCancelled) {
				return fmt.Errorf("%s: %v, want cancelled", id, err)
			}
		}
		if v, err := done.Result(r.Ctx, cl, "done-kid"); err != nil || v != 7 {
			return fmt.Errorf("the completed child: %d, %v", v, err)
		}
		sum, err := cl.Get(r.Ctx, "mid")
		if err != nil || sum.Error != "parent run root cancelled" {
			return fmt.Errorf("the middle child's summary %+v, %v", sum, err)
		}
		return nil
	})
}

// latePause is a client's store whose pause of world lands late: before
// it does, its hook runs (the parent's cancel and its cascade).
type latePause struct {
	store.Store
	world string
	hook  func() error
	done  bool
	// acquired is closed once the client's Acquire of world has returned
	// (see holdPause).
	acquired     chan struct{}
	acquiredOnce sync.Once
}

func (l *latePause) Acquire(ctx context.Context, id, holder string, ttl time.Duration, opts ...store.AcquireOption) (store.Lease, error) {
	lease, err := l.Store.Acquire(ctx, id, holder, ttl, opts...)
	if id == l.world {
		l.acquiredOnce.Do(func() { close(l.acquired) })
	}
	return lease, err
}

// holdPause is the holder's store on a real backend: its pause of world
// waits until the pausing client has tried to take the lease. Otherwise a
// holder quick to act on the pause request (or a client slow to go on, on
// a loaded machine) pauses the run first, the client finds it paused and
// writes nothing, and the late pause the test is about never happens. The
// lab needs no such gate: its schedule is the seed's.
type holdPause struct {
	store.Store
	world string
	after <-chan struct{}
}

func (h *holdPause) SetWorldStatus(ctx context.Context, id string, s store.WorldStatus, reason string) (store.World, error) {
	if id == h.world && s == store.WorldPaused {
		select {
		case <-h.after:
		case <-ctx.Done():
			return store.World{}, ctx.Err()
		}
	}
	return h.Store.SetWorldStatus(ctx, id, s, reason)
}

func (l *latePause) SetWorldStatus(ctx context.Context, id string, s store.WorldStatus, reason string) (store.World, error) {
	if id == l.world && s == store.WorldPaused && !l.done {
		l.done = true
		if err := l.hook(); err != nil {
			return store.World{}, err
		}
	}
	return l.Store.SetWorldStatus(ctx, id, s, reason)
}

// TestALatePauseDoesNotBuryACancel: a pause whose status change lands
// after a parent's cancel made its paused child active again (the pauser
// descheduled in between) must not leave the child paused with the cancel
// waiting in its inbox, where no worker may take it up. The pauser looks
// for a cancel after pausing and makes the run active again for it.
func TestALatePauseDoesNotBuryACancel(t *testing.T) {
	forEachBackend(t, 23, func(r *rig) error {
		kid := workflow.New("kid", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Await[int](c, "never")
		})
		parent := workflow.New("parent", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Child(c, kid, "kid-1", in)
		})
		wfs, err := workflow.NewWorkflows(parent, kid)
		if err != nil {
			return err
		}
		acquired := make(chan struct{})
		var holderSt store.Store = r.WorkerStore()
		if r.Real() {
			holderSt = &holdPause{Store: holderSt, world: "kid-1", after: acquired}
		}
		w, cl, err := r.serveWith("w", holderSt, wfs, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := parent.Start(r.Ctx, cl, "parent-1", 1); err != nil {
			return err
		}
		if err := r.waitStreamLen("the kid to await", "kid-1", 2); err != nil {
			return err
		}
		status := func(want store.WorldStatus, reason string) func() (bool, error) {
			return func() (bool, error) {
				rec, err := r.Store.GetWorld(r.Ctx, "kid-1")
				return rec.Status == want && (reason == "" || rec.StatusReason == reason), err
			}
		}
		late := &latePause{Store: r.Store, world: "kid-1", acquired: acquired, hook: func() error {
			// The holder pauses the kid; then the parent is cancelled, and
			// its cascade makes the kid active for the cancel; only then
			// does this pause land.
			if err := r.WaitFor("the holder to pause the kid", 10*time.Second, status(store.WorldPaused, "")); err != nil {
				return err
			}
			if err := cl.Cancel(r.Ctx, "parent-1", "enough"); err != nil {
				return err
			}
			return r.WaitFor("the cascade to make the kid active", 10*time.Second, status(store.WorldActive, "workflow: cancelling"))
		}}
		lateCl, err := workflow.NewClient(late, wfs, r.Ex, workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
		if err != nil {
			return err
		}
		if err := lateCl.Pause(r.Ctx, "kid-1", ""); err != nil {
			return err
		}
		if !late.done {
			return fmt.Errorf("the late pause never happened: the test did not test the race")
		}
		if err := r.WaitFor("the kid to be cancelled", 10*time.Second, status(store.WorldArchived, string(workflow.StatusCancelled))); err != nil {
			rec, _ := r.Store.GetWorld(r.Ctx, "kid-1")
			return fmt.Errorf("%w: the kid is %s (%s)", err, rec.Status, rec.StatusReason)
		}
		if _, err := cl.Result(r.Ctx, "kid-1"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("kid: %v, want cancelled", err)
		}
		return nil
	})
}
