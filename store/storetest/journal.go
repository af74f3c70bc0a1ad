package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

func journalTests() []testCase {
	return []testCase{
		{"AppendAssignsMonotonicRunSeqAndPersistedAt", testAppendBasics},
		{"DuplicateIdempotencyKeyReturnsExistingAndInsertsNothing", testAppendDuplicate},
		{"ExpectedHeadIsCompareAndSwap", testExpectedHead},
		{"ProducerEnvelopeReadsBackAsAValidPersistedEnvelope", testEnvelopeRoundTrip},
		{"StreamsHaveIndependentRunSeq", testIndependentStreams},
		{"PersistedAtIsSetByTheStoreNotTheProducer", testPersistedAtByStore},
		{"DuplicateKeyWithinOneBatchInsertsOnce", testDuplicateWithinBatch},
		{"ConcurrentAppendersNoDuplicateOrReorderedRunSeq", testConcurrentAppenders},
		{"DuplicateKeyRaceInsertsOnce", testDuplicateKeyRace},
		{"ExpectedHeadAllDuplicateRetryIsIdempotent", testExpectedHeadAllDuplicates},
		{"FencedAppendWithStaleEpochInsertsNothing", testFencedAppend},
		{"ReadHonoursAfterSeqAndLimit", testReadAfterSeqLimit},
		{"ReadWindowSelectsByPersistedAt", testReadWindow},
		{"InvalidRecordsAreRejectedWithErrInvalid", testInvalidRecords},
		{"RecordsAreImmutableAndPayloadsNotAliased", testRecordsImmutable},
	}
}

// rec builds a valid record; key distinguishes idempotency keys.
func rec(key string) store.Record {
	return store.Record{
		EventID: "ev-" + key, IdempotencyKey: "key-" + key, EventType: "StepCompleted",
		StepID: "s1", LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: "p", PlanVersion: 1,
		Payload: []byte{0xa0},
	}
}

func testAppendBasics(t *testing.T, open Factory) {
	h := open(t)
	var last uint64
	for i := 0; i < 5; i++ {
		got, err := h.Store.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, freeOpts)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].RunSeq <= last || got[0].Idempotent || got[0].PersistedAt.IsZero() {
			t.Fatalf("append %d: %+v after runSeq %d", i, got[0], last)
		}
		last = got[0].RunSeq
	}
	head, err := h.Store.Head(bg, "run-1")
	if err != nil || head != last {
		t.Fatalf("Head = %d, %v; want %d", head, err, last)
	}
	evs, err := h.Store.Read(bg, "run-1", 0, 100)
	if err != nil || len(evs) != 5 {
		t.Fatalf("Read = %d events, %v", len(evs), err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].RunSeq <= evs[i-1].RunSeq {
			t.Fatalf("Read out of runSeq order: %d then %d", evs[i-1].RunSeq, evs[i].RunSeq)
		}
	}
}

func testAppendDuplicate(t *testing.T, open Factory) {
	h := open(t)
	first, err := h.Store.Append(bg, "run-1", []store.Record{rec("a")}, freeOpts)
	if err != nil {
		t.Fatal(err)
	}
	dup := rec("a")
	dup.EventID = "another-id"
	again, err := h.Store.Append(bg, "run-1", []store.Record{dup}, freeOpts)
	if err != nil {
		t.Fatal(err)
	}
	if !again[0].Idempotent || again[0].EventID != first[0].EventID || again[0].RunSeq != first[0].RunSeq || !again[0].PersistedAt.Equal(first[0].PersistedAt) {
		t.Fatalf("duplicate append = %+v, want the existing %+v marked idempotent", again[0], first[0])
	}
	evs, _ := h.Store.Read(bg, "run-1", 0, 10)
	if len(evs) != 1 {
		t.Fatalf("duplicate inserted: %d events", len(evs))
	}
}

