package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// free appends to a stream no world owns.
var free = store.AppendOptions{Kind: store.FreeStream}

func rec(key string) store.Record {
	return store.Record{
		EventID: "ev-" + key, IdempotencyKey: "key-" + key, EventType: "StepCompleted",
		StepID: "s1", LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: "p", PlanVersion: 1,
		Payload: []byte{0xa0},
	}
}

// holdCommitter occupies the committer with a request that waits until the
// returned release is called, so that the requests queued meanwhile form
// the next group. It returns once the committer is holding.
func holdCommitter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	holding, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.b.write(bg, "hold", "", func(*wtx) error {
			close(holding)
			<-gate
			return nil
		})
	}()
	<-holding
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(gate)
			if err := <-done; err != nil {
				t.Errorf("hold: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// waitQueued waits until n requests are queued behind a held committer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.b.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests queued", len(s.b.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Many concurrent appenders all succeed, every runSeq is handed out once
// per stream, and they share far fewer transactions (fsyncs) than appends.
func TestGroupCommitConcurrentAppendersShareTransactions(t *testing.T) {
	s, _, _ := openTemp(t)
	const writers, each = 32, 20
	before := s.Stats()
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	seqs := make([][]uint64, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprintf("run-%d", w%4)
			for i := 0; i < each; i++ {
				got, err := s.Append(bg, stream, []store.Record{rec(fmt.Sprintf("%d-%d", w, i))}, free)
				if err != nil {
					errs <- err
					return
				}
				seqs[w] = append(seqs[w], got[0].RunSeq)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for st := 0; st < 4; st++ {
		stream := fmt.Sprintf("run-%d", st)
		evs, err := s.Read(bg, stream, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := writers / 4 * each
		if len(evs) != want {
			t.Fatalf("%s has %d events, want %d", stream, len(evs), want)
		}
		for i, e := range evs {
			if e.RunSeq != uint64(i+1) {
				t.Fatalf("%s: event %d has runSeq %d", stream, i, e.RunSeq)
			}
		}
	}
	after := s.Stats()
	appends := uint64(writers * each)
	txs := after.Transactions - before.Transactions
	t.Logf("%d appends in %d transactions (largest group %d)", appends, txs, after.MaxGroup)
	if txs >= appends {
		t.Fatalf("%d appends took %d transactions: no group commit", appends, txs)
	}
	if after.MaxGroup < 2 {
		t.Fatalf("largest group %d", after.MaxGroup)
	}
}

// The requests queued while the committer is busy commit together, in one
// transaction.
func TestGroupCommitOneTransactionPerGroup(t *testing.T) {
	s, _, _ := openTemp(t)
	release := holdCommitter(t, s)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, free)
		}()
	}
	waitQueued(t, s, n)
	before := s.Stats()
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	after := s.Stats()
	// The hold's own transaction, then one for the whole group.
	if got := after.Transactions - before.Transactions; got != 2 {
		t.Fatalf("%d transactions after release, want 2 (the hold's, then one group)", got)
	}
	if after.MaxGroup < n {
		t.Fatalf("largest group %d, want %d", after.MaxGroup, n)
	}
}

// A request that fails inside a group (head mismatch, fence, invalid
// cursor) rolls back only its own savepoint: its neighbours commit.
func TestGroupCommitFailingRequestDoesNotFailNeighbours(t *testing.T) {
	s, _, _ := openTemp(t)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		t.Fatal(err)
	}
	lease, err := s.Acquire(bg, "w1", "worker-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(bg, "run-cas", []store.Record{rec("cas-0")}, free); err != nil {
		t.Fatal(err)
	}
	release := holdCommitter(t, s)
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 8)
	var wg sync.WaitGroup
	submit := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- result{name, f()}
		}()
	}
	submit("ok-1", func() error {
		_, err := s.Append(bg, "run-ok", []store.Record{rec("a")}, free)
		return err
	})
	submit("head-mismatch", func() error {
		// Two events: the first insert happens before the CAS fails, so the
		// savepoint must undo it.
		_, err := s.Append(bg, "run-cas", []store.Record{rec("cas-1"), rec("cas-2")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(7)})
		return err
	})
	submit("fenced", func() error {
		_, err := s.Append(bg, "w1", []store.Record{rec("f")}, store.AppendOptions{Fence: &store.Fence{World: "w1", Epoch: lease.Epoch + 1}})
		return err
	})
	submit("ok-fenced-right", func() error {
		_, err := s.Append(bg, "w1", []store.Record{rec("g")}, store.AppendOptions{Fence: &store.Fence{World: "w1", Epoch: lease.Epoch}})
		return err
	})
	submit("cursor-mismatch", func() error {
		_, err := s.DrainToJournal(bg, "w1", lease.Epoch, 3, 0, 3, nil)
		return err
	})
	submit("ok-2", func() error {
		_, err := s.Append(bg, "run-ok", []store.Record{rec("b")}, free)
		return err
	})
	waitQueued(t, s, 6)
	before := s.Stats()
	release()
	wg.Wait()
	close(results)
	want := map[string]error{
		"ok-1": nil, "ok-2": nil, "ok-fenced-right": nil,
		"head-mismatch": store.ErrHeadMismatch, "fenced": store.ErrFenced, "cursor-mismatch": store.ErrCursorMismatch,
	}
	for r := range results {
		if w := want[r.name]; (w == nil) != (r.err == nil) || (w != nil && !errors.Is(r.err, w)) {
			t.Errorf("%s: %v, want %v", r.name, r.err, w)
		}
		var se *store.Error
		if r.err != nil && !errors.As(r.err, &se) {
			t.Errorf("%s: %T is not a *store.Error", r.name, r.err)
		}
	}
	if got := s.Stats().Transactions - before.Transactions; got != 2 {
		t.Fatalf("%d transactions, want 2 (the hold's, then one group)", got)
	}
	if evs, _ := s.Read(bg, "run-ok", 0, 0); len(evs) != 2 {
		t.Fatalf("run-ok has %d events, want 2", len(evs))
	}
	if evs, _ := s.Read(bg, "run-cas", 0, 0); len(evs) != 1 {
		t.Fatalf("the failed CAS left %d events in run-cas, want 1", len(evs))
	}
	if h, _ := s.Head(bg, "run-cas"); h != 1 {
		t.Fatalf("run-cas head %d, want 1", h)
	}
	if evs, _ := s.Read(bg, "w1", 0, 0); len(evs) != 1 || evs[0].EventID != "ev-g" {
		t.Fatalf("w1 journal %+v, want only ev-g", evs)
	}
}

