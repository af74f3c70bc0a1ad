package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// RunPort runs the port suite (store.Exporter, store.Importer) copying from
// the backend from opens into the one to opens. A backend's test file runs
// it for every pair it can build; each store must implement both
// interfaces.
func RunPort(t *testing.T, from, to Factory) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, from, to Factory)
	}{
		{"CopyHoldsEveryRecordAndServes", testPortCopy},
		{"HeldEffectOfAnArchivedWorldIsWithdrawn", testPortHeldArchived},
		{"DuplicateWorldIsAConflictAndWritesNothing", testPortDuplicate},
		{"ImportAgainIsANoOpAndADifferentRecordConflicts", testPortAgain},
		{"InterruptedImportRunAgainCompletes", testPortResume},
		{"ResumeAfterTheSourceTookInputCountsEveryItem", testPortResumeGrown},
		{"BadRecordIsInvalidAndWritesNothing", testPortBadRecord},
		{"ExportDuringWritesIsOneState", testPortConsistent},
		{"EmitErrorEndsTheExport", testPortEmitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, from, to)
		})
	}
}

func porter(t testing.TB, s store.Store) (store.Exporter, store.Importer) {
	t.Helper()
	ex, ok1 := s.(store.Exporter)
	im, ok2 := s.(store.Importer)
	if !ok1 || !ok2 {
		t.Fatalf("%T implements no store.Exporter and store.Importer", s)
	}
	return ex, im
}

// exportAll collects a whole export (the suite's stores are small).
func exportAll(t testing.TB, s store.Store) []store.PortRecord {
	t.Helper()
	ex, _ := porter(t, s)
	var out []store.PortRecord
	must(t, ex.Export(bg, func(r store.PortRecord) error { out = append(out, r); return nil }), "Export")
	return out
}

// importAll imports recs in batches of n and finishes the import.
func importAll(t testing.TB, s store.Store, recs []store.PortRecord, n int) {
	t.Helper()
	_, im := porter(t, s)
	for i := 0; i < len(recs); i += n {
		must(t, im.Import(bg, recs[i:min(i+n, len(recs))]), fmt.Sprintf("Import of records %d…", i))
	}
	must(t, im.FinishImport(bg), "FinishImport")
}

func portJSON(t testing.TB, r store.PortRecord) string {
	t.Helper()
	b, err := json.Marshal(r)
	must(t, err, "json.Marshal")
	return string(b)
}

// portFill gives a store every kind of row, and returns the epochs its
// leases were at.
type portFilled struct {
	mainEpoch, sevenEpoch uint64
	consumedReceipt       uint64 // i-consumed's receipt's inbox seq
	liveKey               string // an inbox key still live
	liveKeySeq            uint64
	admitted              store.QueuedRun // w-q1's entry in q-one, admitted on the source
	rateSpent             time.Time       // when the source admitted w-r1 from q-rate
}

// portQueueFill gives f two queues: q-one (one run at a time) holding an
// admitted run and a waiting one, and q-rate (one admission per very long
// period) whose one admitted run has left, so that only its admission,
// kept for the rate window, is left of it.
func portQueueFill(t *testing.T, f *fx) (admitted store.QueuedRun, rateSpent time.Time) {
	must(t, f.s.PutQueue(bg, store.QueueSpec{Name: "q-one", Concurrency: 1, WorkerConcurrency: 3, RateLimit: 10,
		RatePeriod: portRatePeriod, Partitioned: true}), "PutQueue q-one")
	must(t, f.s.PutQueue(bg, store.QueueSpec{Name: "q-rate", RateLimit: 1, RatePeriod: portRatePeriod}), "PutQueue q-rate")
	for _, e := range []store.QueuedRun{{Queue: "q-one", Run: "w-q1", Partition: "p", Priority: 2},
		{Queue: "q-one", Run: "w-q2", Partition: "p", Priority: 3}, {Queue: "q-rate", Run: "w-r1"}, {Queue: "q-rate", Run: "w-r2"}} {
		f.world(e.Run)
		if _, _, err := f.s.EnqueueRun(bg, e); err != nil {
			t.Fatalf("EnqueueRun %s: %v", e.Run, err)
		}
	}
	got, err := f.s.AdmitRuns(bg, "q-one", "node-a", 5)
	if err != nil || len(got) != 1 || got[0].Run != "w-q1" {
		t.Fatalf("AdmitRuns q-one = %+v, %v; want w-q1 alone", got, err)
	}
	r, err := f.s.AdmitRuns(bg, "q-rate", "node-a", 5)
	if err != nil || len(r) != 1 || r[0].Run != "w-r1" {
		t.Fatalf("AdmitRuns q-rate = %+v, %v; want w-r1 alone", r, err)
	}
	f.setStatus("w-r1", store.WorldArchived, "ran")
	return got[0], r[0].AdmittedAt
}

// portRatePeriod is the longest rate period a queue may have, so that a
// window spent on the source is still open on a target whose clock is
// near the source's.
const portRatePeriod = 720 * time.Hour

