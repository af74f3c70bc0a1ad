//go:build unix

package main

// The chaos checker's checks, each shown to fail on a history or a
// database that breaks its promise and to pass on one that keeps it. They
// need no database: the worlds are built here, in the shape readDB
// decodes.

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

func cborOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tallyWorld is a tally world whose journal holds an Add of each key (at
// inbox seqs 1…) and then a Get call answered with the state.
func tallyWorld(t *testing.T, id string, addKeys ...string) (*dbWorld, []ackOp, callOp) {
	w := &dbWorld{ID: id, Universe: clusterUniverse, Inbox: map[uint64]string{}}
	var acks []ackOp
	for i, k := range addKeys {
		seq := uint64(i + 1)
		w.Inbox[seq] = k
		w.Records = append(w.Records, dbRecord{Height: seq, Seq: seq, Kind: "event", Type: Add{}.WorldType(), Outcome: "ok", Value: cborOf(t, Add{Key: k})})
		acks = append(acks, ackOp{World: id, Kind: "add", Key: k, Seq: seq})
	}
	seq := uint64(len(addKeys) + 1)
	reply := cborOf(t, summary{Adds: len(addKeys)})
	w.Inbox[seq] = "call:get-1"
	w.Records = append(w.Records, dbRecord{Height: seq, Seq: seq, Kind: "call", Type: Get{}.WorldType(), CallID: "get-1", Outcome: "ok", ReplyHash: hashOf(reply), Value: cborOf(t, Get{})})
	w.Head, w.Cursor, w.Last = seq, seq, seq
	return w, acks, callOp{World: id, Kind: "get", CallID: "get-1", Chosen: true, Attempt: "get-1", ReplyCBOR: reply}
}

func judgeTally(t *testing.T, ws map[string]*dbWorld, acks []ackOp, calls []callOp) (*verdict, int, int) {
	t.Helper()
	red := map[string]*reduced{}
	for id, w := range ws {
		r, err := reduce(w)
		if err != nil {
			t.Fatal(err)
		}
		red[id] = r
	}
	v := newVerdict()
	checkJournals(ws, v)
	lost, dup := checkAcks(ws, red, acks, calls, v)
	checkReplies(ws, red, calls, v)
	return v, lost, dup
}

func wantClean(t *testing.T, v *verdict) {
	t.Helper()
	if v.failed() {
		t.Fatalf("a sound history failed the checks:\n%s", v.table())
	}
}

func wantFail(t *testing.T, v *verdict, check string) {
	t.Helper()
	if len(v.violations[check]) == 0 {
		t.Fatalf("check %q passed, want it to fail:\n%s", check, v.table())
	}
}

func TestChaosCheckerPassesSoundHistory(t *testing.T) {
	w, acks, call := tallyWorld(t, "c00", "a", "b")
	v, lost, dup := judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantClean(t, v)
	if lost != 0 || dup != 0 {
		t.Fatalf("lost %d, duplicated %d, want 0 and 0", lost, dup)
	}
}

func TestChaosCheckerCatchesLostAck(t *testing.T) {
	w, acks, call := tallyWorld(t, "c00", "a", "b")
	// The API acknowledged "c" at seq 9, which the inbox never got.
	acks = append(acks, ackOp{World: "c00", Kind: "add", Key: "c", Seq: 9})
	v, lost, _ := judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkAckedOnce)
	if lost != 1 {
		t.Fatalf("lost %d, want 1", lost)
	}
	// In the inbox but never journaled.
	w, acks, call = tallyWorld(t, "c00", "a", "b")
	w.Inbox[9] = "c"
	acks = append(acks, ackOp{World: "c00", Kind: "add", Key: "c", Seq: 9})
	v, lost, _ = judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkAckedOnce)
	if lost != 1 {
		t.Fatalf("lost %d, want 1", lost)
	}
}