func testExpectedHead(t *testing.T, open Factory) {
	h := open(t)
	if _, err := h.Store.Append(bg, "run-1", []store.Record{rec("a")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)}); err != nil {
		t.Fatal(err)
	}
	_, err := h.Store.Append(bg, "run-1", []store.Record{rec("b")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)})
	if !errors.Is(err, store.ErrHeadMismatch) {
		t.Fatalf("stale ExpectedHead: %v, want ErrHeadMismatch", err)
	}
	if evs, _ := h.Store.Read(bg, "run-1", 0, 10); len(evs) != 1 {
		t.Fatalf("a failed CAS inserted: %d events", len(evs))
	}
}

func testIndependentStreams(t *testing.T, open Factory) {
	f := setup(t, open)
	if h := f.head("nobody"); h != 0 {
		t.Fatalf("Head of an unknown stream = %d, want 0", h)
	}
	if evs := f.read("nobody"); len(evs) != 0 {
		t.Fatalf("Read of an unknown stream = %v", evs)
	}
	last := map[string]uint64{}
	var want = map[string][]string{}
	for i := 0; i < 6; i++ {
		stream := []string{"run-1", "run-2"}[i%2]
		// The same idempotency key in two streams is two events.
		got := f.append(stream, freeOpts, fmt.Sprint(i/2))
		if got[0].Idempotent || got[0].RunSeq <= last[stream] {
			t.Fatalf("append %d to %s = %+v after runSeq %d", i, stream, got[0], last[stream])
		}
		last[stream] = got[0].RunSeq
		want[stream] = append(want[stream], rec(fmt.Sprint(i/2)).EventID)
	}
	for stream, ids := range want {
		evs := f.read(stream)
		if fmt.Sprint(eventIDs(evs)) != fmt.Sprint(ids) {
			t.Fatalf("Read %s = %v, want %v", stream, eventIDs(evs), ids)
		}
		for _, e := range evs {
			if e.StreamID != stream {
				t.Fatalf("Read %s returned an event of stream %q", stream, e.StreamID)
			}
		}
		if h := f.head(stream); h != last[stream] {
			t.Fatalf("Head %s = %d, want %d", stream, h, last[stream])
		}
	}
}

// The producer's StreamID, RunSeq and PersistedAt are ignored: the append
// authority assigns them (the execution semantics contract §2.2).
func testPersistedAtByStore(t *testing.T, open Factory) {
	f := setup(t, open)
	r := rec("a")
	r.StreamID, r.RunSeq = "elsewhere", 999_999
	r.PersistedAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	r.EmittedAt = time.Date(2002, 2, 2, 2, 2, 2, 0, time.UTC)
	before := f.now()
	got, err := f.s.Append(bg, "run-1", []store.Record{r}, freeOpts)
	must(t, err, "Append")
	after := f.now()
	pa := got[0].PersistedAt
	if pa.Before(before.Add(-timeTol)) || pa.After(after.Add(timeTol)) {
		t.Fatalf("persistedAt %v is not the store's clock (between %v and %v)", pa, before, after)
	}
	evs := f.read("run-1")
	if len(evs) != 1 || evs[0].StreamID != "run-1" || evs[0].RunSeq != got[0].RunSeq {
		t.Fatalf("Read = %+v, want stream run-1 at runSeq %d", evs, got[0].RunSeq)
	}
	if !evs[0].EmittedAt.Equal(r.EmittedAt) {
		t.Fatalf("emittedAt %v, want the producer's %v", evs[0].EmittedAt, r.EmittedAt)
	}
	f.advance(time.Hour)
	later := f.append("run-1", freeOpts, "b")
	if d := later[0].PersistedAt.Sub(pa); d < time.Hour-timeTol {
		t.Fatalf("persistedAt moved by %v after Advance(1h)", d)
	}
}

