package cli_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
)

// TestServeExitsWhenSuperseded: another process heartbeats under serve's
// worker id with an incarnation of its own, so the store refuses serve's
// next heartbeat. serve must exit by itself, non-zero, with a log line
// that says why, and leave the worker record, now the other process's,
// undrained. Before, the host failed but serve ran on as a zombie until a
// signal came, which no supervisor would send.
func TestServeExitsWhenSuperseded(t *testing.T) {
	db := filepath.Join(t.TempDir(), "o.db")
	s := startServe(t, nil, "sv-z", "--store", db, "--lease-ttl", "2s")
	st, err := sqlite.Open(s.ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testrig.WaitFor(t, "serve's first heartbeat", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
		ws, err := st.ListWorkers(s.ctx)
		return len(ws) == 1 && ws[0].Incarnation != "", err
	})
	if _, err := st.Heartbeat(s.ctx, "sv-z", 10, store.AliveAs("successor", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-s.done:
		s.done <- code
	case <-s.ctx.Done():
		t.Fatalf("serve did not exit after it was superseded\nstderr: %s", s.err.String())
	}
	if code != cli.ExitSuperseded {
		t.Fatalf("serve exited %d after it was superseded, want %d\nstderr: %s", code, cli.ExitSuperseded, s.err.String())
	}
	if logs := s.err.String(); !strings.Contains(logs, "another process took over this worker id") || !strings.Contains(logs, "superseded") {
		t.Fatalf("serve's log does not say why it exited:\n%s", logs)
	}
	ws, err := st.ListWorkers(s.ctx)
	if err != nil || len(ws) != 1 || ws[0].Draining || ws[0].Incarnation != "successor" {
		t.Fatalf("workers after the superseded serve exited: %+v (%v), want the successor's record, not draining", ws, err)
	}
}
