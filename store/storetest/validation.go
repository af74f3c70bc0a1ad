package storetest

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// One validation (issue 7 item 7): every backend runs store/validate.go
// before it writes, so the same bad input gets the same verdict everywhere:
// an *store.Error of kind ErrInvalid, and nothing written. The table runs
// each kind of bad value through every write API that takes one, with
// every other argument valid (the world exists and is leased, the claim is
// real), so that the only possible answer is ErrInvalid.
func validationTests() []testCase {
	return []testCase{
		{"BadInputIsErrInvalidOnEveryWriteAPIAndWritesNothing", testBadInputEverywhere},
		{"OriginOfTheLongestWorldIDAndHeightIsAccepted", testLongestOrigin},
	}
}

// badStrings are identifier values every check refuses.
var badStrings = map[string]string{
	"invalid UTF-8": "w\xff",
	"NUL":           "w\x00x",
	"over-long id":  strings.Repeat("i", store.MaxIDBytes+1),
	"empty (id)":    "",
	"surrogate":     "\xed\xa0\x80", // U+D800 encoded: not valid UTF-8
}

func testBadInputEverywhere(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1", "i2")
	ic := f.claimOne("adapter", "i1").ClaimOf()
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
	f.advance(margin)
	tc := f.claimTimer("tw", "t1").ClaimOf()
	_, err := f.s.Heartbeat(bg, "A", 4)
	must(t, err, "Heartbeat")
	f.append("run-1", freeOpts, "a")
	f.enqueue("w", "event", "k", nil)
	f.world("free") // acquirable: a refused AcquireLeases must not take it
	fp := f.fingerprint()

	bigPayload := make([]byte, store.MaxPayloadBytes+1)
	longKey := strings.Repeat("k", store.MaxKeyBytes+1)
	longReason := strings.Repeat("r", store.MaxReasonBytes+1)
	const huge = uint64(math.MaxInt64) + 1

	type call struct {
		what string
		do   func() error
	}
	var calls []call
	add := func(what string, do func() error) { calls = append(calls, call{what, do}) }
	appendRec := func(what string, mutate func(*store.Record)) {
		r := rec("bad")
		mutate(&r)
		add("Append: "+what, func() error {
			_, err := f.s.Append(bg, "w", []store.Record{rec("good"), r}, fenced("w", e))
			return err
		})
		add("free Append: "+what, func() error {
			_, err := f.s.Append(bg, "run-1", []store.Record{r}, freeOpts)
			return err
		})
		add("Commit entry: "+what, func() error {
			_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, Entries: []store.Record{r}})
			return err
		})
		add("DrainToJournal entry: "+what, func() error {
			_, err := f.s.DrainToJournal(bg, "w", e, 0, 1, 0, []store.Record{r})
			return err
		})
		add("Spawn event: "+what, func() error {
			_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Holder: "A", TTL: leaseTTL,
				Events: []store.Record{rec("good"), r}})
			return err
		})
	}

	for name, bad := range sortedMap(badStrings) {
		appendRec("eventId "+name, func(r *store.Record) { r.EventID = bad })
		if len(bad) <= store.MaxIDBytes { // a key may be longer than an id (see longKey)
			appendRec("idempotencyKey "+name, func(r *store.Record) { r.IdempotencyKey = bad })
		}
		appendRec("eventType "+name, func(r *store.Record) { r.EventType = bad })
		if bad != "" { // optional fields may be empty
			appendRec("stepId "+name, func(r *store.Record) { r.StepID = bad })
			appendRec("planId "+name, func(r *store.Record) { r.PlanID = bad })
		}
		add("Append to stream "+name, func() error {
			_, err := f.s.Append(bg, bad, []store.Record{rec("x")}, freeOpts)
			return err
		})
		add("Enqueue to world "+name, func() error {
			_, _, err := f.s.Enqueue(bg, bad, store.InboxItem{Kind: "event"})
			return err
		})
		add("Enqueue kind "+name, func() error {
			_, _, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: bad})
			return err
		})
		add("Publish intent hash "+name, func() error {
			_, err := f.s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: bad, Kind: effectKind}})
			return err
		})
		add("Publish kind "+name, func() error {
			_, err := f.s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "new", Kind: bad}})
			return err
		})
		add("Commit intent "+name, func() error {
			_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, Intents: []vocab.Intent{{IntentHash: bad, Kind: effectKind}}})
			return err
		})
		add("Commit timer "+name, func() error {
			_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, Timers: []vocab.TimerSet{{IntentHash: bad, DeliverAt: f.now()}}})
			return err
		})
		add("Commit cancel "+name, func() error {
			_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, CancelTimers: []string{bad}})
			return err
		})
		add("Commit snapshot hash "+name, func() error {
			_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, Snapshot: &store.Snapshot{Height: 1, StateHash: bad}})
			return err
		})
		add("Schedule "+name, func() error { return f.s.Schedule(bg, "w", e, bad, f.now(), nil) })
		add("CancelTimer "+name, func() error { return f.s.CancelTimer(bg, "w", e, bad) })
		add("Claim worker "+name, func() error {
			_, err := f.s.Claim(bg, bad, []string{effectKind}, 1, claimTTL)
			return err
		})
		add("Claim kind "+name, func() error {
			_, err := f.s.Claim(bg, "adapter", []string{effectKind, bad}, 1, claimTTL)
			return err
		})
		add("ClaimDue worker "+name, func() error {
			_, err := f.s.ClaimDue(bg, bad, 1, claimTTL)
			return err
		})
		add("Complete hash "+name, func() error {
			_, _, err := f.s.Complete(bg, bad, ic, vocab.Receipt{Status: vocab.ReceiptOK})
			return err
		})
		add("Complete claim worker "+name, func() error {
			_, _, err := f.s.Complete(bg, "i1", vocab.Claim{Worker: bad, Attempt: ic.Attempt}, vocab.Receipt{Status: vocab.ReceiptOK})
			return err
		})
		add("Fire hash "+name, func() error {
			_, _, err := f.s.Fire(bg, bad, tc)
			return err
		})
		add("Fire claim worker "+name, func() error {
			_, _, err := f.s.Fire(bg, "t1", vocab.Claim{Worker: bad, Attempt: tc.Attempt})
			return err
		})
		// t1 is due: FireHeld with valid arguments would fire it.
		add("FireHeld world "+name, func() error {
			_, err := f.s.FireHeld(bg, bad, e, "t1")
			return err
		})
		add("FireHeld hash "+name, func() error {
			_, err := f.s.FireHeld(bg, "w", e, bad)
			return err
		})
		add("Send dest "+name, func() error {
			_, err := f.s.Send(bg, bad, "m", store.InboxItem{})
			return err
		})
		add("Send message id "+name, func() error {
			_, err := f.s.Send(bg, "w", bad, store.InboxItem{})
			return err
		})
		add("PutSnapshot hash "+name, func() error {
			return f.s.PutSnapshot(bg, "w", e, store.Snapshot{Height: 1, StateHash: bad})
		})
		add("CreateWorld id "+name, func() error {
			_, err := f.s.CreateWorld(bg, universe, bad, nil)
			return err
		})
		add("CreateWorld universe "+name, func() error {
			_, err := f.s.CreateWorld(bg, bad, "new", nil)
			return err
		})
		add("Spawn world "+name, func() error {
			_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: bad, Holder: "A", TTL: leaseTTL})
			return err
		})
		add("Spawn universe "+name, func() error {
			_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: bad, World: "new", Holder: "A", TTL: leaseTTL})
			return err
		})
		add("Spawn item kind "+name, func() error {
			_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Items: []store.InboxItem{{Kind: "event"}, {Kind: bad}}})
			return err
		})
		if bad != "" { // no holder is the empty holder
			add("Spawn holder "+name, func() error {
				_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Holder: bad, TTL: leaseTTL})
				return err
			})
		}
		add("ForkWorld new id "+name, func() error {
			_, err := f.s.ForkWorld(bg, "w", 0, bad)
			return err
		})
		add("Acquire worker "+name, func() error {
			_, err := f.s.Acquire(bg, "w", bad, leaseTTL)
			return err
		})
		add("Renew worker "+name, func() error {
			_, err := f.s.Renew(bg, "w", bad, e, leaseTTL)
			return err
		})
		add("Release worker "+name, func() error { return f.s.Release(bg, "w", bad, e) })
		add("RenewLeases ref "+name, func() error {
			_, err := f.s.RenewLeases(bg, "A", []store.LeaseRef{{World: "w", Epoch: e}, {World: bad, Epoch: 1}}, leaseTTL)
			return err
		})
		add("AcquireLeases world "+name, func() error {
			_, err := f.s.AcquireLeases(bg, "B", []string{"free", bad}, leaseTTL)
			return err
		})
		add("AcquireLeases worker "+name, func() error {
			_, err := f.s.AcquireLeases(bg, bad, []string{"free"}, leaseTTL)
			return err
		})
		add("ReleaseLeases ref "+name, func() error {
			_, err := f.s.ReleaseLeases(bg, "A", []store.LeaseRef{{World: "w", Epoch: e}, {World: bad, Epoch: 1}})
			return err
		})
		if bad != "" { // an assignment may name no worker
			add("Assign worker "+name, func() error {
				return f.s.Assign(bg, "w", store.Assignment{DesiredWorker: bad}, nil)
			})
		}
		add("Heartbeat "+name, func() error {
			_, err := f.s.Heartbeat(bg, bad, 1)
			return err
		})
		add("SetDraining "+name, func() error {
			_, err := f.s.SetDraining(bg, bad, true)
			return err
		})
		add("RetryEffect hash "+name, func() error {
			_, err := f.s.RetryEffect(bg, bad, "")
			return err
		})
		add("Resolve hash "+name, func() error {
			_, _, err := f.s.Resolve(bg, bad, vocab.Receipt{Status: vocab.ReceiptOK}, "")
			return err
		})
		if bad != "" && len(bad) <= store.MaxIDBytes { // a reason may be empty, and longer than an id (see longReason)
			add("Resolve reason "+name, func() error {
				_, _, err := f.s.Resolve(bg, "i1", vocab.Receipt{Status: vocab.ReceiptOK}, bad)
				return err
			})
		}
		add("CASWatermark projector "+name, func() error { return f.s.CASWatermark(bg, bad, "run-1", 0, 1) })
	}

	// Keys, payloads, integers, reasons, statuses, durations and batches.
	appendRec("over-long idempotencyKey", func(r *store.Record) { r.IdempotencyKey = longKey })
	appendRec("payload over MaxPayloadBytes", func(r *store.Record) { r.Payload = bigPayload })
	appendRec("logicalAttemptId 2^63", func(r *store.Record) { r.LogicalAttemptID = huge })
	appendRec("engineAttemptId 2^63", func(r *store.Record) { r.EngineAttemptID = huge })
	appendRec("planVersion 2^63", func(r *store.Record) { r.PlanVersion = huge })
	appendRec("logicalAttemptId 0", func(r *store.Record) { r.LogicalAttemptID = 0 })
	add("Enqueue over-long dedupe key", func() error {
		_, _, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: longKey})
		return err
	})
	add("Enqueue dedupe key with NUL", func() error {
		_, _, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: "k\x00"})
		return err
	})
	add("Enqueue payload over MaxPayloadBytes", func() error {
		_, _, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event", Payload: bigPayload})
		return err
	})
	add("Publish params over MaxPayloadBytes", func() error {
		_, err := f.s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "new", Kind: effectKind, Params: bigPayload}})
		return err
	})
	add("Publish origin invalid UTF-8", func() error {
		_, err := f.s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "new", Kind: effectKind, Origin: "\xff"}})
		return err
	})
	add("Publish origin over MaxOriginBytes", func() error {
		_, err := f.s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "new", Kind: effectKind, Origin: strings.Repeat("o", store.MaxOriginBytes+1)}})
		return err
	})
	add("Schedule payload over MaxPayloadBytes", func() error { return f.s.Schedule(bg, "w", e, "new", f.now(), bigPayload) })
	add("Complete receipt over MaxReceiptBytes", func() error {
		_, _, err := f.s.Complete(bg, "i1", ic, vocab.Receipt{Status: vocab.ReceiptOK, Payload: make([]byte, store.MaxReceiptBytes+1)})
		return err
	})
	add("Complete unknown receipt status", func() error {
		_, _, err := f.s.Complete(bg, "i1", ic, vocab.Receipt{Status: "maybe"})
		return err
	})
	add("Complete claim attempt 0", func() error {
		_, _, err := f.s.Complete(bg, "i1", vocab.Claim{Worker: ic.Worker}, vocab.Receipt{Status: vocab.ReceiptOK})
		return err
	})
	add("Fire claim attempt 0", func() error {
		_, _, err := f.s.Fire(bg, "t1", vocab.Claim{Worker: tc.Worker})
		return err
	})
	add("FireHeld epoch 2^63", func() error {
		_, err := f.s.FireHeld(bg, "w", huge, "t1")
		return err
	})
	add("Send payload over MaxPayloadBytes", func() error {
		_, err := f.s.Send(bg, "w", "m", store.InboxItem{Payload: bigPayload})
		return err
	})
	add("PutSnapshot height 2^63", func() error {
		return f.s.PutSnapshot(bg, "w", e, store.Snapshot{Height: huge, StateHash: "h"})
	})
	add("CreateWorld seed height 2^63", func() error {
		_, err := f.s.CreateWorld(bg, universe, "new", &store.Snapshot{Height: huge, StateHash: "h"})
		return err
	})
	add("Commit newCursor below expectedCursor", func() error {
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedCursor: 1, NewCursor: 0, ExpectedHead: 1})
		return err
	})
	add("Commit expectedHead 2^63", func() error {
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: huge})
		return err
	})
	add("Append expectedHead 2^63", func() error {
		_, err := f.s.Append(bg, "run-1", []store.Record{rec("x")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(huge)})
		return err
	})
	add("SetWorldStatus over-long reason", func() error {
		_, err := f.s.SetWorldStatus(bg, "w", store.WorldPaused, longReason)
		return err
	})
	add("SetWorldStatus unknown status", func() error {
		_, err := f.s.SetWorldStatus(bg, "w", "fenced", "")
		return err
	})
	add("Commit status active", func() error {
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, Status: &store.StatusChange{Status: store.WorldActive}})
		return err
	})
	add("Commit status over-long reason", func() error {
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: 1, Status: &store.StatusChange{Status: store.WorldArchived, Reason: longReason}})
		return err
	})
	for _, c := range []struct {
		what string
		it   store.InboxItem
	}{
		{"reserved kind", store.InboxItem{Kind: vocab.KindReceipt}},
		{"reserved key prefix", store.InboxItem{Kind: "event", DedupeKey: store.TimerKeyPrefix + "x"}},
		{"payload over MaxPayloadBytes", store.InboxItem{Kind: "event", Payload: bigPayload}},
	} {
		add("Spawn item "+c.what, func() error {
			_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Items: []store.InboxItem{c.it}})
			return err
		})
	}
	add("Spawn repeated dedupe key", func() error {
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new",
			Items: []store.InboxItem{{Kind: "event", DedupeKey: "k"}, {Kind: "event", DedupeKey: "k"}}})
		return err
	})
	add("Spawn holder without TTL", func() error {
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Holder: "A"})
		return err
	})
	add("Spawn TTL without holder", func() error {
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", TTL: leaseTTL})
		return err
	})
	add("Spawn events without holder", func() error {
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Events: []store.Record{rec("x")}})
		return err
	})
	add("Spawn repeated event key", func() error {
		twin := rec("x")
		twin.EventID = "ev-twin"
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Holder: "A", TTL: leaseTTL,
			Events: []store.Record{rec("x"), twin}})
		return err
	})
	add("Spawn of more than MaxBatch events", func() error {
		evs := make([]store.Record, store.MaxBatch+1)
		for i := range evs {
			evs[i] = rec(fmt.Sprint(i))
		}
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "new", Holder: "A", TTL: leaseTTL, Events: evs})
		return err
	})
	add("Assign over-long reason", func() error {
		return f.s.Assign(bg, "w", store.Assignment{DesiredWorker: "A", Reason: longReason}, nil)
	})
	add("RetryEffect over-long reason", func() error {
		_, err := f.s.RetryEffect(bg, "i1", longReason)
		return err
	})
	add("Resolve receipt over MaxPayloadBytes", func() error {
		_, _, err := f.s.Resolve(bg, "i1", vocab.Receipt{Status: vocab.ReceiptOK, Payload: bigPayload}, "")
		return err
	})
	add("Resolve unknown receipt status", func() error {
		_, _, err := f.s.Resolve(bg, "i2", vocab.Receipt{Status: "maybe"}, "")
		return err
	})
	add("Resolve empty receipt status", func() error {
		_, _, err := f.s.Resolve(bg, "i2", vocab.Receipt{}, "")
		return err
	})
	add("Resolve over-long reason", func() error {
		_, _, err := f.s.Resolve(bg, "i2", vocab.Receipt{Status: vocab.ReceiptOK}, longReason)
		return err
	})
	for _, d := range []time.Duration{0, -time.Second, store.MaxTTL + time.Second} {
		add("Acquire ttl "+d.String(), func() error {
			_, err := f.s.Acquire(bg, "w", "A", d)
			return err
		})
		add("Renew ttl "+d.String(), func() error {
			_, err := f.s.Renew(bg, "w", "A", e, d)
			return err
		})
		add("RenewLeases ttl "+d.String(), func() error {
			_, err := f.s.RenewLeases(bg, "A", []store.LeaseRef{{World: "w", Epoch: e}}, d)
			return err
		})
		add("AcquireLeases ttl "+d.String(), func() error {
			_, err := f.s.AcquireLeases(bg, "A", []string{"free"}, d)
			return err
		})
		add("Claim ttl "+d.String(), func() error {
			_, err := f.s.Claim(bg, "adapter", []string{effectKind}, 1, d)
			return err
		})
		add("ClaimDue ttl "+d.String(), func() error {
			_, err := f.s.ClaimDue(bg, "tw", 1, d)
			return err
		})
	}
	for _, n := range []int{-1, store.MaxBatch + 1} {
		add("Claim n out of range", func() error {
			_, err := f.s.Claim(bg, "adapter", []string{effectKind}, n, claimTTL)
			return err
		})
		add("ClaimDue n out of range", func() error {
			_, err := f.s.ClaimDue(bg, "tw", n, claimTTL)
			return err
		})
	}
	add("AcquireLeases of more than MaxBatch worlds", func() error {
		ws := make([]string, store.MaxBatch+1)
		for i := range ws {
			ws[i] = "free"
		}
		_, err := f.s.AcquireLeases(bg, "A", ws, leaseTTL)
		return err
	})
	add("Append of more than MaxBatch events", func() error {
		evs := make([]store.Record, store.MaxBatch+1)
		for i := range evs {
			evs[i] = rec("many")
		}
		_, err := f.s.Append(bg, "run-1", evs, freeOpts)
		return err
	})

	for _, c := range calls {
		wantErr(t, c.do(), store.ErrInvalid, c.what)
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused calls wrote:\nbefore %s\nafter  %s", fp, after)
	}
	if h, evs := f.head("new"), f.read("new"); h != 0 || len(evs) != 0 {
		t.Fatalf("refused calls left head %d and events %v on the id of no world", h, eventIDs(evs))
	}
}

