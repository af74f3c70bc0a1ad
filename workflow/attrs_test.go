package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

// TestSearchAttributesAreJournaledAndIndexed: a start's attributes and the
// function's SetAttributes (an empty value removes a key) are recorded in
// the run's journal; Client.Get reads them (from the start item while no
// worker has taken the run); the runs projection built from the streams
// alone finds runs by them through its index; a re-run replays
// SetAttributes without writing, and the attributes outlive ContinueAsNew.
func TestSearchAttributesAreJournaledAndIndexed(t *testing.T) {
	forEachBackend(t, 131, func(r *rig) error {
		def := workflow.New("order", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Step(c, "charge", func(context.Context) (int, error) { return in, nil }); err != nil {
				return 0, err
			}
			if err := workflow.SetAttributes(c, map[string]string{"stage": "charged", "region": ""}); err != nil {
				return 0, err
			}
			if in == 1 {
				// A new generation keeps what the old one set.
				return 0, workflow.ContinueAsNew(c, 2)
			}
			if _, err := workflow.Await[int](c, "ship"); err != nil {
				return 0, err
			}
			return in, workflow.SetAttributes(c, map[string]string{"stage": "shipped"})
		})
		parked := workflow.New("parked", 1, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
		// Started while no worker runs: Get reads the start item's.
		wfs, idle, err := r.clientFor(def, parked)
		if err != nil {
			return err
		}
		// A run waiting in a queue (which no worker here serves) is
		// indexed from its RunQueued.
		if err := wfs.AddQueues(workflow.Queue{Name: "q", Concurrency: 1}); err != nil {
			return err
		}
		if err := parked.Start(r.Ctx, idle, "waits", 1, workflow.OnQueue("q"), workflow.WithAttributes(map[string]string{"customer": "c-9"})); err != nil {
			return err
		}
		if proj, err := r.projectRuns("waits"); err != nil {
			return err
		} else if got := proj.Match(map[string]string{"customer": "c-9"}); !slices.Equal(got, []string{"waits"}) {
			return fmt.Errorf("a queued run's attributes: Match = %v, want [waits]", got)
		}
		if err := def.Start(r.Ctx, idle, "o1", 1, workflow.WithAttributes(map[string]string{"customer": "c-1", "region": "eu"})); err != nil {
			return err
		}
		sum, err := idle.Get(r.Ctx, "o1")
		if err != nil {
			return err
		}
		if want := map[string]string{"customer": "c-1", "region": "eu"}; !maps.Equal(sum.Attributes, want) {
			return fmt.Errorf("a pending run's attributes %v, want %v", sum.Attributes, want)
		}
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "o2", 5, workflow.WithAttributes(map[string]string{"customer": "c-2", "region": "eu"})); err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "o3", 7); err != nil {
			return err
		}
		for _, id := range []string{"o1", "o2", "o3"} {
			if err := r.WaitFor(id+" awaiting shipment", 20*time.Second, func() (bool, error) {
				evs, err := r.stream(id)
				return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:ship", err
			}); err != nil {
				return err
			}
		}
		sum, err = cl.Get(r.Ctx, "o1")
		if err != nil {
			return err
		}
		if want := map[string]string{"customer": "c-1", "stage": "charged"}; !maps.Equal(sum.Attributes, want) {
			return fmt.Errorf("o1's attributes %v, want %v (the region removed, kept across the new generation)", sum.Attributes, want)
		}
		proj, err := r.projectRuns("o1", "o2", "o3")
		if err != nil {
			return err
		}
		for _, c := range []struct {
			filter map[string]string
			want   []string
		}{
			{map[string]string{"stage": "charged"}, []string{"o1", "o2", "o3"}},
			{map[string]string{"stage": "charged", "customer": "c-2"}, []string{"o2"}},
			{map[string]string{"region": "eu"}, nil},
			{map[string]string{"customer": "c-3"}, nil},
		} {
			if got := proj.Match(c.filter); !slices.Equal(got, c.want) {
				return fmt.Errorf("Match(%v) = %v, want %v", c.filter, got, c.want)
			}
		}
		if row, _ := proj.Get("o1"); !maps.Equal(row.Attributes, sum.Attributes) {
			return fmt.Errorf("the projection's o1 %v, the client's %v", row.Attributes, sum.Attributes)
		}
		if err := cl.Signal(r.Ctx, "o1", "ship", 1, "s"); err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "o1"); err != nil || got != 2 {
			return fmt.Errorf("o1's result %d, %v", got, err)
		}
		evs, err := r.stream("o1")
		if err != nil {
			return err
		}
		sets := 0
		for _, e := range evs {
			if e.EventType == event.StepCompleted && strings.HasPrefix(e.StepID, workflow.AttrsStep) {
				sets++
			}
		}
		if sets != 3 { // one per generation's SetAttributes, and "shipped"
			return fmt.Errorf("%d attribute steps recorded, want 3", sets)
		}
		if _, err := workflow.Replay(def, evs); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		if proj, err = r.projectRuns("o1", "o2", "o3"); err != nil {
			return err
		}
		if got := proj.Match(map[string]string{"stage": "shipped"}); !slices.Equal(got, []string{"o1"}) {
			return fmt.Errorf("shipped runs %v, want [o1]", got)
		}
		if got := proj.Match(map[string]string{"stage": "charged"}); !slices.Equal(got, []string{"o2", "o3"}) {
			return fmt.Errorf("after o1 shipped, charged runs %v, want [o2 o3] (the index keeps no old value)", got)
		}
		return nil
	})
}

