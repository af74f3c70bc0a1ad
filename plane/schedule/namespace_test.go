package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

type report struct{ Day string }

// TestAUserStartCannotSwallowATick: a tick's run id and input key are its
// exactly-once identity, so a user who starts a run under the id the next
// tick will use, or sends the target world an input under the tick's key,
// would make the tick dedupe against their own unrelated work (or fail on
// it as a conflict) and never happen. Both are refused as invalid, and the
// tick, when it comes, starts its own run and input through the real
// starter.
func TestAUserStartCannotSwallowATick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		ctx := e.ctx
		def := workflow.New("report", 1, func(c *workflow.Ctx, in report) (string, error) { return in.Day, nil })
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := workflow.NewClient(e.st, wfs, actor.NewExecutor(1))
		if err != nil {
			t.Fatal(err)
		}
		counter := testworlds.CounterDef()
		ops, err := plane.NewOps(e.st, plane.Kernels{testworlds.CounterName: counter.Kernel()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.CreateWorld(ctx, testworlds.CounterName, "w", nil); err != nil {
			t.Fatal(err)
		}
		input, err := event.Marshal(report{Day: "theirs"})
		if err != nil {
			t.Fatal(err)
		}
		typ, err := world.TypeName(testworlds.Add{})
		if err != nil {
			t.Fatal(err)
		}
		value, err := event.Marshal(testworlds.Add{By: 1, Key: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		ours, err := event.Marshal(report{Day: "ours"})
		if err != nil {
			t.Fatal(err)
		}
		e.create("daily", schedule.Spec{Every: schedule.Duration(time.Hour), Target: schedule.Target{Workflow: "report", Input: ours}})
		e.create("feed", schedule.Spec{Every: schedule.Duration(time.Hour), Target: schedule.Target{World: "w", Type: typ, Value: value}})
		tick := schedule.Tick{Key: at(1, 0).Format("20060102T150405.000000000Z")}
		runID, key := schedule.RunID("daily", tick), schedule.DedupeKey("feed", tick)

		// The attacker goes first, through every user-facing door.
		if _, err := runs.StartCBOR(ctx, "report", runID, input); !errors.Is(err, workflow.ErrInvalid) {
			t.Fatalf("StartCBOR of the tick's run id %s: %v, want ErrInvalid", runID, err)
		}
		if err := runs.Start(ctx, def, runID, report{Day: "theirs"}); !errors.Is(err, workflow.ErrInvalid) {
			t.Fatalf("Start of the tick's run id %s: %v, want ErrInvalid", runID, err)
		}
		if _, err := ops.EnqueueEvent(ctx, "w", typ, value, key); !errors.Is(err, plane.ErrInvalidIngress) || !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("an event keyed like the tick %s: %v, want ErrInvalidIngress (the store's ErrInvalid)", key, err)
		}
		if _, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: "event", DedupeKey: key}); !errors.Is(err, plane.ErrInvalidIngress) {
			t.Fatalf("an ingress keyed like the tick %s: %v, want ErrInvalidIngress", key, err)
		}
		if _, err := e.st.GetWorld(ctx, runID); !errors.Is(err, store.ErrWorldNotFound) {
			t.Fatalf("the refused start left run %s behind: %v", runID, err)
		}

		e.scheduler(schedule.NodeStarter{Runs: runs, Workflows: wfs, Ops: ops})
		time.Sleep(time.Hour + time.Second)
		synctest.Wait()
		for _, id := range []string{"daily", "feed"} {
			if sc := e.get(id); sc.State.Fired != 1 || sc.State.Failed != 0 || len(sc.State.Pending) != 0 {
				t.Fatalf("schedule %s: %+v, want the 01:00 tick fired", id, sc.State)
			}
		}
		if _, err := runs.Get(ctx, runID); err != nil {
			t.Fatalf("the tick's run %s: %v", runID, err)
		}
		items, err := e.st.ReadInbox(ctx, "w", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 || items[0].DedupeKey != key {
			t.Fatalf("world w's inbox %+v, want the tick's input alone", items)
		}
	})
}