// fingerprint renders everything the validation table could have written.
func (f *fx) fingerprint() string {
	f.t.Helper()
	worlds, err := f.s.ListWorlds(bg, universe, "")
	must(f.t, err, "ListWorlds")
	out := ""
	for _, w := range worlds {
		l, _, err := f.s.GetLease(bg, w.ID)
		must(f.t, err, "GetLease")
		a, _, err := f.s.GetAssignment(bg, w.ID)
		must(f.t, err, "GetAssignment")
		effects, err := f.s.ListEffects(bg, w.ID, 0, 1000)
		must(f.t, err, "ListEffects")
		timers, err := f.s.ListTimers(bg, w.ID, 1000)
		must(f.t, err, "ListTimers")
		out += fmt.Sprintf("%s %s lease=%s/%d/%v assign=%+v effects=%s timers=%s\n", f.worldState(w.ID), w.StatusReason,
			l.Holder, l.Epoch, l.ExpiresAt.UnixNano(), a, effectsSummary(effects), timersSummary(timers))
	}
	workers, err := f.s.ListWorkers(bg)
	must(f.t, err, "ListWorkers")
	depths, err := f.s.QueueDepths(bg)
	must(f.t, err, "QueueDepths")
	wm, err := f.s.GetWatermark(bg, "p", "run-1")
	must(f.t, err, "GetWatermark")
	return out + fmt.Sprintf("run-1=%v workers=%+v depths=%+v watermark=%d", eventIDs(f.read("run-1")), workers, depths, wm)
}

