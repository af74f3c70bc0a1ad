package demo_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/internal/demo"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// steps are the seven step headings the demo must print, in order.
var steps = []string{
	"\n1. Start a node",
	"\n2. A call with a reply",
	"\n3. A transfer saga",
	"\n4. A large withdrawal, audited",
	"\n5. A worker crash",
	"\n6. A fork",
	"\n7. Summary",
}

func checkSteps(t *testing.T, out string) {
	t.Helper()
	at := 0
	for _, s := range steps {
		i := strings.Index(out[at:], s)
		if i < 0 {
			t.Fatalf("output lacks %q after offset %d:\n%s", s, at, out)
		}
		at += i + len(s)
	}
	for _, want := range []string{
		"Call(alice, Balance{}) = 1000",
		"t-1 started: Hold{300} sent to alice with fabric.send",
		"balances: alice 700, bob 800",
		"receipt recorded in carol's state: ok, HTTP 200",
		"the audit service received exactly 1 request",
		"demo-1 killed",
		"demo-2 takes over after the lease TTL",
		"bob-what-if boots at exactly bob's state",
		"they diverge: bob 800",
		"money conserved: alice 500 + bob 800 + carol 700 = 2000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// The whole demo on the embedded default, in real time: Run returns nil
// only if every check it narrates held.
func TestDemoRunsOnSQLite(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	if err := demo.Run(ctx, &out, demo.Options{Dir: dir, Quick: true}); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	checkSteps(t, out.String())
	if _, err := os.Stat(filepath.Join(dir, demo.DBName)); err != nil {
		t.Fatalf("the database is not kept in Dir: %v", err)
	}
	// A second run in the same directory starts afresh.
	out.Reset()
	if err := demo.Run(ctx, &out, demo.Options{Dir: dir, Quick: true}); err != nil {
		t.Fatalf("second Run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "replaced the database of an earlier demo run") {
		t.Fatalf("second run did not say it replaced the database:\n%s", out.String())
	}
}

// The same scenario on memstore, in the virtual time of a synctest bubble:
// the takeover waits out the lease TTL without the test waiting for it.
func TestDemoRunsOnMemstoreInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		if err := demo.Run(context.Background(), &out, demo.Options{Store: memstore.New(), InProcessAudit: true}); err != nil {
			t.Fatalf("Run: %v\n%s", err, out.String())
		}
		checkSteps(t, out.String())
	})
}

// A demo whose effects can never complete fails the check of the first
// step that needs one (the transfer saga, step 3) with ErrCheck, after its
// bounded wait, and cleans up.
func TestDemoReportsACheckThatDoesNotHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.WithHook(func(op string) error {
			if op == "complete" || op == "complete_many" {
				return store.Errorf(op, store.ErrInvalid, "", "test: effects never complete")
			}
			return nil
		}))
		var out strings.Builder
		err := demo.Run(context.Background(), &out, demo.Options{Store: st, InProcessAudit: true})
		if !errors.Is(err, demo.ErrCheck) || !strings.Contains(err.Error(), "step 3") {
			t.Fatalf("Run = %v; want ErrCheck at step 3\n%s", err, out.String())
		}
	})
}
