package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow"
)

func decodeString(b []byte) string {
	var s string
	if err := event.Unmarshal(b, &s); err != nil {
		return "<" + err.Error() + ">"
	}
	return s
}

// errNotReady is what the "fails" query handler returns.
var errNotReady = errors.New("not ready")

// TestQueriesAndPublishedValuesReadARunWithoutWriting: a query answers from
// the run's state as its journal stands (mid-run and after the end), an
// unknown query is ErrUnknownQuery, a handler that panics or fails is
// ErrInvalid (a failure keeps the handler's error), a value published with
// SetEvent is read while the run waits, and none of it appends to the
// run's stream.
func TestQueriesAndPublishedValuesReadARunWithoutWriting(t *testing.T) {
	forEachBackend(t, 91, func(r *rig) error {
		def := workflow.New("progress", 1, func(c *workflow.Ctx, in int) (int, error) {
			stage := "reserving"
			if err := workflow.OnQuery(c, "stage", func() (string, error) { return stage, nil }); err != nil {
				return 0, err
			}
			if err := workflow.OnQuery(c, "boom", func() (string, error) { panic("no") }); err != nil {
				return 0, err
			}
			if err := workflow.OnQuery(c, "fails", func() (string, error) { return "", errNotReady }); err != nil {
				return 0, err
			}
			if _, err := workflow.Step(c, "reserve", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			stage = "awaiting shipment"
			if err := workflow.SetEvent(c, "stage", stage); err != nil {
				return 0, err
			}
			if _, err := workflow.Await[int](c, "shipped"); err != nil {
				return 0, err
			}
			stage = "done"
			return 1, workflow.SetEvent(c, "stage", stage)
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "o", 0); err != nil {
			return err
		}
		if err := r.WaitFor("the published stage", 20*time.Second, func() (bool, error) {
			v, ok, err := cl.GetEvent(r.Ctx, "o", "stage")
			if err != nil || !ok || decodeString(v) != "awaiting shipment" {
				return false, err
			}
			evs, err := r.stream("o") // the run waits for the signal
			return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:shipped", err
		}); err != nil {
			return err
		}
		before, err := r.stream("o")
		if err != nil {
			return err
		}
		got, err := cl.Query(r.Ctx, "o", "stage")
		if err != nil || decodeString(got) != "awaiting shipment" {
			return fmt.Errorf("query mid-run: %q, %v", decodeString(got), err)
		}
		if _, err := cl.Query(r.Ctx, "o", "nope"); !errors.Is(err, workflow.ErrUnknownQuery) || !errors.Is(err, workflow.ErrNotFound) {
			return fmt.Errorf("an unknown query: %v", err)
		}
		if _, err := cl.Query(r.Ctx, "o", "boom"); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("a panicking handler: %v", err)
		}
		if _, err := cl.Query(r.Ctx, "o", "fails"); !errors.Is(err, workflow.ErrInvalid) || !errors.Is(err, errNotReady) {
			return fmt.Errorf("a failing handler: %v", err)
		}
		after, err := r.stream("o")
		if err != nil || len(after) != len(before) {
			return fmt.Errorf("the queries wrote: %d events before, %d after (%v)", len(before), len(after), err)
		}
		if err := cl.Signal(r.Ctx, "o", "shipped", 1, "k"); err != nil {
			return err
		}
		if _, err := def.Result(r.Ctx, cl, "o"); err != nil {
			return err
		}
		if got, err := cl.Query(r.Ctx, "o", "stage"); err != nil || decodeString(got) != "done" {
			return fmt.Errorf("query after the end: %q, %v", decodeString(got), err)
		}
		all, err := cl.Events(r.Ctx, "o")
		if err != nil || len(all) != 1 || decodeString(all["stage"]) != "done" {
			return fmt.Errorf("events %v, %v", all, err)
		}
		return nil
	})
}

// TestAQueryNeedsTheRunsVersion: a query replays the run's function, so a
// client whose process does not carry the run's version answers
// ErrVersionNotCarried (naming the version) and writes nothing, while one
// that carries it answers.
func TestAQueryNeedsTheRunsVersion(t *testing.T) {
	forEachBackend(t, 92, func(r *rig) error {
		body := func(c *workflow.Ctx, in int) (int, error) {
			if err := workflow.OnQuery(c, "in", func() (int, error) { return in, nil }); err != nil {
				return 0, err
			}
			return workflow.Await[int](c, "go")
		}
		v1, v2 := workflow.New("asked", 1, body), workflow.New("asked", 2, body)
		_, w, cl, err := r.serve("w", v1, v2)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := v2.Start(r.Ctx, cl, "q", 5); err != nil {
			return err
		}
		if err := r.WaitFor("the run to await", 20*time.Second, func() (bool, error) {
			evs, err := r.stream("q")
			return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:go", err
		}); err != nil {
			return err
		}
		if got, err := cl.Query(r.Ctx, "q", "in"); err != nil || decodeInt(got) != 5 {
			return fmt.Errorf("a query where v2 is carried: %v, %v", got, err)
		}
		before, err := r.stream("q")
		if err != nil {
			return err
		}
		_, old, err := r.clientFor(v1)
		if err != nil {
			return err
		}
		if _, err := old.Query(r.Ctx, "q", "in"); !errors.Is(err, workflow.ErrVersionNotCarried) || !strings.Contains(err.Error(), "asked@2") {
			return fmt.Errorf("a query where only v1 is carried: %v, want ErrVersionNotCarried naming asked@2", err)
		}
		after, err := r.stream("q")
		if err != nil {
			return err
		}
		if len(after) != len(before) {
			return fmt.Errorf("the refused query wrote %d events", len(after)-len(before))
		}
		return nil
	})
}

func decodeInt(b []byte) int {
	var v int
	if err := event.Unmarshal(b, &v); err != nil {
		return -1
	}
	return v
}
