package workflow_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUnrunnableRunsAreListedAndLoggedOnce: a run pinned to a version no
// live worker carries is in Client.Unrunnable (with the live workers);
// ReportUnrunnable logs one warning for it however many times it looks,
// and one info line once a worker carrying the version is live.
func TestUnrunnableRunsAreListedAndLoggedOnce(t *testing.T) {
	forEachBackend(t, 134, func(r *rig) error {
		ok := func(_ *workflow.Ctx, in int) (int, error) { return in, nil }
		v1, v2 := workflow.New("pay", 1, ok), workflow.New("pay", 2, ok)
		_, cl, err := r.clientFor(v1, v2)
		if err != nil {
			return err
		}
		if err := v2.Start(r.Ctx, cl, "run", 1); err != nil {
			return err
		}
		if un, err := cl.Unrunnable(r.Ctx); err != nil || len(un) != 0 {
			return fmt.Errorf("with no worker live at all: %v, %v; want none", un, err)
		}
		if _, err := r.Store.Heartbeat(r.Ctx, "old", 10, store.Advertise([]string{workflow.Capability("pay", 1)})); err != nil {
			return err
		}
		un, err := cl.Unrunnable(r.Ctx)
		if err != nil {
			return err
		}
		u, found := un["workflow:pay@2"]
		if len(un) != 1 || !found || !slices.Equal(u.Runs, []string{"run"}) || !slices.Equal(u.Live, []string{"old"}) || u.Version != 2 {
			return fmt.Errorf("unrunnable %+v, want run under workflow:pay@2 with live [old]", un)
		}
		var logs syncBuf
		log := slog.New(slog.NewTextHandler(&logs, nil))
		stop, err := r.Background("report", func(ctx context.Context) error { return cl.ReportUnrunnable(ctx, time.Second, log) })
		if err != nil {
			return err
		}
		defer stop()
		if err := r.WaitFor("the warning", 20*time.Second, func() (bool, error) {
			return strings.Contains(logs.String(), "unrunnable"), nil
		}); err != nil {
			return err
		}
		// Several more looks: still one warning.
		if err := actor.Sleep(r.Ctx, r.Ex, 3*time.Second); err != nil {
			return err
		}
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
			return fmt.Errorf("%d warnings logged, want 1:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), "capability=workflow:pay@2") || !strings.Contains(logs.String(), "runs=1") {
			return fmt.Errorf("the warning does not name the version and its runs:\n%s", logs.String())
		}
		if _, err := r.Store.Heartbeat(r.Ctx, "new", 10, store.Advertise([]string{workflow.Capability("pay", 2)})); err != nil {
			return err
		}
		if err := r.WaitFor("the all-clear", 20*time.Second, func() (bool, error) {
			return strings.Contains(logs.String(), "runnable again"), nil
		}); err != nil {
			return err
		}
		if s, err := cl.Get(r.Ctx, "run"); err != nil || s.Status == workflow.StatusUnrunnable {
			return fmt.Errorf("with a worker carrying v2: %+v, %v", s, err)
		}
		return nil
	})
}
