package api_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
)

// payoutScreened is payout as an earlier deploy had it: a "screen" step
// between validate and the approval, which payoutDef no longer asks for.
func payoutScreened() *workflow.Def[payout, string] {
	return workflow.New("payout", 1, func(c *workflow.Ctx, in payout) (string, error) {
		if _, err := workflow.Step(c, "validate", func(context.Context) (bool, error) { return true, nil }); err != nil {
			return "", err
		}
		if _, err := workflow.Step(c, "screen", func(context.Context) (bool, error) { return true, nil }); err != nil {
			return "", err
		}
		if _, err := workflow.Await[bool](c, "approved"); err != nil {
			return "", err
		}
		return "screened", nil
	})
}

// blockedRunsRig is a runs rig whose runs ids were journaled by
// payoutScreened before it started: its worker, on payoutDef, finds them
// diverged at step 1 and holds them blocked.
func blockedRunsRig(t *testing.T, o rigOptions, ids ...string) *rig {
	t.Helper()
	st := memstore.New()
	wfs, err := workflow.NewWorkflows(payoutScreened())
	if err != nil {
		t.Fatal(err)
	}
	testrig.RecordRuns(t, context.Background(), st, wfs, 3, func(ctx context.Context, cl *workflow.Client) error {
		for _, id := range ids {
			if err := payoutScreened().Start(ctx, cl, id, payout{Account: "alice", Amount: 5}); err != nil {
				return err
			}
		}
		return nil
	}, ids...)
	o.store = st
	r := newRunsRigWith(t, o)
	for _, id := range ids {
		r.runUntil(id, "is blocked", func(v api.RunView) bool { return v.Status == "blocked" })
		// The worker releases a run it holds blocked just after recording
		// why: the run is the operator's once its lease is free.
		r.WaitFor(id+" is released", func() (bool, error) {
			l, ok, err := r.Store.GetLease(r.Ctx, id)
			return err == nil && (!ok || l.Holder == ""), err
		})
	}
	return r
}

// TestTerminateAndResetThroughTheAPI: a run blocked by a divergence offers
// terminate and reset; reset to the diverging step, it goes on under the
// new code and completes; terminated, it fails "terminated: reason", and
// a second terminate is 409 finished. A missing, negative or too large step
// is 400, an unknown run 404, and a run a worker holds right now 409 fenced
// with a message telling to cancel or pause it first.
func TestTerminateAndResetThroughTheAPI(t *testing.T) {
	r := blockedRunsRig(t, rigOptions{}, "p-r", "p-t")
	v := must(r.Client.GetRun(r.Ctx, "p-r"))(t)
	if want := `blocked: divergent at step 1: recorded "screen", got "sys:await:approved"`; v.Error != want {
		t.Fatalf("the blocked run's error %q, want %q", v.Error, want)
	}
	if !slices.Equal(v.Actions, []string{"pause", "cancel", "signal", "terminate", "reset"}) {
		t.Fatalf("a blocked run's actions: %v", v.Actions)
	}

	for _, body := range []string{`{"reason":"no step"}`, `{}`, `{"step":-1}`, `{"step":1.5}`} {
		if st, b := r.Do(http.MethodPost, "/v1/runs/p-r/reset", "application/json", body, ""); st != http.StatusBadRequest {
			t.Errorf("reset with %s: %d %s, want 400", body, st, b)
		}
	}
	_, err := r.Client.ResetRun(r.Ctx, "p-r", -1, "")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	_, err = r.Client.ResetRun(r.Ctx, "p-r", 9, "")
	if e := apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument); !errors.Is(err, workflow.ErrInvalid) || !strings.Contains(e.Message, "step 9") {
		t.Fatalf("a reset past the recorded steps: %v", err)
	}
	_, err = r.Client.ResetRun(r.Ctx, "nobody", 0, "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)

	v, err = r.Client.ResetRun(r.Ctx, "p-r", 1, "screen withdrawn")
	if err != nil || v.ID != "p-r" {
		t.Fatalf("reset: %+v, %v", v.Run, err)
	}
	if err := r.Client.SignalRun(r.Ctx, "p-r", "approved", true, "ok"); err != nil {
		t.Fatal(err)
	}
	v = r.runUntil("p-r", "completes under the new code", func(v api.RunView) bool { return v.Status == "completed" })
	if string(v.Output) != `"paid 5 to alice"` {
		t.Fatalf("the reset run's output %s, want the new code's", v.Output)
	}

	v, err = r.Client.TerminateRun(r.Ctx, "p-t", "bad deploy")
	if err != nil || v.Status != "failed" || v.Error != "terminated: bad deploy" || len(v.Actions) != 0 {
		t.Fatalf("terminate: %s %q %v, %v; want failed \"terminated: bad deploy\" with no actions", v.Status, v.Error, v.Actions, err)
	}
	_, err = r.Client.TerminateRun(r.Ctx, "p-t", "again")
	apiError(t, err, http.StatusConflict, api.CodeFinished)
	if !errors.Is(err, workflow.ErrFinished) {
		t.Fatalf("%v does not match workflow.ErrFinished", err)
	}
	_, err = r.Client.ResetRun(r.Ctx, "p-t", 0, "")
	apiError(t, err, http.StatusConflict, api.CodeFinished)
	_, err = r.Client.TerminateRun(r.Ctx, "nobody", "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)

	// A run the worker holds (waiting for its approval) is refused: the
	// operator cancels or pauses it first.
	startRun(t, r, "p-live", payout{Account: "bob", Amount: 1})
	r.runUntil("p-live", "waits", func(v api.RunView) bool { return len(v.Timeline) == 2 })
	for _, op := range []func() error{
		func() error { _, err := r.Client.TerminateRun(r.Ctx, "p-live", ""); return err },
		func() error { _, err := r.Client.ResetRun(r.Ctx, "p-live", 1, ""); return err },
	} {
		err := op()
		if e := apiError(t, err, http.StatusConflict, api.CodeFenced); !strings.Contains(e.Message, "cancel or pause it first") {
			t.Fatalf("a held run: %q, want it to say to cancel or pause first", e.Message)
		}
	}
	if v := must(r.Client.GetRun(r.Ctx, "p-live"))(t); v.Status != "running" {
		t.Fatalf("the refused run is %s, want it running untouched", v.Status)
	}
}