func testDuplicateWithinBatch(t *testing.T, open Factory) {
	f := setup(t, open)
	a2 := rec("a")
	a2.EventID = "ev-a-again"
	got, err := f.s.Append(bg, "run-1", []store.Record{rec("a"), rec("b"), a2}, freeOpts)
	must(t, err, "Append")
	if got[0].Idempotent || got[1].Idempotent || !got[2].Idempotent {
		t.Fatalf("idempotent flags = %v %v %v, want false false true", got[0].Idempotent, got[1].Idempotent, got[2].Idempotent)
	}
	if got[2].EventID != "ev-a" || got[2].RunSeq != got[0].RunSeq || !got[2].PersistedAt.Equal(got[0].PersistedAt) {
		t.Fatalf("in-batch duplicate = %+v, want the first occurrence's %+v", got[2], got[0])
	}
	if got[1].RunSeq <= got[0].RunSeq {
		t.Fatalf("runSeqs %d then %d", got[0].RunSeq, got[1].RunSeq)
	}
	if evs := f.read("run-1"); fmt.Sprint(eventIDs(evs)) != "[ev-a ev-b]" {
		t.Fatalf("Read = %v, want [ev-a ev-b]", eventIDs(evs))
	}
	// A whole batch of stored duplicates inserts nothing either.
	again, err := f.s.Append(bg, "run-1", []store.Record{rec("b"), rec("a")}, freeOpts)
	must(t, err, "Append duplicates")
	if !again[0].Idempotent || !again[1].Idempotent || again[0].RunSeq != got[1].RunSeq || again[1].RunSeq != got[0].RunSeq {
		t.Fatalf("all-duplicate batch = %+v", again)
	}
	if n := len(f.read("run-1")); n != 2 {
		t.Fatalf("%d events after an all-duplicate batch, want 2", n)
	}
}

func testConcurrentAppenders(t *testing.T, open Factory) {
	f := setup(t, open)
	const writers, each = 8, 50
	results := make([][]store.Appended, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				got, err := f.s.Append(bg, "run-1", []store.Record{rec(fmt.Sprintf("w%d-%d", w, i))}, freeOpts)
				if err != nil {
					t.Errorf("writer %d append %d: %v", w, i, err)
					return
				}
				results[w] = append(results[w], got[0])
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[uint64]string{}
	for w, rs := range results {
		var last uint64
		for i, a := range rs {
			if a.Idempotent {
				t.Fatalf("writer %d append %d marked idempotent", w, i)
			}
			if other, dup := seen[a.RunSeq]; dup {
				t.Fatalf("runSeq %d given to %s and %s", a.RunSeq, other, a.EventID)
			}
			if a.RunSeq <= last {
				t.Fatalf("writer %d: runSeq %d after its own %d", w, a.RunSeq, last)
			}
			seen[a.RunSeq], last = a.EventID, a.RunSeq
		}
	}
	evs, err := f.s.Read(bg, "run-1", 0, writers*each+10)
	must(t, err, "Read")
	if len(evs) != writers*each {
		t.Fatalf("Read returned %d events, want %d", len(evs), writers*each)
	}
	ids := map[string]bool{}
	for i, e := range evs {
		if i > 0 && e.RunSeq <= evs[i-1].RunSeq {
			t.Fatalf("Read not strictly increasing: %d then %d", evs[i-1].RunSeq, e.RunSeq)
		}
		if seen[e.RunSeq] != e.EventID || ids[e.EventID] {
			t.Fatalf("event %s at runSeq %d: appended as %q, seen before %v", e.EventID, e.RunSeq, seen[e.RunSeq], ids[e.EventID])
		}
		ids[e.EventID] = true
	}
	if h := f.head("run-1"); h != evs[len(evs)-1].RunSeq {
		t.Fatalf("Head = %d, last event at %d", h, evs[len(evs)-1].RunSeq)
	}
}

func testDuplicateKeyRace(t *testing.T, open Factory) {
	f := setup(t, open)
	const racers = 16
	results := make([]store.Appended, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rec("same")
			r.EventID = fmt.Sprintf("ev-racer-%d", i)
			<-start
			got, err := f.s.Append(bg, "run-1", []store.Record{r}, freeOpts)
			if err == nil {
				results[i] = got[0]
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for i, err := range errs {
		must(t, err, fmt.Sprintf("racer %d", i))
		if !results[i].Idempotent {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d appends of one key were not idempotent, want exactly 1", winners)
	}
	evs := f.read("run-1")
	if len(evs) != 1 {
		t.Fatalf("%d events inserted for one key", len(evs))
	}
	for i, a := range results {
		if a.EventID != evs[0].EventID || a.RunSeq != evs[0].RunSeq || !a.PersistedAt.Equal(evs[0].PersistedAt) {
			t.Fatalf("racer %d got %+v, the stored event is %s at %d (%v)", i, a, evs[0].EventID, evs[0].RunSeq, evs[0].PersistedAt)
		}
	}
}

// A retried append whose every event is already stored returns the existing
// metadata even though the head moved since (store.AppendOptions); a batch
// with any new event is compared against the head.
func testExpectedHeadAllDuplicates(t *testing.T, open Factory) {
	f := setup(t, open)
	first := f.append("run-1", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)}, "a", "b")
	retry := f.append("run-1", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)}, "a", "b")
	for i := range first {
		if !retry[i].Idempotent || retry[i].RunSeq != first[i].RunSeq || retry[i].EventID != first[i].EventID {
			t.Fatalf("retry %d = %+v, want the existing %+v", i, retry[i], first[i])
		}
	}
	head := f.head("run-1")
	_, err := f.s.Append(bg, "run-1", []store.Record{rec("b"), rec("c")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)})
	wantErr(t, err, store.ErrHeadMismatch, "partly new batch with a stale head")
	if f.head("run-1") != head || len(f.read("run-1")) != 2 {
		t.Fatal("a failed CAS changed the stream")
	}
	got := f.append("run-1", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(head)}, "b", "c")
	if !got[0].Idempotent || got[1].Idempotent || got[1].RunSeq <= head {
		t.Fatalf("batch at the right head = %+v", got)
	}
	_, err = f.s.Append(bg, "run-1", []store.Record{rec("d")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(head + 1000)})
	wantErr(t, err, store.ErrHeadMismatch, "head from the future")
}