func portFill(t *testing.T, f *fx) portFilled {
	var out portFilled
	// Timers first: they need the clock moved past the lease TTL.
	e := f.leased("w-main", "node-a")
	now := f.now()
	must(t, f.s.Schedule(bg, "w-main", e, "t-deliv", now.Add(50*time.Second), []byte("td")), "Schedule")
	must(t, f.s.Schedule(bg, "w-main", e, "t-claimed", now.Add(55*time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w-main", e, "t-future", now.Add(time.Hour), []byte{}), "Schedule")
	f.advance(70 * time.Second)
	e = f.acquire("w-main", "node-a").Epoch
	ts := f.claimDue("timers-a", 2)
	if len(ts) != 2 || ts[0].IntentHash != "t-deliv" {
		t.Fatalf("ClaimDue = %+v, want t-deliv and t-claimed", ts)
	}
	f.fire("t-deliv", ts[0].ClaimOf())

	// Effects in every state; i-held is held while inflight (its attempt
	// may have run), i-released was held, then released to run again.
	f.publish("w-main", e, "i-inflight", "i-done", "i-consumed", "i-retry", "i-resolved", "i-held", "i-released")
	claimed := f.claim("fx-a", 7)
	if len(claimed) != 7 {
		t.Fatalf("Claim = %d items, want 7", len(claimed))
	}
	f.hold("i-held", "may have charged twice")
	f.hold("i-released", "checking")
	f.releaseHeld("i-released", "checked: never ran")
	byHash := map[string]vocab.EffectItem{}
	for _, it := range claimed {
		byHash[it.IntentHash] = it
	}
	out.consumedReceipt, _ = f.complete("i-consumed", byHash["i-consumed"].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("r1")})
	must(t, f.s.RetryLater(bg, "i-retry", byHash["i-retry"].ClaimOf(), time.Hour, "boom"), "RetryLater")
	if _, _, err := f.s.Resolve(bg, "i-resolved", vocab.Receipt{Status: vocab.ReceiptOK}, "by hand"); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	f.publish("w-main", e, "i-pending", "i-withdrawn")

	// An inbox with keys, one drain (a Commit that also withdraws and
	// journals), then more items above the cursor.
	seqA, _ := f.enqueue("w-main", vocab.KindEvent, "k-a", []byte("a"))
	f.enqueue("w-main", vocab.KindEvent, "", nil)
	head := f.head("w-main")
	res, err := f.s.Commit(bg, "w-main", e, store.CommitBatch{
		ExpectedCursor: f.cursor("w-main"), NewCursor: seqA + 1, ExpectedHead: head,
		Entries: []store.Record{rec("c1"), rec("c2")}, Withdraw: []string{"i-withdrawn"},
	})
	must(t, err, "Commit")
	f.complete("i-done", byHash["i-done"].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("no")})
	out.liveKey = "k-c"
	out.liveKeySeq, _ = f.enqueue("w-main", vocab.KindEvent, "k-c", []byte("c"))

	// The journal: a snapshot, compaction below it (keys kept), a free
	// stream.
	f.append("w-main", fenced("w-main", e), "e1", "e2", "e3")
	must(t, f.s.PutSnapshot(bg, "w-main", e, snap(res.Head+2, "s")), "PutSnapshot")
	if _, err := f.s.Compact(bg, "w-main", e, 1); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	f.append("run-free", freeOpts, "f1", "f2")

	// A fork, pinned; fabric; a watermark.
	if _, err := f.s.ForkWorld(bg, "w-main", res.Head+2, "w-fork"); err != nil {
		t.Fatalf("ForkWorld: %v", err)
	}
	must(t, f.s.Assign(bg, "w-fork", store.Assignment{DesiredWorker: "node-a", Priority: 5, Reason: "pinned"}, nil), "Assign")
	if _, err := f.s.Send(bg, "w-main", "m1", store.InboxItem{Payload: []byte("hello")}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	must(t, f.s.CASWatermark(bg, "proj", "w-main", 0, 3), "CASWatermark")
	sc, err := f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "nightly", Spec: []byte(`{"every":"1h"}`), State: []byte(`{"fired":2}`),
		NextFireAt: f.now().Add(time.Hour)})
	must(t, err, "CreateSchedule")
	sc.Paused = true
	_, err = f.s.UpdateSchedule(bg, sc)
	must(t, err, "UpdateSchedule")
	out.admitted, out.rateSpent = portQueueFill(t, f)

	// A claim that rides on an incarnation's promise.
	if _, err := f.s.Heartbeat(bg, "node-c", 8, store.AliveAs("inc-1", time.Hour)); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if _, err := f.s.Publish(bg, "w-main", e, []vocab.Intent{{IntentHash: "i-owned", Kind: "own.kind", Origin: "test", PolicyContextHash: "pch"}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if items, err := f.s.Claim(bg, "node-c/fx", []string{"own.kind"}, 1, claimTTL, store.ClaimFor("node-c", "inc-1")); err != nil || len(items) != 1 {
		t.Fatalf("Claim for node-c = %v, %v", items, err)
	}

	// An archived world whose effects were inflight, one of them held
	// since (an archive leaves inflight effects to their claims), a paused
	// world.
	ea := f.leased("w-arch", "node-a")
	if _, err := f.s.Publish(bg, "w-arch", ea, []vocab.Intent{{IntentHash: "i-arch", Kind: "arch.kind", Origin: "test", PolicyContextHash: "pch"},
		{IntentHash: "i-arch-held", Kind: "arch.kind", Origin: "test", PolicyContextHash: "pch"}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if items, err := f.s.Claim(bg, "fx-a", []string{"arch.kind"}, 2, claimTTL); err != nil || len(items) != 2 {
		t.Fatalf("Claim arch = %v, %v", items, err)
	}
	f.setStatus("w-arch", store.WorldArchived, "done with it")
	f.hold("i-arch-held", "after the archive")
	f.world("w-paused")
	f.setStatus("w-paused", store.WorldPaused, "hold on")

	// A lease at epoch 7, held.
	f.world("w-seven")
	for i := 1; i < 7; i++ {
		l := f.acquire("w-seven", "node-a")
		must(t, f.s.Release(bg, "w-seven", "node-a", l.Epoch), "Release")
	}
	out.sevenEpoch = f.acquire("w-seven", "node-a").Epoch
	if out.sevenEpoch != 7 {
		t.Fatalf("w-seven's epoch = %d, want 7", out.sevenEpoch)
	}
	out.mainEpoch = e
	return out
}

func testPortCopy(t *testing.T, from, to Factory) {
	src := setup(t, from)
	filled := portFill(t, src)
	recs := exportAll(t, src.s)

	kinds := map[store.PortKind]int{}
	states := map[string]bool{}
	for _, r := range recs {
		kinds[r.Kind]++
		switch r.Kind {
		case store.PortKindEffect:
			states["effect:"+r.Effect.State] = true
		case store.PortKindTimer:
			states["timer:"+r.Timer.State] = true
		}
	}
	for _, k := range store.PortKinds() {
		if kinds[k] == 0 {
			t.Errorf("the export holds no %q record", k)
		}
	}
	for _, s := range []string{"effect:pending", "effect:inflight", "effect:done", "effect:withdrawn", "effect:held",
		"timer:scheduled", "timer:claimed", "timer:delivered"} {
		if !states[s] {
			t.Errorf("the export holds no %s", s)
		}
	}
	// The hold's fields are in the export (else the comparison below
	// would pass on two exports that both drop them).
	srcEffects := map[string]*store.PortEffect{}
	for _, r := range recs {
		if r.Kind == store.PortKindEffect {
			srcEffects[r.Effect.IntentHash] = r.Effect
		}
	}
	if h := srcEffects["i-held"]; h == nil || h.State != "held" || h.HoldReason != "may have charged twice" || h.HeldAt == nil ||
		h.ReleaseReason != "" || h.Attempts != 1 {
		t.Errorf("the source exports i-held as %+v, want held with its reason and time, attempt 1", h)
	}
	if r := srcEffects["i-released"]; r == nil || r.State != "pending" || r.HoldReason != "checking" || r.HeldAt == nil ||
		r.ReleaseReason != "checked: never ran" {
		t.Errorf("the source exports i-released as %+v, want pending with its hold's and release's reasons", r)
	}
	if p := srcEffects["i-pending"]; p == nil || p.HoldReason != "" || p.HeldAt != nil || p.ReleaseReason != "" {
		t.Errorf("the source exports i-pending as %+v, want no hold", p)
	}

	dst := setup(t, to)
	_, im := porter(t, dst.s)
	if empty, err := im.Empty(bg); err != nil || !empty {
		t.Fatalf("Empty of a fresh target = %v, %v; want true", empty, err)
	}
	// The records travel as JSON, as a backup file holds them.
	viaJSON := make([]store.PortRecord, len(recs))
	for i, r := range recs {
		must(t, json.Unmarshal([]byte(portJSON(t, r)), &viaJSON[i]), "json.Unmarshal")
		if a, b := portJSON(t, r), portJSON(t, viaJSON[i]); a != b {
			t.Fatalf("record %d changed through JSON:\n %s\n %s", i, a, b)
		}
	}
	importAll(t, dst.s, viaJSON, 5)
	if empty, err := im.Empty(bg); err != nil || empty {
		t.Fatalf("Empty after the import = %v, %v; want false", empty, err)
	}
	got := exportAll(t, dst.s)

	// The target's export is the source's, as an import changes it.
	archived := map[string]bool{}
	for _, r := range recs {
		if r.Kind == store.PortKindWorld && r.World.Status == store.WorldArchived {
			archived[r.World.ID] = true
		}
	}
	dstNow := dst.now()
	if len(got) != len(recs) {
		t.Errorf("the target exports %d records, the source %d", len(got), len(recs))
	}
	for i := range min(len(got), len(recs)) {
		want := recs[i]
		if want.Kind == store.PortKindEffect {
			want = store.PortImported(want, archived[want.Effect.World], dstNow)
			if (recs[i].Effect.State == "inflight" || recs[i].Effect.State == "held") && archived[want.Effect.World] &&
				got[i].Kind == store.PortKindEffect &&
				got[i].Effect.CompletedAt != nil && near(*got[i].Effect.CompletedAt, dstNow, timeTol) {
				want.Effect.CompletedAt = got[i].Effect.CompletedAt // withdrawn at the target's clock
			}
		} else {
			want = store.PortImported(want, false, dstNow)
			if want.Kind == store.PortKindLease && got[i].Kind == store.PortKindLease && !want.Lease.ExpiresAt.Equal(recs[i].Lease.ExpiresAt) &&
				near(got[i].Lease.ExpiresAt, dstNow, timeTol) {
				want.Lease.ExpiresAt = got[i].Lease.ExpiresAt // brought back to the target's clock
			}
		}
		if w, g := portJSON(t, want), portJSON(t, got[i]); w != g {
			t.Errorf("record %d:\n source %s\n target %s", i, w, g)
		}
	}
	if t.Failed() {
		return
	}

	// The target works.
	d := dst
	if ws, err := d.s.ListWorkers(bg); err != nil || len(ws) != 0 {
		t.Errorf("the target's workers = %+v, %v; want none (workers are not copied)", ws, err)
	}
	l := d.acquire("w-seven", "node-b")
	if l.Epoch <= filled.sevenEpoch {
		t.Errorf("a lease acquired on the target has epoch %d, want above the source's %d", l.Epoch, filled.sevenEpoch)
	}
	e := d.acquire("w-main", "node-b").Epoch
	if e <= filled.mainEpoch {
		t.Errorf("w-main's epoch on the target = %d, want above %d", e, filled.mainEpoch)
	}
	head := d.head("w-main")
	ap := d.append("w-main", store.AppendOptions{Fence: &store.Fence{World: "w-main", Epoch: e}, ExpectedHead: store.Head(head)}, "after")
	if ap[0].RunSeq != head+1 || ap[0].Idempotent {
		t.Errorf("an append on the target = %+v, want runSeq %d", ap[0], head+1)
	}
	if again := d.append("w-main", fenced("w-main", e), "e1"); !again[0].Idempotent {
		t.Errorf("re-appending a compacted event's key on the target = %+v, want idempotent", again[0])
	}
	if seq, dup := d.enqueue("w-main", vocab.KindEvent, filled.liveKey, []byte("c")); !dup || seq != filled.liveKeySeq {
		t.Errorf("enqueue of a live key on the target = %d, %v; want %d, dup", seq, dup, filled.liveKeySeq)
	}
	if n := d.publish("w-main", e, "i-done", "i-consumed", "i-withdrawn", "i-pending"); n != 0 {
		t.Errorf("re-publishing known intents on the target published %d, want 0", n)
	}
	items := d.claim("fx-b", 10)
	got2 := map[string]vocab.EffectItem{}
	for _, it := range items {
		got2[it.IntentHash] = it
	}
	// i-retry waits for its retry time, which the target's clock may have
	// passed already (the suite's stores keep clocks of their own).
	want := 3
	for _, r := range recs {
		if r.Kind == store.PortKindEffect && r.Effect.IntentHash == "i-retry" && !r.Effect.RetryAt.After(d.now()) {
			want = 4
		}
	}
	if len(items) != want || got2["i-pending"].Attempt != 1 || got2["i-inflight"].Attempt != 2 || got2["i-released"].Attempt != 2 {
		t.Errorf("claims on the target = %+v, want i-inflight and i-released (again, attempt 2) and i-pending (attempt 1)", items)
	}
	// A held effect stays held on the target, with its reason and time,
	// until an operator there releases it.
	if _, ok := got2["i-held"]; ok {
		t.Errorf("the held effect i-held was claimed on the target")
	}
	if st := d.effectStatus("i-held"); st.State != vocab.EffectHeld || st.HoldReason != "may have charged twice" ||
		!st.HeldAt.Equal(*srcEffects["i-held"].HeldAt) {
		t.Errorf("i-held on the target = %+v, want held with the source's reason and time %v", st, srcEffects["i-held"].HeldAt)
	}
	if st := d.releaseHeld("i-held", "released on the target"); st.State != vocab.EffectPending {
		t.Errorf("ReleaseHeld of i-held on the target = %+v, want pending", st)
	}
	if it := d.claimOne("fx-b", "i-held"); it.Attempt != 2 {
		t.Errorf("i-held's claim on the target after its release = %+v, want attempt 2", it)
	}
	if st := d.effectStatus("i-arch"); st.State != vocab.EffectWithdrawn {
		t.Errorf("the archived world's inflight effect on the target is %s, want withdrawn", st.State)
	}
	// An archived world's held effect is withdrawn, as ReleaseHeld would
	// withdraw it; its hold stays its history.
	if st := d.effectStatus("i-arch-held"); st.State != vocab.EffectWithdrawn || st.HoldReason != "after the archive" ||
		!st.HeldAt.Equal(*srcEffects["i-arch-held"].HeldAt) {
		t.Errorf("the archived world's held effect on the target = %+v, want withdrawn with its hold kept", st)
	}
	d.advance(2 * time.Hour)
	due := d.claimDue("timers-b", 10)
	if len(due) != 2 || due[0].IntentHash != "t-claimed" || due[0].Attempt != 2 || due[1].IntentHash != "t-future" {
		t.Fatalf("due timers on the target = %+v, want t-claimed (attempt 2) and t-future", due)
	}
	seq, dup := d.fire("t-claimed", due[0].ClaimOf())
	if dup || seq == 0 {
		t.Errorf("Fire on the target = %d, %v", seq, dup)
	}
	if _, dup := d.fire("t-deliv", vocab.Claim{Worker: "timers-a", Attempt: 1}); !dup {
		t.Errorf("a timer delivered on the source fired again on the target")
	}
	var sawConsumed bool
	for _, it := range d.inbox("w-main") {
		sawConsumed = sawConsumed || it.Seq == filled.consumedReceipt
	}
	if !sawConsumed {
		t.Errorf("the consumed receipt's inbox item %d is missing on the target", filled.consumedReceipt)
	}
	portQueuesServe(t, d, filled.admitted, filled.rateSpent)
}

// portQueuesServe checks that d, a copy of a store portQueueFill filled,
// holds its queues and counts what the source admitted: the admitted run
// keeps its slot with its worker and time, and the spent rate window
// stays spent.
func portQueuesServe(t *testing.T, d *fx, admitted store.QueuedRun, rateSpent time.Time) {
	t.Helper()
	if q, err := d.s.GetQueue(bg, "q-one"); err != nil || q != (store.QueueSpec{Name: "q-one", Concurrency: 1,
		WorkerConcurrency: 3, RateLimit: 10, RatePeriod: portRatePeriod, Partitioned: true}) {
		t.Errorf("GetQueue q-one on the target = %+v, %v; want the source's declaration", q, err)
	}
	e, ok, err := d.s.QueueRunOf(bg, "w-q1")
	if err != nil || !ok || e.Worker != "node-a" || !e.AdmittedAt.Equal(admitted.AdmittedAt) || e.Seq != admitted.Seq ||
		e.Partition != "p" || e.Priority != 2 || !e.EnqueuedAt.Equal(admitted.EnqueuedAt) {
		t.Errorf("w-q1's entry on the target = %+v, %v, %v; want the source's admitted entry %+v", e, ok, err, admitted)
	}
	if got, err := d.s.AdmitRuns(bg, "q-one", "node-b", 5); err != nil || len(got) != 0 {
		t.Errorf("AdmitRuns q-one on the target = %+v, %v; want none (its one slot is w-q1's, copied admitted)", got, err)
	}
	// The suite's stores keep clocks of their own: the window the source
	// spent may have closed by the target's clock (a memstore's starts in
	// the past), and then w-r2 is admitted.
	if rateSpent.Add(portRatePeriod).After(d.now()) {
		if n, err := d.s.RecentAdmissions(bg, "q-rate"); err != nil || n != 1 {
			t.Errorf("RecentAdmissions q-rate on the target = %d, %v; want the source's 1", n, err)
		}
		if got, err := d.s.AdmitRuns(bg, "q-rate", "node-b", 5); err != nil || len(got) != 0 {
			t.Errorf("AdmitRuns q-rate on the target = %+v, %v; want none (the source spent its rate window)", got, err)
		}
	} else if got, err := d.s.AdmitRuns(bg, "q-rate", "node-b", 5); err != nil || len(got) != 1 || got[0].Run != "w-r2" {
		t.Errorf("AdmitRuns q-rate on the target, its window closed = %+v, %v; want w-r2", got, err)
	}
	// The copied run leaves as any run does, and frees its slot.
	d.setStatus("w-q1", store.WorldArchived, "ran")
	if got, err := d.s.AdmitRuns(bg, "q-one", "node-b", 5); err != nil || len(got) != 1 || got[0].Run != "w-q2" {
		t.Errorf("AdmitRuns q-one on the target after w-q1 left = %+v, %v; want w-q2", got, err)
	}
	// A run enqueued on the target queues behind every copied one.
	d.world("w-q3")
	e3, _, err := d.s.EnqueueRun(bg, store.QueuedRun{Queue: "q-one", Run: "w-q3", Partition: "p", Priority: 3})
	if err != nil {
		t.Fatalf("EnqueueRun w-q3 on the target: %v", err)
	}
	if w2, _, _ := d.s.QueueRunOf(bg, "w-q2"); e3.Seq <= w2.Seq {
		t.Errorf("w-q3's seq on the target = %d, want above the copied w-q2's %d", e3.Seq, w2.Seq)
	}
}

// testPortHeldArchived: an archive leaves an inflight effect to its claim,
// so an operator may hold it afterwards (a restore holds every open
// effect). Nothing would ever release it to run: ReleaseHeld withdraws an
// archived world's effect, and so does the import. The world reaches the
// target in the effect's batch or in one before it, which a backend may
// look up differently, so both are imported.
func testPortHeldArchived(t *testing.T, from, to Factory) {
	src := setup(t, from)
	e := src.leased("w-arch", "node-a")
	src.publish("w-arch", e, "i-arch-held")
	src.claimOne("fx-a", "i-arch-held")
	src.setStatus("w-arch", store.WorldArchived, "done with it")
	held := src.hold("i-arch-held", "after the archive")
	if held.State != vocab.EffectHeld {
		t.Fatalf("HoldEffect of an archived world's inflight effect = %+v, want held", held)
	}
	recs := exportAll(t, src.s)
	for _, batch := range []int{1, len(recs)} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			dst := setup(t, to)
			before := dst.now()
			importAll(t, dst.s, recs, batch)
			st := dst.effectStatus("i-arch-held")
			if st.State != vocab.EffectWithdrawn || st.HoldReason != "after the archive" || !st.HeldAt.Equal(held.HeldAt) ||
				st.CompletedAt.Before(before.Add(-timeTol)) || st.Attempts != 1 {
				t.Fatalf("the archived world's held effect on the target = %+v, want withdrawn at the target's clock (>= %v), "+
					"its hold (%v) and attempt kept", st, before, held.HeldAt)
			}
			_, err := dst.s.ReleaseHeld(bg, "i-arch-held", "run it")
			wantErr(t, err, store.ErrEffectEnded, "ReleaseHeld of the withdrawn effect on the target")
			if items := dst.claim("fx-b", 10); len(items) != 0 {
				t.Errorf("claims on the target = %+v, want none", items)
			}
			got := exportAll(t, dst.s)
			if len(got) != len(recs) {
				t.Fatalf("the target exports %d records, the source %d", len(got), len(recs))
			}
			for i := range recs {
				want := recs[i]
				if want.Kind == store.PortKindEffect {
					want = store.PortImported(want, true, st.CompletedAt)
				} else {
					want = store.PortImported(want, false, dst.now())
					if want.Kind == store.PortKindLease && got[i].Kind == store.PortKindLease {
						want.Lease.ExpiresAt = got[i].Lease.ExpiresAt // brought back to the target's clock, or not
					}
				}
				if w, g := portJSON(t, want), portJSON(t, got[i]); w != g {
					t.Errorf("record %d:\n source %s\n target %s", i, w, g)
				}
			}
		})
	}
}

func testPortDuplicate(t *testing.T, from, to Factory) {
	src := setup(t, from)
	src.world("w-a")
	src.world("w-b")
	recs := exportAll(t, src.s)
	var worlds []store.PortRecord
	for _, r := range recs {
		if r.Kind == store.PortKindWorld {
			worlds = append(worlds, r)
		}
	}
	if len(worlds) != 2 {
		t.Fatalf("export = %d worlds, want 2", len(worlds))
	}
	dst := setup(t, to)
	_, im := porter(t, dst.s)
	must(t, im.Import(bg, worlds[:1]), "Import w-a")
	// w-a as the target holds it is imported again as a no-op
	// (testPortAgain); another w-a is a conflict.
	other := *worlds[0].World
	other.Universe += "-other"
	otherA := worlds[0]
	otherA.World = &other
	err := im.Import(bg, []store.PortRecord{worlds[1], otherA})
	wantErr(t, err, store.ErrConflict, "Import of a batch with a world the target holds as another")
	if _, err := dst.s.GetWorld(bg, "w-b"); !errors.Is(err, store.ErrWorldNotFound) {
		t.Errorf("GetWorld w-b after the refused batch: %v, want ErrWorldNotFound (nothing written)", err)
	}
	err = im.Import(bg, []store.PortRecord{worlds[1], worlds[1]})
	wantErr(t, err, store.ErrConflict, "Import of a batch naming a world twice")
	if _, err := dst.s.GetWorld(bg, "w-b"); !errors.Is(err, store.ErrWorldNotFound) {
		t.Errorf("GetWorld w-b after the refused batch: %v, want ErrWorldNotFound (nothing written)", err)
	}
}

func testPortBadRecord(t *testing.T, from, to Factory) {
	src := setup(t, from)
	src.world("w-a")
	recs := exportAll(t, src.s)
	dst := setup(t, to)
	_, im := porter(t, dst.s)
	future := recs[0]
	future.Format = store.PortFormat + 1
	unknown := store.PortRecord{Format: store.PortFormat, Kind: "no-such-kind"}
	missing := store.PortRecord{Format: store.PortFormat, Kind: store.PortKindEffect}
	two := recs[0]
	two.Watermark = &store.PortWatermark{Projector: "p", Stream: "s"}
	var world store.PortRecord
	for _, r := range recs {
		if r.Kind == store.PortKindWorld {
			world = r
		}
	}
	state := store.PortRecord{Format: store.PortFormat, Kind: store.PortKindEffect, Effect: &store.PortEffect{
		Seq: 1, IntentHash: "i-bogus", World: world.World.ID, Kind: effectKind, State: "bogus", EnqueuedAt: time.Unix(1, 0)}}
	err := im.Import(bg, []store.PortRecord{world, state})
	wantErr(t, err, store.ErrInvalid, "Import of an effect in a state the target does not know")
	orphan := store.PortRecord{Format: store.PortFormat, Kind: store.PortKindInbox, Inbox: &store.PortInboxItem{
		World: "w-nowhere", Seq: 1, Kind: "event", EnqueuedAt: time.Unix(1, 0)}}
	err = im.Import(bg, []store.PortRecord{world, orphan})
	wantErr(t, err, store.ErrWorldNotFound, "Import of an inbox item of a world neither the target nor the batch holds")
	queue := store.PortRecord{Format: store.PortFormat, Kind: store.PortKindQueue, Queue: &store.PortQueue{Name: "q"}}
	entry := store.PortQueuedRun{Queue: "q", Run: world.World.ID, Seq: 1, EnqueuedAt: time.Unix(1, 0).UTC()}
	queued := func(change func(e *store.PortQueuedRun)) store.PortRecord {
		e := entry
		change(&e)
		return store.PortRecord{Format: store.PortFormat, Kind: store.PortKindQueuedRun, QueuedRun: &e}
	}
	admission := func(a store.PortAdmission) store.PortRecord {
		return store.PortRecord{Format: store.PortFormat, Kind: store.PortKindAdmission, Admission: &a}
	}
	noQueue := queued(func(e *store.PortQueuedRun) { e.Queue = "q-nowhere" })
	err = im.Import(bg, []store.PortRecord{world, queue, noQueue})
	wantErr(t, err, store.ErrNotFound, "Import of a queued run of a queue neither the target nor the batch holds")
	noRun := queued(func(e *store.PortQueuedRun) { e.Run = "w-nowhere" })
	err = im.Import(bg, []store.PortRecord{world, queue, noRun})
	wantErr(t, err, store.ErrWorldNotFound, "Import of a queued run of a world neither the target nor the batch holds")
	for name, bad := range map[string]store.PortRecord{"a later format": future, "an unknown kind": unknown,
		"a kind without its field": missing, "two fields": two,
		"a queue with a negative limit": {Format: store.PortFormat, Kind: store.PortKindQueue,
			Queue: &store.PortQueue{Name: "q", Concurrency: -1}},
		"a queue with a rate limit and no period": {Format: store.PortFormat, Kind: store.PortKindQueue,
			Queue: &store.PortQueue{Name: "q", RateLimit: 2}},
		"a queued run without a seq":        queued(func(e *store.PortQueuedRun) { e.Seq = 0 }),
		"a queued run without a queue":      queued(func(e *store.PortQueuedRun) { e.Queue = "" }),
		"a queued run admitted at no time":  queued(func(e *store.PortQueuedRun) { e.Worker = "node-a" }),
		"a queued run admitted by nobody":   queued(func(e *store.PortQueuedRun) { e.AdmittedAt = time.Unix(2, 0).UTC() }),
		"a queued run of a priority beyond": queued(func(e *store.PortQueuedRun) { e.Priority = store.MaxPriority + 1 }),
		"an admission counting none":        admission(store.PortAdmission{Queue: "q", At: time.Unix(1, 0).UTC()}),
		"an admission at no time":           admission(store.PortAdmission{Queue: "q", Count: 1}),
	} {
		if bad.Kind == store.PortKindQueuedRun || bad.Kind == store.PortKindAdmission {
			err := im.Import(bg, append(append([]store.PortRecord{}, recs...), queue, bad))
			wantErr(t, err, store.ErrInvalid, "Import of "+name)
			continue
		}
		err := im.Import(bg, append(append([]store.PortRecord{}, recs...), bad))
		wantErr(t, err, store.ErrInvalid, "Import of "+name)
	}
	if empty, err := im.Empty(bg); err != nil || !empty {
		t.Errorf("Empty after refused batches = %v, %v; want true (nothing written)", empty, err)
	}
}

// testPortConsistent exports while another goroutine runs world cycles
// (enqueue, a Commit that drains, journals and publishes, a completion
// whose receipt enters the inbox), imports the export, and checks what a
// torn read would break.
func testPortConsistent(t *testing.T, from, to Factory) {
	src := setup(t, from)
	const worlds = 3
	epochs := make([]uint64, worlds)
	for i := range epochs {
		epochs[i] = src.leased(fmt.Sprintf("w%d", i), "node-a")
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	cycles := make(chan int, 1024)
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := src.s
		for n := 0; ctx.Err() == nil; n++ {
			w := fmt.Sprintf("w%d", n%worlds)
			e := epochs[n%worlds]
			seq, _, err := s.Enqueue(ctx, w, store.InboxItem{Kind: vocab.KindEvent, DedupeKey: fmt.Sprint("k", n), Payload: []byte{1}})
			if err == nil {
				var cur, head uint64
				if cur, err = s.Cursor(ctx, w); err == nil {
					if head, err = s.Head(ctx, w); err == nil {
						h := fmt.Sprintf("i%d", n)
						_, err = s.Commit(ctx, w, e, store.CommitBatch{ExpectedCursor: cur, NewCursor: seq, ExpectedHead: head,
							Entries: []store.Record{rec(fmt.Sprint(n))}, Intents: intents(h)})
						if err == nil {
							var items []vocab.EffectItem
							if items, err = s.Claim(ctx, "fx", []string{effectKind}, 1, time.Hour); err == nil && len(items) == 1 {
								_, _, err = s.Complete(ctx, items[0].IntentHash, items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
							}
						}
					}
				}
			}
			if err != nil {
				if ctx.Err() == nil {
					runErr = err
				}
				return
			}
			select {
			case cycles <- n:
			default:
			}
		}
	}()
	// Export once the writer has run, while it runs.
	for range 10 {
		<-cycles
	}
	// At each kind's first record the export lets the writer run a cycle
	// (a backend whose export shuts writers out until it ends, as
	// memstore's lock does, gets none: the wait gives up after a bounded
	// number of yields), so a read that was not one snapshot shows it.
	ex, _ := porter(t, src.s)
	var recs []store.PortRecord
	must(t, ex.Export(bg, func(r store.PortRecord) error {
		if len(recs) == 0 || recs[len(recs)-1].Kind != r.Kind {
			letRun(cycles)
		}
		recs = append(recs, r)
		return nil
	}), "Export")
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("writer: %v", runErr)
	}
	dst := setup(t, to)
	importAll(t, dst.s, recs, 50)
	got := exportAll(t, dst.s)

	lastEvent := map[string]uint64{}
	heads := map[string]uint64{}
	inbox := map[string]map[uint64]bool{}
	ws := map[string]store.PortWorld{}
	keys, effects := map[string]bool{}, map[string]bool{}
	for _, r := range got {
		switch r.Kind {
		case store.PortKindWorld:
			ws[r.World.ID] = *r.World
			inbox[r.World.ID] = map[uint64]bool{}
		case store.PortKindStream:
			heads[r.Stream.Stream] = r.Stream.Head
		case store.PortKindEvent:
			lastEvent[r.Event.StreamID] = max(lastEvent[r.Event.StreamID], r.Event.RunSeq)
			keys[r.Event.IdempotencyKey] = true
		case store.PortKindInbox:
			inbox[r.Inbox.World][r.Inbox.Seq] = true
		case store.PortKindEffect:
			e := r.Effect
			effects[e.IntentHash] = true
			if e.State == string(vocab.EffectDone) && (e.InboxSeq == nil || !inbox[e.World][*e.InboxSeq]) {
				var seq uint64
				if e.InboxSeq != nil {
					seq = *e.InboxSeq
				}
				t.Errorf("done effect %s: its receipt's inbox item %d is not in the copy", e.IntentHash, seq)
			}
		}
	}
	// Cycle n journals key-n and publishes in in one Commit: the copy
	// holds both or neither.
	for k := range keys {
		if h := "i" + k[len("key-"):]; !effects[h] {
			t.Errorf("event %s is in the copy, its Commit's intent %s is not", k, h)
		}
	}
	for h := range effects {
		if k := "key-" + h[1:]; !keys[k] {
			t.Errorf("intent %s is in the copy, its Commit's event %s is not", h, k)
		}
	}
	for id, w := range ws {
		if heads[id] != lastEvent[id] {
			t.Errorf("world %s: head %d, last event %d", id, heads[id], lastEvent[id])
		}
		if w.InboxCursor > w.LastSeq || !inbox[id][w.LastSeq] && w.LastSeq > 0 {
			t.Errorf("world %s: cursor %d, last seq %d, inbox has it: %v", id, w.InboxCursor, w.LastSeq, inbox[id][w.LastSeq])
		}
		if n := uint64(len(inbox[id])); n != w.LastSeq {
			t.Errorf("world %s: %d inbox items, last seq %d", id, n, w.LastSeq)
		}
	}
}

// letRun waits for the writer's next cycle, yielding at most a bounded
// number of times (never a timed wait): a writer the export holds back
// never signals.
func letRun(cycles <-chan int) {
	for drained := false; !drained; {
		select {
		case <-cycles:
		default:
			drained = true
		}
	}
	for range 20000 {
		select {
		case <-cycles:
			return
		default:
			runtime.Gosched()
		}
	}
}

func testPortEmitError(t *testing.T, from, _ Factory) {
	src := setup(t, from)
	src.world("w-a")
	src.world("w-b")
	ex, _ := porter(t, src.s)
	stop := errors.New("the target is full")
	calls := 0
	err := ex.Export(bg, func(store.PortRecord) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("Export whose emit fails = %v after %d calls, want the emit's error after 1", err, calls)
	}
	// The store still serves.
	src.world("w-c")
}

// exportJSON is a store's export, one JSON record a line.
func exportJSON(t testing.TB, s store.Store) []string {
	t.Helper()
	var out []string
	for _, r := range exportAll(t, s) {
		out = append(out, portJSON(t, r))
	}
	return out
}

func sameExport(t testing.TB, what string, want, got []string) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: the target exports %d records, %d before", what, len(got), len(want))
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Errorf("%s: record %d:\n before %s\n after  %s", what, i, want[i], got[i])
		}
	}
}