func TestChaosCheckerCatchesDuplicate(t *testing.T) {
	w, acks, call := tallyWorld(t, "c00", "a", "b")
	// The item of "a" drained a second time, at a new height.
	dupRec := w.Records[0]
	dupRec.Height = uint64(len(w.Records) + 1)
	w.Records = append(w.Records, dupRec)
	w.Head = dupRec.Height
	v, _, dup := judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkDrainedOnce)
	wantFail(t, v, chkAckedOnce)
	if dup < 1 {
		t.Fatalf("duplicated %d, want at least 1", dup)
	}
	// The same key enqueued twice under two seqs (dedupe lost) and both
	// journaled: the reduction counts it twice.
	w, acks, call = tallyWorld(t, "c00", "a")
	w.Inbox[5] = "a"
	w.Records = append(w.Records, dbRecord{Height: 3, Seq: 5, Kind: "event", Type: Add{}.WorldType(), Outcome: "ok", Value: cborOf(t, Add{Key: "a"})})
	w.Head = 3
	v, _, _ = judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkAckedOnce)
}

func TestChaosCheckerCatchesWrongReply(t *testing.T) {
	w, acks, call := tallyWorld(t, "c00", "a", "b")
	// Another call's reply (the state before "b"), journaled as such.
	call.ReplyCBOR = cborOf(t, summary{Adds: 1})
	w.Records[len(w.Records)-1].ReplyHash = hashOf(call.ReplyCBOR)
	v, _, _ := judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkReplies)
	// A reply that is not the one the journal recorded.
	w, acks, call = tallyWorld(t, "c00", "a", "b")
	call.ReplyCBOR = cborOf(t, summary{Adds: 7})
	v, _, _ = judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkReplies)
}

func TestChaosCheckerCatchesRepeatedCallID(t *testing.T) {
	w, acks, call := tallyWorld(t, "c00", "a")
	other := call
	other.Attempt = "get-2" // a second request answered under the same id
	v, _, _ := judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call, other})
	wantFail(t, v, chkCallIDs)
}

func TestChaosCheckerCatchesGap(t *testing.T) {
	w, acks, call := tallyWorld(t, "c00", "a", "b", "c")
	w.Records = append(w.Records[:1], w.Records[2:]...) // height 2 missing
	delete(w.Inbox, 2)
	acks = append(acks[:1], acks[2:]...)
	v, _, _ := judgeTally(t, map[string]*dbWorld{"c00": w}, acks, []callOp{call})
	wantFail(t, v, chkGapless)
}

// accountWorld builds an account's journal from (type, value) steps, all
// ok, each at its own inbox seq.
func accountWorld(t *testing.T, id string, steps ...any) *dbWorld {
	w := &dbWorld{ID: id, Universe: ledger.UniverseAccount, Inbox: map[uint64]string{}}
	for i, s := range steps {
		name, err := world.TypeName(s)
		if err != nil {
			t.Fatal(err)
		}
		h := uint64(i + 1)
		w.Records = append(w.Records, dbRecord{Height: h, Seq: h, Kind: "fabric", Type: name, Outcome: "ok", Value: cborOf(t, s)})
		w.Head = h
	}
	return w
}

func judgeMoney(t *testing.T, initial int64, ws ...*dbWorld) *verdict {
	t.Helper()
	m := map[string]*dbWorld{}
	red := map[string]*reduced{}
	for _, w := range ws {
		m[w.ID] = w
		r, err := reduce(w)
		if err != nil {
			t.Fatal(err)
		}
		red[w.ID] = r
	}
	v := newVerdict()
	checkMoney(m, red, initial, v)
	return v
}

func TestChaosCheckerMoney(t *testing.T) {
	open := ledger.Open{Owner: "o"}
	seed := ledger.Deposit{Amount: 100}
	// A transfer of 30 that completed: held, deposited, captured.
	a := accountWorld(t, "a0", open, seed, ledger.Hold{Transfer: "t1", Amount: 30}, ledger.Capture{Transfer: "t1"})
	b := accountWorld(t, "a1", open, seed, ledger.Deposit{Amount: 30})
	wantClean(t, judgeMoney(t, 200, a, b))

	// The deposit landed but the saga failed on an error receipt and
	// released the hold: money created.
	a = accountWorld(t, "a0", open, seed, ledger.Hold{Transfer: "t1", Amount: 30}, ledger.Release{Transfer: "t1"})
	wantFail(t, judgeMoney(t, 200, a, b), chkMoney)

	// The hold was placed but the saga failed as if it had not been,
	// without a release: a hold left open.
	a = accountWorld(t, "a0", open, seed, ledger.Hold{Transfer: "t1", Amount: 30})
	b = accountWorld(t, "a1", open, seed)
	v := judgeMoney(t, 200, a, b)
	wantFail(t, v, chkHolds)
	if len(v.violations[chkMoney]) != 0 {
		t.Fatalf("an open hold is not lost money (the balance counts it): %v", v.violations[chkMoney])
	}

	// A release that overtakes its hold voids it: nothing stays held.
	a = accountWorld(t, "a0", open, seed, ledger.Release{Transfer: "t1"}, ledger.Hold{Transfer: "t1", Amount: 30})
	wantClean(t, judgeMoney(t, 200, a, b))
}