func effectsSummary(items []vocab.EffectItem) string {
	out := ""
	for _, it := range items {
		out += fmt.Sprintf("[%s %s %s#%d r%d]", it.IntentHash, it.State, it.ClaimedBy, it.Attempt, it.Retries)
	}
	return out
}

func timersSummary(items []store.TimerItem) string {
	out := ""
	for _, it := range items {
		out += fmt.Sprintf("[%s %s %s#%d %d]", it.IntentHash, it.State, it.ClaimedBy, it.Attempt, it.DeliverAt.UnixNano())
	}
	return out
}

// sortedMap iterates m in key order (observable order never depends on
// map iteration).
func sortedMap(m map[string]string) func(yield func(string, string) bool) {
	return func(yield func(string, string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// testLongestOrigin: an intent's origin is "world@height", so a world with
// an id of MaxIDBytes at the largest height must still be able to commit
// its effects; a limit of MaxIDBytes on the origin would refuse every
// commit of such a world's effects for ever.
func testLongestOrigin(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	origin := strings.Repeat("w", store.MaxIDBytes) + "@" + fmt.Sprint(uint64(math.MaxUint64))
	if len(origin) != store.MaxOriginBytes {
		t.Fatalf("the longest origin is %d bytes, MaxOriginBytes %d", len(origin), store.MaxOriginBytes)
	}
	_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: f.head("w"),
		Intents: []vocab.Intent{{IntentHash: "long", Kind: effectKind, Origin: origin}}})
	must(t, err, "Commit of an intent with the longest origin")
	effs, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(effs) != 1 || effs[0].Origin != origin {
		t.Fatalf("effects %+v, want the one with the longest origin", effs)
	}
}