// testPortAgain: a batch whose commit landed but whose answer was lost is
// sent again; it succeeds and changes nothing. A record whose key the
// target holds with anything else stays a conflict, and its batch writes
// nothing.
func testPortAgain(t *testing.T, from, to Factory) {
	src := setup(t, from)
	portFill(t, src)
	recs := exportAll(t, src.s)
	dst := setup(t, to)
	_, im := porter(t, dst.s)
	importAll(t, dst.s, recs, 5)
	before := exportJSON(t, dst.s)

	// The target's clock moves on: a lease the import brought back to its
	// clock, and an archived world's effect it withdrew at it, were
	// written at an earlier time than the one a second import reads.
	dst.advance(time.Minute)
	for i := 0; i < len(recs); i += 5 {
		must(t, im.Import(bg, recs[i:min(i+5, len(recs))]), fmt.Sprintf("Import again of records %d…", i))
	}
	must(t, im.Import(bg, recs), "Import again of the whole export in one batch")
	must(t, im.FinishImport(bg), "FinishImport again")
	sameExport(t, "after importing every record again", before, exportJSON(t, dst.s))

	// One record changed, each kind in turn, in a batch with a new world:
	// ErrConflict, nothing of the batch written.
	fresh := store.PortRecord{Format: store.PortFormat, Kind: store.PortKindWorld,
		World: &store.PortWorld{ID: "w-new", Universe: "u", Status: store.WorldActive, CreatedAt: time.Unix(100, 0).UTC()}}
	changed := map[store.PortKind]func(r *store.PortRecord){
		store.PortKindWorld:    func(r *store.PortRecord) { w := *r.World; w.StatusReason += " (another)"; r.World = &w },
		store.PortKindStream:   func(r *store.PortRecord) { x := *r.Stream; x.Head++; r.Stream = &x },
		store.PortKindEvent:    func(r *store.PortRecord) { e := *r.Event; e.Payload = append([]byte("x"), e.Payload...); r.Event = &e },
		store.PortKindEventKey: func(r *store.PortRecord) { k := *r.EventKey; k.EventID += "x"; r.EventKey = &k },
		store.PortKindSnapshot: func(r *store.PortRecord) { n := *r.Snapshot; n.StateHash += "x"; r.Snapshot = &n },
		store.PortKindInbox:    func(r *store.PortRecord) { i := *r.Inbox; i.Kind += "x"; r.Inbox = &i },
		store.PortKindDrain:    func(r *store.PortRecord) { d := *r.Drain; d.DrainedAt = d.DrainedAt.Add(time.Second); r.Drain = &d },
		store.PortKindLease:    func(r *store.PortRecord) { l := *r.Lease; l.Epoch++; r.Lease = &l },
		store.PortKindAssignment: func(r *store.PortRecord) {
			a := *r.Assignment
			a.Priority++
			r.Assignment = &a
		},
		store.PortKindEffect:    func(r *store.PortRecord) { e := *r.Effect; e.Attempts++; r.Effect = &e },
		store.PortKindTimer:     func(r *store.PortRecord) { x := *r.Timer; x.Payload = []byte("other"); r.Timer = &x },
		store.PortKindFabric:    func(r *store.PortRecord) { f := *r.Fabric; f.Seq++; r.Fabric = &f },
		store.PortKindWatermark: func(r *store.PortRecord) { m := *r.Watermark; m.Value++; r.Watermark = &m },
		store.PortKindSchedule:  func(r *store.PortRecord) { x := *r.Schedule; x.Version++; r.Schedule = &x },
		store.PortKindQueue:     func(r *store.PortRecord) { x := *r.Queue; x.Concurrency++; r.Queue = &x },
		store.PortKindQueuedRun: func(r *store.PortRecord) { x := *r.QueuedRun; x.Priority++; r.QueuedRun = &x },
		store.PortKindAdmission: func(r *store.PortRecord) { x := *r.Admission; x.Count++; r.Admission = &x },
	}
	tried := map[store.PortKind]bool{}
	for _, r := range recs {
		change, ok := changed[r.Kind]
		if !ok || tried[r.Kind] {
			continue
		}
		tried[r.Kind] = true
		change(&r)
		err := im.Import(bg, []store.PortRecord{fresh, r})
		wantErr(t, err, store.ErrConflict, "Import of a changed "+string(r.Kind)+" record")
		if _, err := dst.s.GetWorld(bg, "w-new"); !errors.Is(err, store.ErrWorldNotFound) {
			t.Errorf("GetWorld w-new after the refused batch with a changed %s: %v, want ErrWorldNotFound", r.Kind, err)
		}
	}
	for k := range changed {
		if !tried[k] {
			t.Errorf("the export holds no %s record to change", k)
		}
	}
	sameExport(t, "after the refused batches", before, exportJSON(t, dst.s))
}