// A failure of the database inside a request (here simulated by an
// untyped error, and by a panic) poisons the transaction: the committer
// rolls it back, answers that request with the error, and commits the rest
// of the group in a fresh transaction.
func TestGroupCommitDatabaseFailureIsIsolated(t *testing.T) {
	s, _, _ := openTemp(t)
	boom := errors.New("boom")
	release := holdCommitter(t, s)
	var wg sync.WaitGroup
	var errBoom, errPanic error
	okErrs := make([]error, 10)
	for i := range okErrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, okErrs[i] = s.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, free)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		errBoom = s.b.write(bg, "boom", "", func(t *wtx) error {
			// A write that must not survive the rollback.
			if _, err := t.exec(`INSERT INTO watermarks (projector, stream, value) VALUES ('boom', 's', 1)`); err != nil {
				return err
			}
			return boom
		})
	}()
	go func() {
		defer wg.Done()
		errPanic = s.b.write(bg, "panic", "", func(t *wtx) error {
			panic("bug")
		})
	}()
	waitQueued(t, s, 12)
	release()
	wg.Wait()
	for i, err := range okErrs {
		if err != nil {
			t.Fatalf("neighbour %d: %v", i, err)
		}
	}
	if !errors.Is(errBoom, boom) {
		t.Fatalf("boom request: %v", errBoom)
	}
	var se *store.Error
	if !errors.As(errBoom, &se) || se.Op != "boom" {
		t.Fatalf("boom request: %#v is not a *store.Error of op boom", errBoom)
	}
	if errPanic == nil || !errors.As(errPanic, &se) {
		t.Fatalf("panic request: %v", errPanic)
	}
	if evs, _ := s.Read(bg, "run-1", 0, 0); len(evs) != 10 {
		t.Fatalf("%d events, want 10", len(evs))
	}
	if v, _ := s.GetWatermark(bg, "boom", "s"); v != 0 {
		t.Fatalf("the failed request's write survived: watermark %d", v)
	}
}

// A caller whose context ends while its request is still queued gets the
// context's error, and the request never runs.
func TestCancelledQueuedRequestNeverRuns(t *testing.T) {
	s, _, _ := openTemp(t)
	release := holdCommitter(t, s)
	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, "run-1", []store.Record{rec("a")}, free)
		errc <- err
	}()
	waitQueued(t, s, 1)
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled append: %v", err)
	}
	var se *store.Error
	if !errors.As(err, &se) {
		t.Fatalf("%T is not a *store.Error", err)
	}
	release()
	if _, err := s.Append(bg, "run-2", []store.Record{rec("b")}, free); err != nil {
		t.Fatal(err)
	}
	if evs, _ := s.Read(bg, "run-1", 0, 0); len(evs) != 0 {
		t.Fatalf("the abandoned append ran: %d events", len(evs))
	}
}

// Close answers every queued request with ErrClosed, refuses later calls,
// and is idempotent; goleak (TestMain) checks the committer is gone.
func TestCloseRefusesQueuedAndLaterRequests(t *testing.T) {
	clock := newManualClock()
	s, err := Open(bg, t.TempDir()+"/o.db", WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	holding, gate := make(chan struct{}), make(chan struct{})
	holdErr := make(chan error, 1)
	go func() {
		holdErr <- s.b.write(bg, "hold", "", func(*wtx) error {
			close(holding)
			<-gate
			return nil
		})
	}()
	<-holding
	queued := make(chan error, 1)
	go func() {
		_, err := s.Append(bg, "run-1", []store.Record{rec("a")}, free)
		queued <- err
	}()
	waitQueued(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.b.closed.Load() {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	if err := <-holdErr; err != nil {
		t.Fatalf("the request in progress at Close: %v", err)
	}
	if err := <-queued; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("queued at Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Append(bg, "run-1", []store.Record{rec("b")}, free); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	if _, err := s.Read(bg, "run-1", 0, 0); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if _, err := s.Now(bg); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Now after Close: %v", err)
	}
}

// WithMaxBatch(1) turns grouping off: one transaction per request.
func TestMaxBatchOneCommitsEachRequestAlone(t *testing.T) {
	s, _, _ := openTemp(t, WithMaxBatch(1))
	release := holdCommitter(t, s)
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, free); err != nil {
				t.Error(err)
			}
		}()
	}
	waitQueued(t, s, 5)
	before := s.Stats()
	release()
	wg.Wait()
	if got := s.Stats().Transactions - before.Transactions; got != 6 {
		t.Fatalf("%d transactions, want 6", got)
	}
}
