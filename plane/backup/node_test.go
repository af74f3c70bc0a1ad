package backup_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/backup"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type payments struct{ Paid []string }

type pay struct{ URL string }

const payUniverse = "pay"

func payKernels() plane.Kernels {
	d := world.New[payments]("test.payments", 1)
	world.On(d, func(c *world.Ctx, s *payments, p pay) error {
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: p.URL})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *payments, r world.Receipt) error {
		s.Paid = append(s.Paid, string(r.Status))
		return nil
	})
	return plane.Kernels{payUniverse: d.Kernel()}
}

// service is the external system: it counts executions per idempotency
// key and, while gate is open, holds every request until it is closed.
type service struct {
	mu    sync.Mutex
	runs  map[string]int
	gate  chan struct{}
	inner chan string // the key of each request as it arrives
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get(adapter.IdempotencyKeyHeader)
	s.mu.Lock()
	s.runs[key]++
	gate := s.gate
	s.mu.Unlock()
	s.inner <- key
	if gate != nil {
		<-gate
	}
}

func (s *service) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[key]
}

func startNode(t *testing.T, ctx context.Context, st store.Store, worker string) *node.Node {
	t.Helper()
	n, err := node.Start(ctx, node.Config{Worker: worker, Store: st, Kernels: payKernels(), LeaseTTL: 2 * time.Second, ClaimTTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return n
}

func paidOf(t *testing.T, ctx context.Context, n *node.Node, id string) []string {
	t.Helper()
	snap, err := n.Client().State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ State payments }
	if err := world.Decode(snap.State, &s); err != nil {
		t.Fatal(err)
	}
	return s.State.Paid
}

// until polls cond until it holds or ctx ends (real I/O: SQLite, HTTP).
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("never: %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func intentOf(t *testing.T, ctx context.Context, st store.Store, worldID string) string {
	t.Helper()
	items, err := st.ListEffects(ctx, worldID, 0, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("effects of %s: %+v, %v", worldID, items, err)
	}
	return items[0].IntentHash
}

// A real node serves a SQLite store; two payments are executing against
// the external service (which counts executions per idempotency key) when
// the backup is taken; they then finish and their receipts are consumed on
// the live store. The backup, restored and served by a node with the
// http.request adapter, runs neither again (a later payment of another
// world runs, so the adapter was at work): both show held. Releasing one
// executes it once more with the same idempotency key and its receipt
// reaches its world; resolving the other delivers the operator's receipt
// and its world continues, with no second execution.
func TestARestoredOldBackupRunsNoEffectAgainUntilReleased(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc := &service{runs: map[string]int{}, gate: make(chan struct{}), inner: make(chan string, 16)}
	srv := httptest.NewServer(svc)
	defer srv.Close()
	dir := t.TempDir()
	livePath := filepath.Join(dir, "orrery.db")
	live := openSQLite(t, ctx, livePath)
	for _, id := range []string{"p", "q", "r"} {
		if _, err := live.CreateWorld(ctx, payUniverse, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	a := startNode(t, ctx, live, "a")
	for _, id := range []string{"p", "q"} {
		if _, err := a.Client().Send(ctx, id, pay{URL: srv.URL}, "pay-"+id); err != nil {
			t.Fatal(err)
		}
	}
	<-svc.inner
	<-svc.inner
	hp, hq := intentOf(t, ctx, live, "p"), intentOf(t, ctx, live, "q")
	bak := filepath.Join(dir, "backup.db")
	info, err := backup.Backup(ctx, livePath, bak, backup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Effects["inflight"] != 2 {
		t.Fatalf("the backup's effects %v, want 2 inflight", info.Effects)
	}
	svc.mu.Lock()
	close(svc.gate)
	svc.gate = nil
	svc.mu.Unlock()
	until(t, ctx, "both receipts consumed on the live store", func() bool {
		return len(paidOf(t, ctx, a, "p")) == 1 && len(paidOf(t, ctx, a, "q")) == 1
	})
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	target := openSQLite(t, ctx, filepath.Join(dir, "restored.db"))
	rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{Kernels: payKernels(), TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !rr.Report.OK || rr.Held != 2 || rr.Report.Replayed != 3 {
		t.Fatalf("restore: held %d, replayed %d, %v", rr.Held, rr.Report.Replayed, rr.Report.Err())
	}
	b := startNode(t, ctx, target, "b")
	if _, err := b.Client().Send(ctx, "r", pay{URL: srv.URL}, "pay-r"); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the probe payment's receipt", func() bool { return len(paidOf(t, ctx, b, "r")) == 1 })
	for _, h := range []string{hp, hq} {
		if n := svc.count(h); n != 1 {
			t.Fatalf("effect %s executed %d times after the restore, want 1 (before the backup's loss only)", h, n)
		}
		if st, err := target.EffectStatus(ctx, h); err != nil || st.State != vocab.EffectHeld {
			t.Fatalf("EffectStatus(%s) = %+v, %v; want held", h, st, err)
		}
	}
	if _, err := target.ReleaseHeld(ctx, hp, "the provider has no such charge"); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the released payment's receipt", func() bool { return len(paidOf(t, ctx, b, "p")) == 1 })
	if n := svc.count(hp); n != 2 {
		t.Fatalf("the released effect executed %d times under its key, want 2 (once more)", n)
	}
	if _, _, err := target.Resolve(ctx, hq, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte(`{"id":"ch_1"}`)}, "charged once, per the provider"); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the resolved payment's receipt", func() bool { return len(paidOf(t, ctx, b, "q")) == 1 })
	if n := svc.count(hq); n != 1 {
		t.Fatalf("the resolved effect executed %d times, want 1", n)
	}
}

// A backup taken while a real node serves the SQLite file (clients paying
// from ten worlds without pause, the payments executing against the
// service) restores into SQLite and PostgreSQL verified: counts, heads,
// snapshots, and every world replayed to the same state hash; each
// payment open in the backup is held (the previous test serves a restored
// store and shows what holding means).
func TestABackupOfAServingNodeRestoresVerified(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc := &service{runs: map[string]int{}, inner: make(chan string, 1<<16)}
	srv := httptest.NewServer(svc)
	defer srv.Close()
	dir := t.TempDir()
	livePath := filepath.Join(dir, "orrery.db")
	live := openSQLite(t, ctx, livePath)
	ids := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"}
	for _, id := range ids {
		if _, err := live.CreateWorld(ctx, payUniverse, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	a := startNode(t, ctx, live, "a")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[(g*5+i)%len(ids)]
				if _, err := a.Client().Send(ctx, id, pay{URL: srv.URL}, fmt.Sprintf("%s-%d-%d", id, g, i)); err != nil {
					t.Errorf("Send %s: %v", id, err)
					return
				}
			}
		}()
	}
	// Under load: some payments have executed before the backup begins.
	for range 20 {
		<-svc.inner
	}
	bak := filepath.Join(dir, "backup.db")
	info, err := backup.Backup(ctx, livePath, bak, backup.Options{})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup under load: %d worlds, %d events, effects %v", info.Worlds, info.Events, info.Effects)
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			target := openTarget(t, ctx, backend)
			rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{Kernels: payKernels(), TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !rr.Report.OK || rr.Report.Replayed != len(ids) || int64(rr.Held) != info.Open() {
				t.Fatalf("restore: replayed %d of %d, held %d of %d open: %v %+v", rr.Report.Replayed, len(ids), rr.Held, info.Open(), rr.Report.Err(), rr.Report.Differences)
			}
		})
	}
}
