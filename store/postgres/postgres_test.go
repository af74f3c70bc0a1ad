package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// rawConn is a plain connection to the store's schema, as an operator (or
// a buggy program) would have.
func rawConn(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(bg) })
	return conn
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// The journal is immutable in the database itself: a direct UPDATE, DELETE
// or TRUNCATE of events is refused by the trigger, whoever sends it; only
// compaction deletes, and the keys it deletes stay duplicates.
func TestJournalImmutabilityTrigger(t *testing.T) {
	t.Parallel()
	c := &clock{}
	s := openStore(t, "", c)
	e := leased(t, s, "w", "A").Epoch
	got, err := s.Append(bg, "w", []store.Record{rec("a"), rec("b"), rec("c")}, store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: e}})
	if err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t, s.Schema())
	for _, sql := range []string{
		`UPDATE events SET event_type = 'Tampered'`,
		`UPDATE events SET payload = '\x00'::bytea WHERE run_seq = 1`,
		`DELETE FROM events`,
		`DELETE FROM events WHERE run_seq = 2`,
		`TRUNCATE events`,
	} {
		_, err := conn.Exec(bg, sql)
		if sqlState(err) != Immutable {
			t.Fatalf("%s: %v, want SQLSTATE %s", sql, err, Immutable)
		}
	}
	// A session that sets the compaction gate off explicitly is refused too.
	if _, err := conn.Exec(bg, `SET orrery.compaction = 'off'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg, `DELETE FROM events`); sqlState(err) != Immutable {
		t.Fatalf("DELETE with the gate off: %v", err)
	}
	evs, err := s.Read(bg, "w", 0, 0)
	if err != nil || len(evs) != 3 || evs[0].EventType != "StepCompleted" {
		t.Fatalf("after refused writes: %d events, %v", len(evs), err)
	}

	// Compaction is the one path that deletes.
	if err := s.PutSnapshot(bg, "w", e, store.Snapshot{Height: got[1].RunSeq, State: []byte("s"), StateHash: "h"}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Compact(bg, "w", e, 0)
	if err != nil || n != 2 {
		t.Fatalf("Compact = %d, %v; want 2", n, err)
	}
	// The gate closes with its transaction.
	if _, err := conn.Exec(bg, `DELETE FROM events`); sqlState(err) != Immutable {
		t.Fatalf("DELETE after compaction: %v", err)
	}
	// A compacted key is still a duplicate, answered with its metadata.
	again, err := s.Append(bg, "w", []store.Record{rec("a")}, store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: e}})
	if err != nil || !again[0].Idempotent || again[0].RunSeq != got[0].RunSeq || !again[0].PersistedAt.Equal(got[0].PersistedAt) {
		t.Fatalf("append of a compacted key = %+v, %v; want %+v idempotent", again, err, got[0])
	}
	if head, _ := s.Head(bg, "w"); head != got[2].RunSeq {
		t.Fatalf("head = %d after compaction, want %d", head, got[2].RunSeq)
	}
}

// Many processes may open one schema at once: the migrations run once,
// under the advisory lock, and reopening is a no-op.
func TestMigrationsIdempotentAcrossConcurrentOpen(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := freshSchema(t, dsn)
	const openers = 6
	stores := make([]*Store, openers)
	errs := make([]error, openers)
	var wg sync.WaitGroup
	for i := range openers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(bg, dsn, WithSchema(schema), WithMaxConns(2))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opener %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t, schema)
	count := func() (n, max int) {
		if err := conn.QueryRow(bg, `SELECT count(*), coalesce(max(version), 0) FROM schema_migrations`).Scan(&n, &max); err != nil {
			t.Fatal(err)
		}
		return n, max
	}
	if n, max := count(); n != len(ms) || max != len(ms) {
		t.Fatalf("schema_migrations: %d rows up to %d, want %d", n, max, len(ms))
	}
	// Every opener works on the one schema.
	if _, err := stores[0].CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[openers-1].GetWorld(bg, "w"); err != nil {
		t.Fatal(err)
	}
	again, err := Open(bg, dsn, WithSchema(schema), WithMaxConns(1))
	if err != nil {
		t.Fatal(err)
	}
	_ = again.Close()
	if n, _ := count(); n != len(ms) {
		t.Fatalf("reopen applied migrations again: %d rows", n)
	}
	// A schema newer than this binary is refused, not clobbered.
	if _, err := conn.Exec(bg, `INSERT INTO schema_migrations (version, name) VALUES (9999, 'future')`); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(bg, dsn, WithSchema(schema), WithMaxConns(1)); !errors.Is(err, store.ErrInvalid) {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("Open of a newer schema: %v, want ErrInvalid", err)
	}
}

func TestOpenRejectsBadSchemaName(t *testing.T) {
	dsn := testDSN(t)
	for _, name := range []string{"", "Orrery", "a-b", "x; DROP TABLE y", "1abc"} {
		if s, err := Open(bg, dsn, WithSchema(name)); !errors.Is(err, store.ErrInvalid) {
			if s != nil {
				_ = s.Close()
			}
			t.Fatalf("schema %q: %v, want ErrInvalid", name, err)
		}
	}
}

// twoMachines opens two Stores on one schema with one clock: two worker
// processes on two machines sharing a database.
func twoMachines(t *testing.T) (a, b *Store, c *clock) {
	c = &clock{}
	a = openStore(t, "", c, WithMaxConns(8))
	b = openStore(t, a.Schema(), c, WithMaxConns(8))
	return a, b, c
}

// Concurrent acquirers of one world, on two machines: exactly one wins,
// the others get ErrLeaseHeld, and the epoch is 1.
func TestTwoStoresConcurrentAcquireExactlyOneWins(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	const worlds, perStore = 5, 6
	for w := range worlds {
		if _, err := a.CreateWorld(bg, "u", fmt.Sprint("w", w), nil); err != nil {
			t.Fatal(err)
		}
	}
	for w := range worlds {
		world := fmt.Sprint("w", w)
		var wins atomic.Int32
		var won atomic.Value
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 * perStore {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				worker := fmt.Sprint("worker-", i)
				l, err := s.Acquire(bg, world, worker, time.Minute)
				switch {
				case err == nil:
					wins.Add(1)
					won.Store(l)
				case !errors.Is(err, store.ErrLeaseHeld):
					t.Errorf("%s by %s: %v", world, worker, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%s: %d winners", world, wins.Load())
		}
		l := won.Load().(store.Lease)
		got, ok, err := b.GetLease(bg, world)
		if err != nil || !ok || got.Epoch != 1 || got.Holder != l.Holder {
			t.Fatalf("%s: lease %+v %v %v, winner %+v", world, got, ok, err, l)
		}
	}
}

// Claimers on two machines never claim one effect twice, and every effect
// completes exactly once.
func TestTwoStoresConcurrentClaimersNeverClaimTwice(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	e := leased(t, a, "w", "host").Epoch
	const total = 600
	var intents []vocab.Intent
	for i := range total {
		intents = append(intents, vocab.Intent{IntentHash: fmt.Sprintf("i-%04d", i), Kind: "http.request", Params: []byte{byte(i)}})
	}
	if n, err := a.Publish(bg, "w", e, intents); err != nil || n != total {
		t.Fatalf("Publish = %d, %v", n, err)
	}
	var mu sync.Mutex
	claimed := map[string]string{}
	var wg sync.WaitGroup
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprint("adapter-", i)
			for {
				items, err := s.Claim(bg, worker, []string{"http.request"}, 16, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(items) == 0 {
					return
				}
				for _, it := range items {
					mu.Lock()
					if prev, dup := claimed[it.IntentHash]; dup {
						t.Errorf("%s claimed by %s and %s", it.IntentHash, prev, worker)
					}
					claimed[it.IntentHash] = worker
					mu.Unlock()
					if it.Attempt != 1 || it.ClaimedBy != worker {
						t.Errorf("claim %+v", it)
					}
					if _, dup, err := s.Complete(bg, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: it.Params}); err != nil || dup {
						t.Errorf("Complete %s: dup=%v %v", it.IntentHash, dup, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(claimed) != total {
		t.Fatalf("%d of %d effects claimed", len(claimed), total)
	}
	items, err := a.ReadInbox(bg, "w", 0, 0)
	if err != nil || len(items) != total {
		t.Fatalf("inbox has %d receipts, %v; want %d", len(items), err, total)
	}
	for i, it := range items {
		if it.Seq != uint64(i+1) || it.Kind != "receipt" {
			t.Fatalf("inbox[%d] = %+v: seqs must be dense here and in order", i, it)
		}
	}
}

// A stale holder on machine A keeps appending while machine B takes the
// world over: from the moment B's acquisition commits, none of A's writes
// lands, and everything A did land precedes B's first write.
func TestTwoStoresStaleEpochWriterRacingTakeoverIsRejected(t *testing.T) {
	t.Parallel()
	a, b, c := twoMachines(t)
	eA := leased(t, a, "w", "A").Epoch
	stop := make(chan struct{})
	type result struct {
		seq uint64
		err error
	}
	// A slice, not a buffered channel: a writer never blocks on a full
	// buffer however many appends a slow main goroutine lets it make.
	var mu sync.Mutex
	var results []result
	// first is closed once A's first append has returned: the takeover
	// races appends that are under way, however slowly the machine starts
	// the writers.
	first := make(chan struct{})
	var firstOnce sync.Once
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				got, err := a.Append(bg, "w", []store.Record{rec(fmt.Sprintf("a-%d-%d", g, i))}, store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: eA}})
				var seq uint64
				if err == nil {
					seq = got[0].RunSeq
				}
				mu.Lock()
				results = append(results, result{seq, err})
				mu.Unlock()
				firstOnce.Do(func() { close(first) })
				if err != nil && !errors.Is(err, store.ErrFenced) {
					t.Errorf("stale writer: %v", err)
					return
				}
			}
		}()
	}
	<-first
	// A's lease expires (by the store clock) and B takes over, while A's
	// appends are in flight.
	if _, err := b.Acquire(bg, "w", "B", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("takeover before expiry: %v", err)
	}
	c.advance(2 * time.Minute)
	lB, err := b.Acquire(bg, "w", "B", time.Hour)
	if err != nil || lB.Epoch != eA+1 {
		t.Fatalf("takeover: %+v, %v", lB, err)
	}
	afterTakeover := make(chan result, 1000)
	go func() {
		// Everything A tries now must be fenced.
		for range 20 {
			_, err := a.Append(bg, "w", []store.Record{rec(fmt.Sprintf("late-%d", time.Now().UnixNano()))}, store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: eA}})
			afterTakeover <- result{0, err}
		}
		close(afterTakeover)
	}()
	for r := range afterTakeover {
		if !errors.Is(r.err, store.ErrFenced) {
			t.Fatalf("stale append after takeover: %v, want ErrFenced", r.err)
		}
	}
	bGot, err := b.Append(bg, "w", []store.Record{rec("b-first")}, store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: lB.Epoch}})
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	var landed []uint64
	for _, r := range results {
		if r.err == nil {
			landed = append(landed, r.seq)
		}
	}
	for _, seq := range landed {
		if seq >= bGot[0].RunSeq {
			t.Fatalf("a stale write landed at runSeq %d, after B's %d", seq, bGot[0].RunSeq)
		}
	}
	evs, _ := a.Read(bg, "w", 0, 0)
	if len(evs) != len(landed)+1 {
		t.Fatalf("journal has %d events, %d stale writes landed + 1 of B", len(evs), len(landed))
	}
	// The other world mutations of A are fenced too.
	if _, err := a.Publish(bg, "w", eA, []vocab.Intent{{IntentHash: "x", Kind: "k"}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale Publish: %v", err)
	}
	if err := a.Schedule(bg, "w", eA, "t", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), nil); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale Schedule: %v", err)
	}
}

// Group commit: concurrent appenders share transactions, every runSeq is
// handed out once per stream and in order, and nobody's append is lost.
func TestGroupCommitBatchesAppends(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil, WithMaxConns(4))
	const writers, each, streams = 32, 15, 4
	before := s.Stats()
	var wg sync.WaitGroup
	var mu sync.Mutex
	seqs := map[string][]uint64{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprint("run-", w%streams)
			for i := range each {
				got, err := s.Append(bg, stream, []store.Record{rec(fmt.Sprintf("%d-%d", w, i))}, store.AppendOptions{Kind: store.FreeStream})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seqs[stream] = append(seqs[stream], got[0].RunSeq)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	reqs, txs := st.AppendRequests-before.AppendRequests, st.AppendTransactions-before.AppendTransactions
	t.Logf("%d appends in %d transactions", reqs, txs)
	if reqs != writers*each {
		t.Fatalf("%d append requests, want %d", reqs, writers*each)
	}
	if txs >= reqs {
		t.Fatalf("no grouping: %d transactions for %d appends", txs, reqs)
	}
	for stream, got := range seqs {
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		for i, seq := range got {
			if seq != uint64(i+1) {
				t.Fatalf("%s: runSeqs %v are not 1..%d", stream, got, len(got))
			}
		}
		evs, err := s.Read(bg, stream, 0, 0)
		if err != nil || len(evs) != len(got) {
			t.Fatalf("%s: read %d, %v", stream, len(evs), err)
		}
	}
}

// A request that fails inside the database (here: a stream id PostgreSQL
// text cannot hold, slipped past validation) does not fail the requests
// that shared its group commit: the batch reruns each on its own.
func TestGroupCommitIsolatesAFailingRequest(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	mk := func(stream, key string) *appendReq {
		r := newAppendReq(bg, "append", stream, []store.Record{rec(key)})
		r.opts.Kind = store.FreeStream
		return r
	}
	batch := []*appendReq{mk("ok-1", "a"), mk("bad\x00stream", "b"), mk("ok-2", "c"), mk("ok-1", "d")}
	s.b.runAppends(batch)
	for i, r := range batch {
		<-r.done
		if i == 1 {
			if !errors.Is(r.res.err, store.ErrInvalid) {
				t.Fatalf("bad request: %v, want ErrInvalid", r.res.err)
			}
			continue
		}
		if r.res.err != nil || len(r.res.out) != 1 || r.res.out[0].Idempotent {
			t.Fatalf("request %d: %+v, %v", i, r.res.out, r.res.err)
		}
	}
	if h, _ := s.Head(bg, "ok-1"); h != 2 {
		t.Fatalf("ok-1 head = %d, want 2", h)
	}
}

// Deliveries (Enqueue, Complete, Fire, Send) group-commit too, and a typed
// failure of one (an unknown intent, an archived world) leaves its
// neighbours' writes intact.
func TestGroupCommitDeliveriesIsolateTypedFailures(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	e := leased(t, s, "w", "host").Epoch
	leased(t, s, "gone", "host")
	if _, err := s.SetWorldStatus(bg, "gone", store.WorldArchived, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i1", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(bg, "adapter", []string{"k"}, 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %+v, %v", claimed, err)
	}
	mk := func(kind deliveryKind, world, hash string) *deliveryReq {
		return &deliveryReq{ctx: bg, op: "test", kind: kind, world: world, hash: hash, itemKind: "event", status: "ok", msg: "m",
			by: contract.Claimant(claimed[0].ClaimOf()), done: make(chan struct{})}
	}
	batch := []*deliveryReq{
		mk(dEnqueue, "w", ""),
		mk(dComplete, "", "unknown"),
		mk(dComplete, "", "i1"),
		mk(dEnqueue, "gone", ""),
		mk(dSend, "w", ""),
		mk(dFire, "", "no-timer"),
	}
	before := s.Stats().DeliveryTransactions
	s.b.runDeliveries(batch)
	if got := s.Stats().DeliveryTransactions - before; got != 1 {
		t.Fatalf("%d transactions for one batch", got)
	}
	want := []error{nil, store.ErrNotFound, nil, store.ErrWorldArchived, nil, store.ErrNotFound}
	for i, r := range batch {
		<-r.done
		if (want[i] == nil) != (r.res.err == nil) || (want[i] != nil && !errors.Is(r.res.err, want[i])) {
			t.Fatalf("request %d: %v, want %v", i, r.res.err, want[i])
		}
	}
	items, err := s.ReadInbox(bg, "w", 0, 0)
	if err != nil || len(items) != 3 || items[0].Kind != "event" || items[1].Kind != "receipt" || items[2].Kind != "fabric" {
		t.Fatalf("inbox = %+v, %v", items, err)
	}
}

// A hint written by one machine reaches a watcher on another (NOTIFY).
func TestWatchAcrossStores(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	if _, err := a.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	inbox, effects := store.NewSignal(), store.NewSignal()
	stop, err := a.Watch(ctx, inbox, store.TopicInbox("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	stopE, err := a.Watch(ctx, effects, store.TopicEffects)
	if err != nil {
		t.Fatal(err)
	}
	defer stopE()
	if _, _, err := b.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inbox.C:
	case <-time.After(hintBound):
		t.Fatal("no hint from the other store")
	}
	e, err := b.Acquire(bg, "w", "B", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(bg, "w", e.Epoch, []vocab.Intent{{IntentHash: "i", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-effects.C:
	case <-time.After(hintBound):
		t.Fatal("no effects hint from the other store")
	}
}

// Every topic is notified inside the transaction of its change, so a
// watcher on another machine hears each kind of change: a Commit (effects,
// timers), a lease release and acquisition (leases), an assignment and a
// status change (assignments), a heartbeat (workers).
func TestWatchTopicsAcrossStores(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	l := leased(t, b, "w", "B")
	if _, _, err := b.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	// Each step is hinted on a's watcher of its topic; a step runs only on
	// b, so the hint can only come through NOTIFY.
	steps := []struct {
		topic string
		do    func() error
	}{
		{store.TopicEffects, func() error {
			_, err := b.Commit(bg, "w", l.Epoch, store.CommitBatch{NewCursor: 1,
				Intents: []vocab.Intent{{IntentHash: "i1", Kind: "k"}}})
			return err
		}},
		{store.TopicTimers, func() error {
			_, err := b.Commit(bg, "w", l.Epoch, store.CommitBatch{ExpectedCursor: 1, NewCursor: 1,
				Timers: []vocab.TimerSet{{IntentHash: "t1", DeliverAt: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}}})
			return err
		}},
		{store.TopicLeases, func() error { return b.Release(bg, "w", "B", l.Epoch) }},
		{store.TopicLeases, func() error {
			var err error
			l, err = b.Acquire(bg, "w", "B", time.Minute)
			return err
		}},
		{store.TopicAssignments, func() error { return b.Assign(bg, "w", store.Assignment{DesiredWorker: "B"}, nil) }},
		{store.TopicAssignments, func() error {
			_, err := b.SetWorldStatus(bg, "w", store.WorldPaused, "maintenance")
			return err
		}},
		{store.TopicWorkers, func() error {
			_, err := b.Heartbeat(bg, "B", 10)
			return err
		}},
	}
	for i, st := range steps {
		sig := store.NewSignal()
		stop, err := a.Watch(bg, sig, st.topic)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.do(); err != nil {
			t.Fatalf("step %d (%s): %v", i, st.topic, err)
		}
		select {
		case <-sig.C:
		case <-time.After(hintBound):
			t.Fatalf("step %d: no %s hint from the other store", i, st.topic)
		}
		stop()
	}
}

// Close ends watches (their wakers are never woken again, and stopping
// one after Close is harmless), fails later calls with ErrClosed, and is
// idempotent.
func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	sig := store.NewSignal()
	stop, err := s.Watch(bg, sig, store.TopicWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	stop()
	s.b.hint(store.TopicWorkers)
	select {
	case <-sig.C:
		t.Fatal("a hint after Close")
	default:
	}
	if _, err := s.Append(bg, "s", []store.Record{rec("a")}, store.AppendOptions{Kind: store.FreeStream}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "k"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	if _, err := s.Now(bg); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Now after Close: %v", err)
	}
	if _, err := s.Watch(bg, sig, store.TopicTimers); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
}

// The store clock is the server's plus the offset: Now moves with the
// offset, and persistedAt comes from it, not from the caller.
func TestStoreClockIsServerClockPlusOffset(t *testing.T) {
	t.Parallel()
	c := &clock{}
	s := openStore(t, "", c)
	n0, err := s.Now(bg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(n0); d > time.Minute || d < -time.Minute {
		t.Fatalf("server clock %v is far from this machine's", n0)
	}
	c.advance(24 * time.Hour)
	n1, _ := s.Now(bg)
	if d := n1.Sub(n0); d < 24*time.Hour || d > 24*time.Hour+time.Minute {
		t.Fatalf("Now moved by %v after a 24h advance", d)
	}
	r := rec("a")
	r.EmittedAt = time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	got, err := s.Append(bg, "s", []store.Record{r}, store.AppendOptions{Kind: store.FreeStream})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].PersistedAt.Before(n1) {
		t.Fatalf("persistedAt %v before the store clock %v", got[0].PersistedAt, n1)
	}
	evs, _ := s.Read(bg, "s", 0, 1)
	if !evs[0].EmittedAt.Equal(r.EmittedAt) || !evs[0].PersistedAt.Equal(got[0].PersistedAt) {
		t.Fatalf("read back %v / %v", evs[0].EmittedAt, evs[0].PersistedAt)
	}
}

// Journal appends, epoch bumps, renewals and releases commit durably;
// claims and reaps relax synchronous_commit for their own transaction only
// (SET LOCAL): on a store with one connection, the writes after a claim and
// a reap on that same connection are durable again.
func TestSynchronousCommitOnlyRelaxedForClaims(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil, WithMaxConns(1))
	var setting string
	if err := s.b.pool.QueryRow(bg, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting == "off" {
		t.Skip("the server runs with synchronous_commit = off")
	}
	for name, call := range map[string]func() error{
		"Claim":       func() error { _, err := s.Claim(bg, "w", []string{"k"}, 1, time.Second); return err },
		"ClaimDue":    func() error { _, err := s.ClaimDue(bg, "w", 1, time.Second); return err },
		"ReapEffects": func() error { _, err := s.ReapEffects(bg); return err },
		"ReapTimers":  func() error { _, err := s.ReapTimers(bg); return err },
	} {
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.b.pool.QueryRow(bg, `SHOW synchronous_commit`).Scan(&setting); err != nil || setting == "off" {
			t.Fatalf("after %s, on its connection: synchronous_commit = %s, %v", name, setting, err)
		}
	}
	conn := rawConn(t, s.Schema())
	// The lease functions (epoch bumps, renewals, releases) never relax it.
	if _, err := s.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`SELECT * FROM acquire_leases('A', '', ARRAY['w'], 60000000000, 0)`,
		`SELECT * FROM renew_leases('A', ARRAY['w'], ARRAY[1::bigint], 60000000000, 0)`,
		`SELECT * FROM release_leases('A', ARRAY['w'], ARRAY[1::bigint], 0)`,
	} {
		tx, err := conn.Begin(bg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(bg, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if err := tx.QueryRow(bg, `SHOW synchronous_commit`).Scan(&setting); err != nil || setting == "off" {
			t.Fatalf("inside %s: synchronous_commit = %s, %v", sql, setting, err)
		}
		if err := tx.Commit(bg); err != nil {
			t.Fatal(err)
		}
	}
}

// The one-round-trip append path commits only what the checked path would
// decide: when its guess of a head is stale (another machine appended), a
// key is stored already, or a fence is stale, it rolls back and the
// checked path answers.
func TestSpeculativeAppendFallsBackOnEveryWrongGuess(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	app := func(s *Store, stream string, opts store.AppendOptions, keys ...string) ([]store.Appended, error) {
		var evs []store.Record
		for _, k := range keys {
			evs = append(evs, rec(k))
		}
		return s.Append(bg, stream, evs, opts)
	}
	misses := func() uint64 { return a.Stats().SpeculationMisses }

	// First append: checked path (nothing cached); second: speculative.
	if _, err := app(a, "s", store.AppendOptions{Kind: store.FreeStream}, "k1"); err != nil {
		t.Fatal(err)
	}
	m0, tx0 := misses(), a.Stats().AppendTransactions
	got, err := app(a, "s", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(1)}, "k2")
	if err != nil || got[0].RunSeq != 2 || misses() != m0 || a.Stats().AppendTransactions != tx0+1 {
		t.Fatalf("speculative append: %+v %v (misses %d→%d)", got, err, m0, misses())
	}

	// Another machine moves the head: the guess is stale.
	if _, err := app(b, "s", store.AppendOptions{Kind: store.FreeStream}, "k3"); err != nil {
		t.Fatal(err)
	}
	got, err = app(a, "s", store.AppendOptions{Kind: store.FreeStream}, "k4")
	if err != nil || got[0].RunSeq != 4 || misses() != m0+1 {
		t.Fatalf("after a foreign append: %+v %v (misses %d)", got, err, misses())
	}

	// A stored key with a stale ExpectedHead: idempotent, not a mismatch.
	if _, err := app(a, "t", store.AppendOptions{Kind: store.FreeStream}, "x1"); err != nil {
		t.Fatal(err)
	}
	if _, err := app(a, "t", store.AppendOptions{Kind: store.FreeStream}, "x2"); err != nil {
		t.Fatal(err)
	}
	m1 := misses()
	got, err = app(a, "t", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)}, "x1")
	if err != nil || !got[0].Idempotent || got[0].RunSeq != 1 {
		t.Fatalf("stored key, stale head: %+v %v", got, err)
	}
	if misses() != m1+1 {
		t.Fatalf("the stored key did not roll the speculation back (misses %d→%d)", m1, misses())
	}
	// A stale ExpectedHead with a new key is a mismatch on either path.
	if _, err := app(a, "t", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(1)}, "x3"); !errors.Is(err, store.ErrHeadMismatch) {
		t.Fatalf("stale head: %v", err)
	}

	// A fence that went stale (released) between two appends.
	l := leased(t, a, "w", "A")
	f := store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: l.Epoch}}
	if _, err := app(a, "w", f, "f1"); err != nil {
		t.Fatal(err)
	}
	if _, err := app(a, "w", f, "f2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(bg, "w", "A", l.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := app(a, "w", f, "f3"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append under a released lease: %v", err)
	}
	if evs, _ := a.Read(bg, "w", 0, 0); len(evs) != 2 {
		t.Fatalf("%d events after a fenced append", len(evs))
	}
	// A drain's cursor survives speculative appends to the same stream
	// (which guess no cursor and write none).
	l2, err := a.Acquire(bg, "w", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	head, _ := a.Head(bg, "w")
	if _, err := a.DrainToJournal(bg, "w", l2.Epoch, 0, head, 1, []store.Record{rec("d1")}); err != nil {
		t.Fatal(err)
	}
	f2 := store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: l2.Epoch}}
	for _, k := range []string{"f4", "f5"} {
		if _, err := app(a, "w", f2, k); err != nil {
			t.Fatal(err)
		}
	}
	if c, _ := a.Cursor(bg, "w"); c != 1 {
		t.Fatalf("cursor = %d after appends, want 1", c)
	}
}

// The listener survives losing its connection: it reconnects, hints every
// watcher (notifications may have been missed meanwhile), and hints again
// on the next notification.
func TestWatchListenerReconnects(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	for _, w := range []string{"w", "idle"} {
		if _, err := a.CreateWorld(bg, "u", w, nil); err != nil {
			t.Fatal(err)
		}
	}
	// w has an item beyond its cursor (nobody drains it); idle has none.
	if _, _, err := b.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	watch := func(topic string) <-chan struct{} {
		sig := store.NewSignal()
		stop, err := a.Watch(bg, sig, topic)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return sig.C
	}
	ch, idle, effects := watch(store.TopicInbox("w")), watch(store.TopicInbox("idle")), watch(store.TopicEffects)
	drain := func() {
		time.Sleep(100 * time.Millisecond)
		for _, c := range []<-chan struct{}{ch, idle, effects} {
			select {
			case <-c:
			default:
			}
		}
	}
	drain() // the enqueue's own notification, if it came after the watch
	// Every store opens its listener at Open, so b's listens on the same
	// channel: both are cut.
	conn := rawConn(t, a.Schema())
	var cut int
	if err := conn.QueryRow(bg, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = 'LISTEN "'||$1||'"' AND pid <> pg_backend_pid()`, channelName(a.Schema())).Scan(&cut); err != nil || cut < 1 {
		t.Fatalf("the listeners' backends: %d cut, %v", cut, err)
	}
	// The reconnect's resync hints every topic but the inbox ones, and the
	// inbox of the world with a backlog; not the idle world's (a host
	// would restore every passive world it holds).
	for name, c := range map[string]<-chan struct{}{"effects": effects, "the backlogged world's inbox": ch} {
		select {
		case <-c:
		case <-time.After(hintBound):
			t.Fatalf("no hint on %s after the listener reconnected", name)
		}
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case <-idle:
		t.Fatal("the resync hinted the inbox of a world with nothing beyond its cursor")
	default:
	}
	// A write by the other machine must be hinted through the new
	// connection.
	drain()
	deadline := time.After(hintBound)
	for {
		if _, _, err := b.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no hint from the other store after the reconnect")
		}
	}
}