func testFencedAppend(t *testing.T, open Factory) {
	f := setup(t, open)
	e1 := f.leased("w", "A")
	f.append("w", fenced("w", e1), "a")
	f.advance(leaseTTL + margin)
	e2 := f.acquire("w", "B").Epoch
	for _, stale := range []uint64{e1, 0, e2 + 7} {
		_, err := f.s.Append(bg, "w", []store.Record{rec("b")}, fenced("w", stale))
		wantErr(t, err, store.ErrFenced, fmt.Sprintf("append at epoch %d while the lease is at %d", stale, e2))
	}
	if evs := f.read("w"); len(evs) != 1 {
		t.Fatalf("fenced appends inserted: %v", eventIDs(evs))
	}
	f.append("w", fenced("w", e2), "b")
	// A fence names a world: an unknown one fences (or is not found) too.
	_, err := f.s.Append(bg, "w", []store.Record{rec("c")}, fenced("nowhere", 1))
	if !errors.Is(err, store.ErrWorldNotFound) && !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fence on an unknown world: %v, want ErrWorldNotFound or ErrFenced", err)
	}
	if evs := f.read("w"); fmt.Sprint(eventIDs(evs)) != "[ev-a ev-b]" {
		t.Fatalf("Read = %v", eventIDs(evs))
	}
}

func testReadAfterSeqLimit(t *testing.T, open Factory) {
	f := setup(t, open)
	var seqs []uint64
	for i := 0; i < 10; i++ {
		seqs = append(seqs, f.append("run-1", freeOpts, fmt.Sprint(i))[0].RunSeq)
	}
	evs, err := f.s.Read(bg, "run-1", seqs[3], 4)
	must(t, err, "Read")
	if fmt.Sprint(runSeqs(evs)) != fmt.Sprint(seqs[4:8]) {
		t.Fatalf("Read(after %d, limit 4) = %v, want %v", seqs[3], runSeqs(evs), seqs[4:8])
	}
	evs, err = f.s.Read(bg, "run-1", seqs[9], 10)
	must(t, err, "Read")
	if len(evs) != 0 {
		t.Fatalf("Read after the head = %v", runSeqs(evs))
	}
	evs, err = f.s.Read(bg, "run-1", 0, 1)
	must(t, err, "Read")
	if len(evs) != 1 || evs[0].RunSeq != seqs[0] {
		t.Fatalf("Read(0, 1) = %v", runSeqs(evs))
	}
	// afterSeq need not be a stored runSeq (gaps are allowed).
	evs, err = f.s.Read(bg, "run-1", seqs[8]-1, 10)
	must(t, err, "Read")
	if len(evs) == 0 || evs[len(evs)-1].RunSeq != seqs[9] || evs[0].RunSeq > seqs[8] {
		t.Fatalf("Read(after %d) = %v", seqs[8]-1, runSeqs(evs))
	}
}