// testPortResume: an import that stopped after some batches (each one
// transaction), run again from its first record, ends with the target one
// import would have made.
func testPortResume(t *testing.T, from, to Factory) {
	src := setup(t, from)
	portFill(t, src)
	recs := exportAll(t, src.s)
	whole := setup(t, to)
	importAll(t, whole.s, recs, 7)
	want := exportJSON(t, whole.s)
	archived := map[string]bool{}
	for _, r := range recs {
		if r.Kind == store.PortKindWorld && r.World.Status == store.WorldArchived {
			archived[r.World.ID] = true
		}
	}
	for _, stop := range []int{1, len(recs) / 3, len(recs) - 1} {
		t.Run(fmt.Sprintf("after%d", stop), func(t *testing.T) {
			dst := setup(t, to)
			_, im := porter(t, dst.s)
			for i := 0; i < stop; i += 7 {
				must(t, im.Import(bg, recs[i:min(i+7, stop)]), fmt.Sprintf("Import of records %d…", i))
			}
			// Run again with other batch bounds: a batch holds records
			// imported already and records not.
			importAll(t, dst.s, recs, 5)
			got := exportJSON(t, dst.s)
			if len(got) != len(want) {
				t.Fatalf("the resumed target exports %d records, one import %d", len(got), len(want))
			}
			for i := range want {
				if g, w := clockFree(t, got[i], archived), clockFree(t, want[i], archived); g != w {
					t.Errorf("record %d:\n one import %s\n resumed    %s", i, want[i], got[i])
				}
			}
		})
	}
}