// TestTheSchedulersPathIsTheOnlyWayIn: the scheduler's own marks do not
// open other ids: a tick's start outside the namespace is refused too, so
// the mark cannot be used to mint ordinary runs or inputs that dodge it.
func TestTheSchedulersPathIsTheOnlyWayIn(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	def := workflow.New("report", 1, func(c *workflow.Ctx, in report) (string, error) { return in.Day, nil })
	wfs, err := workflow.NewWorkflows(def)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := workflow.NewClient(e.st, wfs, actor.NewExecutor(1))
	if err != nil {
		t.Fatal(err)
	}
	in, err := event.Marshal(report{Day: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.StartCBOR(ctx, "report", "plain", in, workflow.ScheduleTick()); !errors.Is(err, workflow.ErrInvalid) {
		t.Fatalf("a tick's start of a plain run id: %v, want ErrInvalid", err)
	}
	if _, err := runs.StartCBOR(ctx, "report", "sched.s.x", in, workflow.ScheduleTick()); err != nil {
		t.Fatalf("the scheduler's start: %v", err)
	}
}

// TestScheduleIDsKeepTicksApart: a schedule id is letters, digits, '-'
// and '_': with '.' or ':' allowed, schedule "a.b" and schedule "a" could
// derive the same run id for different ticks. Empty and oversized ids are
// refused too; the longest id's ticks still fit a run id.
func TestScheduleIDsKeepTicksApart(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"", "a.b", "a:b", "a b", "é", "a/b", strings.Repeat("x", schedule.MaxIDBytes+1)} {
		if _, err := schedule.Create(e.ctx, e.st, id, wf(time.Hour)); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("Create %q: %v, want ErrInvalid", id, err)
		}
	}
	long := strings.Repeat("x", schedule.MaxIDBytes)
	e.create(long, wf(time.Hour))
	e.create("A-z_09", wf(time.Hour))
	tk, _, _, err := schedule.TriggerKeyed(e.ctx, e.st, long, strings.Repeat("k", store.MaxKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CheckID("start", "run id", schedule.RunID(long, tk)); err != nil {
		t.Fatalf("the longest id's keyed trigger run id: %v", err)
	}
	if err := store.CheckKey("enqueue", "key", schedule.DedupeKey(long, tk)); err != nil {
		t.Fatalf("the longest id's keyed trigger key: %v", err)
	}
}

// TestTriggerIsIdempotentByKey: a trigger repeated with its key (a client
// that lost the answer) records no second tick and answers the first's; a
// new key is a new tick; the same key on a schedule deleted and created
// again under the same id is a new tick of the new schedule, whose run id
// is not the old one's.
func TestTriggerIsIdempotentByKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.create("s", wf(time.Hour))
		first, sc, dup, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "k1")
		if err != nil || dup || len(sc.State.Pending) != 1 {
			t.Fatalf("first trigger: %+v dup %v pending %d, %v", first, dup, len(sc.State.Pending), err)
		}
		time.Sleep(time.Second)
		again, sc, dup, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "k1")
		if err != nil || !dup || again != first || len(sc.State.Pending) != 1 {
			t.Fatalf("repeat: %+v dup %v pending %d, %v; want the first tick %+v, dup, one pending", again, dup, len(sc.State.Pending), err, first)
		}
		other, sc, dup, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "k2")
		if err != nil || dup || other.Key == first.Key || len(sc.State.Pending) != 2 {
			t.Fatalf("another key: %+v dup %v pending %d, %v", other, dup, len(sc.State.Pending), err)
		}
		e.starts.autoEnd = true
		stop := e.scheduler(nil)
		synctest.Wait()
		stop()
		if got := e.starts.started(); len(got) != 2 || got[0] != schedule.RunID("s", first) || got[1] != schedule.RunID("s", other) {
			t.Fatalf("started %v, want the two keyed ticks once each", got)
		}
		if err := schedule.Delete(e.ctx, e.st, "s"); err != nil {
			t.Fatal(err)
		}
		e.create("s", wf(time.Hour))
		renewed, _, dup, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "k1")
		if err != nil || dup || schedule.RunID("s", renewed) == schedule.RunID("s", first) {
			t.Fatalf("k1 on the recreated schedule: %+v dup %v, %v; want a new tick, not the old %s", renewed, dup, err, first.Key)
		}
	})
}

// TestAnOldTriggerKeyStillStartsNothingTwice: past MaxTriggerKeys later
// triggers the schedule no longer remembers a key, and its repeat records
// a tick again, but the same tick key: its start is the first's run.
func TestAnOldTriggerKeyStillStartsNothingTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.create("s", wf(time.Hour))
		first, _, _, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "old")
		if err != nil {
			t.Fatal(err)
		}
		for i := range schedule.MaxTriggerKeys {
			if _, _, _, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "k"+string(rune('A'+i%26))+time.Duration(i).String()); err != nil {
				t.Fatal(err)
			}
		}
		if sc := e.get("s"); len(sc.State.Triggers) != schedule.MaxTriggerKeys {
			t.Fatalf("%d trigger keys remembered, want %d", len(sc.State.Triggers), schedule.MaxTriggerKeys)
		}
		again, _, dup, err := schedule.TriggerKeyed(e.ctx, e.st, "s", "old")
		if err != nil || dup || again.Key != first.Key {
			t.Fatalf("the forgotten key again: %+v dup %v, %v; want a new record of tick %s", again, dup, err, first.Key)
		}
		e.starts.autoEnd = true
		stop := e.scheduler(nil)
		synctest.Wait()
		stop()
		runs := map[string]int{}
		for _, id := range e.starts.started() {
			runs[id]++
		}
		if len(runs) != schedule.MaxTriggerKeys+1 || runs[schedule.RunID("s", first)] != 1 {
			t.Fatalf("%d distinct runs (the old key's %d times), want %d, the old key's once", len(runs), runs[schedule.RunID("s", first)], schedule.MaxTriggerKeys+1)
		}
	})
}