func testReadWindow(t *testing.T, open Factory) {
	f := setup(t, open)
	a := f.append("run-1", freeOpts, "a")
	f.advance(10 * time.Second)
	bc := f.append("run-1", freeOpts, "b", "c")
	f.advance(10 * time.Second)
	d := f.append("run-1", freeOpts, "d")
	window := func(from, to time.Time, limit int) string {
		t.Helper()
		evs, err := f.s.ReadWindow(bg, "run-1", from, to, limit)
		must(t, err, "ReadWindow")
		for i := 1; i < len(evs); i++ {
			if evs[i].RunSeq <= evs[i-1].RunSeq {
				t.Fatalf("ReadWindow not in runSeq order: %v", runSeqs(evs))
			}
		}
		return fmt.Sprint(eventIDs(evs))
	}
	// from is inclusive, to exclusive.
	if got := window(a[0].PersistedAt, bc[0].PersistedAt, 10); got != "[ev-a]" {
		t.Fatalf("first window = %s", got)
	}
	if got := window(bc[0].PersistedAt, d[0].PersistedAt, 10); got != "[ev-b ev-c]" {
		t.Fatalf("middle window = %s", got)
	}
	if got := window(bc[0].PersistedAt, d[0].PersistedAt, 1); got != "[ev-b]" {
		t.Fatalf("middle window, limit 1 = %s", got)
	}
	if got := window(a[0].PersistedAt, d[0].PersistedAt.Add(time.Second), 10); got != "[ev-a ev-b ev-c ev-d]" {
		t.Fatalf("whole window = %s", got)
	}
	if got := window(d[0].PersistedAt.Add(time.Second), d[0].PersistedAt.Add(time.Hour), 10); got != "[]" {
		t.Fatalf("later window = %s", got)
	}
}

func testInvalidRecords(t *testing.T, open Factory) {
	f := setup(t, open)
	bad := map[string]func(*store.Record){
		"empty eventId":        func(r *store.Record) { r.EventID = "" },
		"empty idempotencyKey": func(r *store.Record) { r.IdempotencyKey = "" },
		"empty eventType":      func(r *store.Record) { r.EventType = "" },
		"logicalAttemptId 0":   func(r *store.Record) { r.LogicalAttemptID = 0 },
		"engineAttemptId 0":    func(r *store.Record) { r.EngineAttemptID = 0 },
	}
	for _, what := range []string{"empty eventId", "empty idempotencyKey", "empty eventType", "logicalAttemptId 0", "engineAttemptId 0"} {
		r := rec("bad")
		bad[what](&r)
		// A bad event fails the whole batch: the good one is not inserted.
		_, err := f.s.Append(bg, "run-1", []store.Record{rec("good"), r}, freeOpts)
		wantErr(t, err, store.ErrInvalid, what)
	}
	if evs := f.read("run-1"); len(evs) != 0 {
		t.Fatalf("invalid batches inserted %v", eventIDs(evs))
	}
}