func TestChaosCheckerEpochs(t *testing.T) {
	ok := []leaseObs{
		{At: 1, World: "c00", Holder: "w1", Epoch: 1},
		{At: 2, World: "c00", Holder: "", Epoch: 1},
		{At: 3, World: "c00", Holder: "w2", Epoch: 2},
	}
	v := newVerdict()
	checkEpochs(ok, v)
	wantClean(t, v)

	v = newVerdict()
	checkEpochs(append(ok, leaseObs{At: 4, World: "c00", Holder: "w3", Epoch: 1}), v)
	wantFail(t, v, chkEpochsRise)
	wantFail(t, v, chkOneHolder)
}

func TestChaosCheckerRestartEpoch(t *testing.T) {
	const s = int64(time.Second)
	sight := restartSight{Worker: "w1", KillNs: 100 * s, TTLNs: 5 * s, Before: map[string]int64{"c00": 3}, AtSecs: 10, Restart: 11}
	// The dead incarnation's lease, seen before it ran out, and the new
	// incarnation's at a new epoch: sound.
	obs := []leaseObs{
		{At: 11.5, World: "c00", Holder: "w1", Epoch: 3, ExpiresNs: 104 * s},
		{At: 16, World: "c00", Holder: "w1", Epoch: 4, ExpiresNs: 111 * s},
	}
	v := newVerdict()
	checkRestartEpochs([]restartSight{sight}, obs, v)
	wantClean(t, v)
	// The new incarnation renewing the old epoch.
	v = newVerdict()
	checkRestartEpochs([]restartSight{sight}, append(obs, leaseObs{At: 12, World: "c00", Holder: "w1", Epoch: 3, ExpiresNs: 107 * s}), v)
	wantFail(t, v, chkRestartEpoch)
}

// TestChaosCheckerDecodesTheJournal holds the checker's own decoding to
// what the project writes: a record stepped by the real kernel decodes to
// the input it ran, its call's reply hashes to the journaled hash, and the
// checker's reduction predicts that reply.
func TestChaosCheckerDecodesTheJournal(t *testing.T) {
	k := clusterDef().Kernel()
	inst, err := k.Replay("c00", world.Snapshot{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	add, err := world.EncodeEvent(Add{Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := inst.Step(world.Input{Seq: 1, Kind: vocab.KindEvent, Payload: add, EnqueuedAt: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	get, err := world.EncodeCall("call-1", Get{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := inst.Step(world.Input{Seq: 2, Kind: vocab.KindCall, Payload: get, EnqueuedAt: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	w := &dbWorld{ID: "c00", Universe: clusterUniverse, Inbox: map[uint64]string{1: "k1", 2: "call:call-1"}, Head: 2, Cursor: 2, Last: 2}
	for _, r := range []world.StepResult{r1, r2} {
		rec, err := decodeRecord(r.Record.RunSeq, r.Record.Payload)
		if err != nil {
			t.Fatal(err)
		}
		w.Records = append(w.Records, rec)
	}
	if got := w.Records[0]; got.Seq != 1 || got.Kind != "event" || got.Type != "cluster/Add" || got.Outcome != "ok" {
		t.Fatalf("the Add decodes as %+v", got)
	}
	if got := w.Records[1]; got.Seq != 2 || got.CallID != "call-1" || got.Type != "cluster/Get" || got.ReplyHash != hashOf(r2.Reply.Value) {
		t.Fatalf("the Get decodes as %+v, reply hash want %s", got, hashOf(r2.Reply.Value))
	}
	calls := []callOp{{World: "c00", Kind: "get", CallID: "call-1", Chosen: true, Attempt: "get", ReplyCBOR: r2.Reply.Value}}
	v, _, _ := judgeTally(t, map[string]*dbWorld{"c00": w}, []ackOp{{World: "c00", Kind: "add", Key: "k1", Seq: 1}}, calls)
	wantClean(t, v)
}