// projectRuns builds a runs projection from the runs' streams alone.
func (r *rig) projectRuns(ids ...string) (*projector.Runs, error) {
	proj := projector.NewRuns()
	for _, id := range ids {
		evs, err := r.stream(id)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if err := proj.Apply(r.Ctx, id, e); err != nil {
				return nil, err
			}
		}
	}
	return proj, nil
}

// TestBadAttributesAreRefused: keys and values outside the limits are
// ErrInvalid at the start and in SetAttributes, and nothing is started or
// recorded.
func TestBadAttributesAreRefused(t *testing.T) {
	for _, bad := range []map[string]string{
		{"": "x"},
		{"has space": "x"},
		{"k:v": "x"},
		{strings.Repeat("k", workflow.MaxAttributeKeyBytes+1): "x"},
		{"k": strings.Repeat("v", workflow.MaxAttributeValueBytes+1)},
		{"k": "a\x00b"},
		{"k": "\xff"},
	} {
		if err := workflow.CheckAttributes(bad); !errors.Is(err, workflow.ErrInvalid) {
			t.Errorf("CheckAttributes(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	many := map[string]string{}
	for i := range workflow.MaxAttributes + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	if err := workflow.CheckAttributes(many); !errors.Is(err, workflow.ErrInvalid) {
		t.Errorf("%d attributes: %v, want ErrInvalid", len(many), err)
	}
	onMemstore(t, 132, func(r *rig) error {
		def := workflow.New("labelled", 1, func(c *workflow.Ctx, in int) (int, error) {
			if err := workflow.SetAttributes(c, map[string]string{"bad key": "x"}); err != nil {
				return 0, err
			}
			return in, nil
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "refused", 1, workflow.WithAttributes(map[string]string{"a b": "c"})); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("a start with a bad key: %v, want ErrInvalid", err)
		}
		if _, err := cl.Get(r.Ctx, "refused"); !errors.Is(err, workflow.ErrNotFound) {
			return fmt.Errorf("the refused start exists: %v", err)
		}
		if err := def.Start(r.Ctx, cl, "sets-bad", 1); err != nil {
			return err
		}
		if _, err := def.Result(r.Ctx, cl, "sets-bad"); !errors.Is(err, workflow.ErrFailed) {
			return fmt.Errorf("a run whose SetAttributes is refused: %v, want it failed with the error", err)
		}
		evs, err := r.stream("sets-bad")
		if err != nil {
			return err
		}
		for _, e := range evs {
			if strings.HasPrefix(e.StepID, workflow.AttrsStep) {
				return fmt.Errorf("a refused SetAttributes recorded %s", e.EventType)
			}
		}
		return nil
	})
}

// TestAttributesAreNotARunsIdentity: a start repeated with other
// attributes is the same run, which keeps the first start's attributes.
func TestAttributesAreNotARunsIdentity(t *testing.T) {
	forEachBackend(t, 135, func(r *rig) error {
		def := workflow.New("labelled", 1, func(c *workflow.Ctx, in int) (int, error) { return workflow.Await[int](c, "go") })
		_, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "same", 1, workflow.WithAttributes(map[string]string{"k": "first"})); err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "same", 1, workflow.WithAttributes(map[string]string{"k": "second"})); err != nil {
			return fmt.Errorf("the repeated start with other attributes: %v, want the same run", err)
		}
		if err := def.Start(r.Ctx, cl, "same", 1); err != nil {
			return fmt.Errorf("the repeated start without attributes: %v, want the same run", err)
		}
		sum, err := cl.Get(r.Ctx, "same")
		if err != nil || sum.Attributes["k"] != "first" {
			return fmt.Errorf("attributes %v, %v; want the first start's", sum.Attributes, err)
		}
		return nil
	})
}