// testPortResumeGrown: a copy run again after the source's world took
// input (its cursor still) imports the new items, and the target's next
// enqueue takes the seq after the highest of them, as the source's does:
// none collides with an imported item, and every one is read.
func testPortResumeGrown(t *testing.T, from, to Factory) {
	src := setup(t, from)
	src.world("w")
	for i := range 2 {
		src.enqueue("w", "event", fmt.Sprint("a", i), nil)
	}
	dst := setup(t, to)
	importAll(t, dst.s, exportAll(t, src.s), 7)
	for i := range 3 {
		src.enqueue("w", "event", fmt.Sprint("b", i), nil)
	}
	importAll(t, dst.s, exportAll(t, src.s), 7)
	want, _ := src.enqueue("w", "event", "next", nil)
	got, dup := dst.enqueue("w", "event", "next", nil)
	if dup || got != want {
		t.Fatalf("the resumed target's next enqueue took seq %d (duplicate %v), the source's %d", got, dup, want)
	}
	items, err := dst.s.ReadInbox(bg, "w", 0, 100)
	must(t, err, "ReadInbox")
	if len(items) != 6 {
		t.Fatalf("the resumed target's inbox holds %d items, want 6: %+v", len(items), items)
	}
}

// clockFree is an exported record's JSON without what an import takes
// from the target's clock, which two imports read at different times: a
// released lease's expiry, an archived world's withdrawn effect's
// completion time (each must be set).
func clockFree(t testing.TB, j string, archived map[string]bool) string {
	t.Helper()
	var r store.PortRecord
	must(t, json.Unmarshal([]byte(j), &r), "json.Unmarshal")
	switch {
	case r.Kind == store.PortKindLease:
		if r.Lease.ExpiresAt.IsZero() {
			t.Errorf("lease of %s: no expiry", r.Lease.World)
		}
		r.Lease.ExpiresAt = time.Time{}
	case r.Kind == store.PortKindEffect && archived[r.Effect.World] && r.Effect.State == string(vocab.EffectWithdrawn):
		if r.Effect.CompletedAt == nil {
			t.Errorf("withdrawn effect %s: no completion time", r.Effect.IntentHash)
		}
		r.Effect.CompletedAt = nil
	}
	return portJSON(t, r)
}