// Records are immutable: what Read returns is what was appended, field by
// field (times at the nanosecond: EmittedAt is the producer's, and
// PersistedAt must read back exactly as Append returned it, because replay
// hands it to handlers as their time), no later append or caller mutation
// changes it.
func testRecordsImmutable(t *testing.T, open Factory) {
	f := setup(t, open)
	in := store.Record{
		EventID: "ev-1", IdempotencyKey: "k-1", EventType: "RunStarted",
		EmittedAt: time.Date(2026, 2, 16, 12, 30, 45, 123456789, time.UTC),
		StepID:    "RUN", LogicalAttemptID: 2, EngineAttemptID: 3, PlanID: "plan-7", PlanVersion: 9,
		Payload: []byte{0xa1, 0x61, 0x78, 0x01},
	}
	orig := append([]byte(nil), in.Payload...)
	got, err := f.s.Append(bg, "run-1", []store.Record{in}, freeOpts)
	must(t, err, "Append")
	in.Payload[0] = 0xff // the caller reuses its buffer
	check := func(when string) {
		t.Helper()
		evs := f.read("run-1")
		if len(evs) != 1 {
			t.Fatalf("%s: %d events", when, len(evs))
		}
		r := evs[0]
		want := in
		want.Payload = orig
		want.StreamID, want.RunSeq = "run-1", got[0].RunSeq
		if r.EventID != want.EventID || r.StreamID != want.StreamID || r.RunSeq != want.RunSeq ||
			r.IdempotencyKey != want.IdempotencyKey || r.EventType != want.EventType ||
			!r.EmittedAt.Equal(want.EmittedAt) || r.StepID != want.StepID ||
			r.LogicalAttemptID != want.LogicalAttemptID || r.EngineAttemptID != want.EngineAttemptID ||
			r.PlanID != want.PlanID || r.PlanVersion != want.PlanVersion || !bytes.Equal(r.Payload, want.Payload) {
			t.Fatalf("%s: read back %+v, want %+v", when, r, want)
		}
		if !r.PersistedAt.Equal(got[0].PersistedAt) {
			t.Fatalf("%s: persistedAt reads back as %v, Append returned %v", when, r.PersistedAt, got[0].PersistedAt)
		}
		r.Payload[0] = 0xee // nor does a reader's mutation reach the store
	}
	check("after the caller mutated its payload")
	dup := in
	dup.EventID, dup.EventType, dup.Payload = "ev-other", "RunFailed", []byte{0x00}
	_, err = f.s.Append(bg, "run-1", []store.Record{dup}, freeOpts)
	must(t, err, "duplicate Append")
	check("after a duplicate with other content")
	f.append("run-1", freeOpts, "later")
	evs := f.read("run-1")
	if len(evs) != 2 || !bytes.Equal(evs[0].Payload, orig) {
		t.Fatalf("after a later append: %+v", evs)
	}
}

// testEnvelopeRoundTrip: a producer's fully valid envelope (recomputed key,
// canonical payload, emittedAt) comes back from the append authority as a
// valid persisted envelope: the store and event/ agree on the record.
func testEnvelopeRoundTrip(t *testing.T, open Factory) {
	h := open(t)
	now, err := h.Store.Now(bg)
	if err != nil {
		t.Fatal(err)
	}
	e := event.Envelope{
		EventID: "ev-1", StreamID: "run-env", EventType: event.StepCompleted, StepID: "charge",
		LogicalAttemptID: 1, PlanID: "plan", PlanVersion: 2, EmittedAt: now, Payload: event.EmptyPayload(),
	}
	e.Normalize()
	e.IdempotencyKey = e.ComputeIdempotencyKey()
	if err := e.Validate(); err != nil {
		t.Fatalf("the producer's envelope is invalid: %v", err)
	}
	got, err := h.Store.Append(bg, e.StreamID, []store.Record{e}, freeOpts)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.Store.Read(bg, e.StreamID, 0, 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Read = %d, %v", len(evs), err)
	}
	back := evs[0]
	if back.RunSeq != got[0].RunSeq || !back.PersistedAt.Equal(got[0].PersistedAt) || back.StreamID != e.StreamID {
		t.Fatalf("read back %+v, appended %+v", back, got[0])
	}
	if err := back.ValidatePersisted(); err != nil {
		t.Fatalf("read-back envelope fails ValidatePersisted: %v", err)
	}
	if err := back.VerifyKey(); err != nil {
		t.Fatalf("read-back envelope's key: %v", err)
	}
}
