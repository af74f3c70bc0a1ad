package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// TestWorldsCreateListGet: creating a world is idempotent in its universe
// (201, then 200 with the same record), another universe is 409
// already_exists and an unknown one 400; the list filters by universe
// and status and is sorted; GET shows the lease and assignment the plane
// gave it, its head and inbox cursor.
func TestWorldsCreateListGet(t *testing.T) {
	r := newRig(t, rigOptions{})
	if err := r.Client.Health(r.Ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.Ready(r.Ctx); err != nil {
		t.Fatal(err)
	}
	w, created, err := r.Client.CreateWorld(r.Ctx, "b-acct", universe)
	if err != nil || !created || w.ID != "b-acct" || w.Universe != universe || w.Status != "active" || w.CreatedAt.IsZero() || w.Lineage != nil {
		t.Fatalf("create: %+v created=%v %v", w, created, err)
	}
	again, created, err := r.Client.CreateWorld(r.Ctx, "b-acct", universe)
	if err != nil || created || again != w {
		t.Fatalf("create again: %+v created=%v %v, want %+v", again, created, err, w)
	}
	_, _, err = r.Client.CreateWorld(r.Ctx, "b-acct", other)
	apiError(t, err, http.StatusConflict, api.CodeAlreadyExists)
	if !errors.Is(err, store.ErrWorldExists) {
		t.Fatalf("409 already_exists does not match store.ErrWorldExists: %v", err)
	}
	_, _, err = r.Client.CreateWorld(r.Ctx, "c-acct", "no-such-universe")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	r.Create("a-acct", other)
	r.Create("c-acct", universe)
	if _, err := r.Client.Pause(r.Ctx, "c-acct", "maintenance"); err != nil {
		t.Fatal(err)
	}

	all := must(r.Client.ListWorlds(r.Ctx, "", ""))(t)
	if got := worldIDs(all); !slices.Equal(got, []string{"a-acct", "b-acct", "c-acct"}) {
		t.Fatalf("every universe: %v", got)
	}
	if got := worldIDs(must(r.Client.ListWorlds(r.Ctx, universe, ""))(t)); !slices.Equal(got, []string{"b-acct", "c-acct"}) {
		t.Fatalf("universe %s: %v", universe, got)
	}
	if got := worldIDs(must(r.Client.ListWorlds(r.Ctx, "", store.WorldPaused))(t)); !slices.Equal(got, []string{"c-acct"}) {
		t.Fatalf("paused: %v", got)
	}
	_, err = r.Client.ListWorlds(r.Ctx, "", "sleeping")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)

	// The orchestrator places the world and the host takes its lease.
	r.WaitFor("b-acct leased", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "b-acct")
		return err == nil && v.Lease != nil && v.Lease.Holder == "w1", err
	})
	if _, err := r.Client.Send(r.Ctx, "b-acct", typeName(t, Add{}), Add{By: 1}, ""); err != nil {
		t.Fatal(err)
	}
	r.WaitFor("b-acct drained", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "b-acct")
		return err == nil && v.Head == 1 && v.InboxCursor != nil && *v.InboxCursor == 1, err
	})
	v := must(r.Client.GetWorld(r.Ctx, "b-acct"))(t)
	if v.Assignment == nil || v.Assignment.Worker != "w1" || v.Lease.Epoch == 0 || v.Lease.ExpiresAt.IsZero() || v.World != w {
		t.Fatalf("view: %+v lease %+v assignment %+v", v, v.Lease, v.Assignment)
	}
	// An id with characters a path would split on is escaped by the
	// client and read back whole by the server.
	odd := "team/alpha beta?#%"
	if w, created, err := r.Client.CreateWorld(r.Ctx, odd, universe); err != nil || !created || w.ID != odd {
		t.Fatalf("create %q: %+v %v", odd, w, err)
	}
	if a, err := r.Client.Send(r.Ctx, odd, typeName(t, Add{}), Add{By: 1}, ""); err != nil || a.Seq != 1 {
		t.Fatalf("send to %q: %+v %v", odd, a, err)
	}
	if v, err := r.Client.GetWorld(r.Ctx, odd); err != nil || v.ID != odd {
		t.Fatalf("get %q: %+v %v", odd, v, err)
	}
	_, err = r.Client.GetWorld(r.Ctx, "nobody")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	if !errors.Is(err, store.ErrWorldNotFound) {
		t.Fatalf("404 on a world does not match store.ErrWorldNotFound: %v", err)
	}
}

// TestSendCallStateJournal: events are acknowledged with their inbox seq
// and deduplicated by key; a call answers the handler's reply as JSON and
// CBOR, a failing handler is 422 call_failed with the world's message;
// the state is the user's state and the hash of the state bytes; the
// journal lists each step with its input, and a long-poll returns when a
// record arrives.
func TestSendCallStateJournal(t *testing.T) {
	r := newRig(t, rigOptions{})
	createSendCallState(t, r)

	add := typeName(t, Add{})
	page := must(r.Client.Journal(r.Ctx, "acct", 0, 0, 0))(t)
	if len(page.Records) != 4 || page.Next != 4 {
		t.Fatalf("journal: %d records, next %d", len(page.Records), page.Next)
	}
	wantTypes := []string{add, add, typeName(t, Get{}), typeName(t, Fail{})}
	wantOutcomes := []string{"ok", "ok", "ok", "error"}
	for i, rec := range page.Records {
		if rec.Height != uint64(i+1) || rec.EventType != world.EventWorldStepped || rec.StepID != world.StepID(rec.Input.Seq) ||
			rec.Input.Type != wantTypes[i] || rec.Outcome != wantOutcomes[i] || rec.StateHash == "" || rec.PersistedAt.IsZero() || rec.Input.EnqueuedAt.IsZero() {
			t.Fatalf("record %d: %+v input %+v", i, rec, rec.Input)
		}
	}
	if page.Records[3].Error == "" || page.Records[2].CallID == "" || page.Records[0].Input.Kind != vocab.KindEvent || page.Records[2].Input.Kind != vocab.KindCall {
		t.Fatalf("records: %+v %+v", page.Records[2], page.Records[3])
	}
	if p := must(r.Client.Journal(r.Ctx, "acct", 2, 1, 0))(t); len(p.Records) != 1 || p.Records[0].Height != 3 || p.Next != 3 {
		t.Fatalf("after 2, limit 1: %+v", p)
	}
	if p := must(r.Client.Journal(r.Ctx, "acct", 4, 0, 0))(t); len(p.Records) != 0 || p.Next != 4 {
		t.Fatalf("nothing after the head: %+v", p)
	}

	// A long-poll after the head returns once the next record exists.
	type result struct {
		page api.JournalPage
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := r.Client.Journal(r.Ctx, "acct", 4, 0, 25*time.Second)
		done <- result{p, err}
	}()
	ack := must(r.Client.Send(r.Ctx, "acct", add, Add{By: 100, Key: "late"}, "k-late"))(t)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.page.Records) != 1 || res.page.Records[0].Height != 5 || res.page.Records[0].Input.Seq != ack.Seq || res.page.Next != 5 {
		t.Fatalf("long-poll: %+v", res.page)
	}
}

// createSendCallState is the subset every backend runs: create, send
// with a deduplicated key, a call with a reply and a failing one, and the
// state.
func createSendCallState(t *testing.T, r *rig) {
	t.Helper()
	if _, created, err := r.Client.CreateWorld(r.Ctx, "acct", universe); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	add := typeName(t, Add{})
	a1 := must(r.Client.Send(r.Ctx, "acct", add, Add{By: 5, Key: "a"}, "k1"))(t)
	dup := must(r.Client.Send(r.Ctx, "acct", add, Add{By: 5, Key: "a"}, "k1"))(t)
	a2 := must(r.Client.Send(r.Ctx, "acct", add, Add{By: 7, Key: "b"}, "k2"))(t)
	if a1.Duplicate || !dup.Duplicate || dup.Seq != a1.Seq || a2.Seq != a1.Seq+1 || a2.Duplicate {
		t.Fatalf("acks: %+v %+v %+v", a1, dup, a2)
	}
	res, err := r.Client.Call(r.Ctx, "acct", typeName(t, Get{}), Get{}, api.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := json.Unmarshal(res.Reply, &n); err != nil || n != 12 || res.CallID == "" {
		t.Fatalf("reply %s (call %q): %v", res.Reply, res.CallID, err)
	}
	var fromCBOR int64
	if err := world.Decode(res.ReplyCBOR, &fromCBOR); err != nil || fromCBOR != 12 {
		t.Fatalf("reply_cbor %x: %d %v", res.ReplyCBOR, fromCBOR, err)
	}
	_, err = r.Client.Call(r.Ctx, "acct", typeName(t, Fail{}), Fail{Why: "no funds"}, api.CallOptions{CallID: "fail-1"})
	e := apiError(t, err, http.StatusUnprocessableEntity, api.CodeCallFailed)
	if !errors.Is(err, plane.ErrCallFailed) || !strings.Contains(e.Message, "refused: no funds") || e.Details["call_id"] != "fail-1" {
		t.Fatalf("failed call: %+v", e)
	}
	s, v := r.stateOf("acct")
	sum := sha256.Sum256(s.StateCBOR)
	if s.Height != 4 || s.Hash != hex.EncodeToString(sum[:]) || v.N != 12 || !slices.Equal(v.Seen, []string{"a", "b"}) {
		t.Fatalf("state: height %d hash %s value %+v", s.Height, s.Hash, v)
	}
	var js struct {
		N    int64
		Seen []string
	}
	if err := json.Unmarshal(s.State, &js); err != nil || js.N != 12 || !slices.Equal(js.Seen, v.Seen) {
		t.Fatalf("state as JSON %s: %v", s.State, err)
	}
	_, err = r.Client.State(r.Ctx, "nobody")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
}

// TestPayloadFormsAndCallIDs: an event or call given as its complete wire
// payload is taken as the typed form is; a call retried with its call id
// gets the same reply from the same inbox item; a payload the plane
// refuses (a reserved type, not CBOR) is 400 and enqueues nothing.
func TestPayloadFormsAndCallIDs(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("p", universe)
	ev, err := world.EncodeEvent(Add{By: 3, Key: "payload"})
	if err != nil {
		t.Fatal(err)
	}
	if a := must(r.Client.SendPayload(r.Ctx, "p", ev, "kp"))(t); a.Seq != 1 {
		t.Fatalf("payload event: %+v", a)
	}
	call, err := world.EncodeCall("call-7", Get{})
	if err != nil {
		t.Fatal(err)
	}
	res := must(r.Client.CallPayload(r.Ctx, "p", call, api.CallOptions{}))(t)
	if res.CallID != "call-7" || string(res.Reply) != "3" {
		t.Fatalf("payload call: %+v", res)
	}
	again := must(r.Client.Call(r.Ctx, "p", typeName(t, Get{}), nil, api.CallOptions{CallID: "call-7"}))(t)
	if again.CallID != "call-7" || string(again.Reply) != "3" {
		t.Fatalf("the same call id again: %+v", again)
	}
	items, err := r.Store.ReadInbox(r.Ctx, "p", 0, 0)
	if err != nil || len(items) != 2 {
		t.Fatalf("the call id's second call enqueued again: %d items, %v", len(items), err)
	}
	_, err = r.Client.CallPayload(r.Ctx, "p", call, api.CallOptions{CallID: "another"})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)

	reserved, err := world.EncodeEvent(world.FabricSendParams{DestWorld: "x", Mode: world.FabricInbox, Inbox: "i"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{reserved, {0xff, 0x00}, call} {
		_, err := r.Client.SendPayload(r.Ctx, "p", bad, "")
		apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	}
	_, err = r.Client.Send(r.Ctx, "p", "sys/Mine", 1, "")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	if items, err := r.Store.ReadInbox(r.Ctx, "p", 0, 0); err != nil || len(items) != 2 {
		t.Fatalf("refused payloads enqueued: %d items, %v", len(items), err)
	}
}

// TestForkAndStatus: a fork from the active snapshot is 201 and boots at
// its state, a repeat 200, another fork under an existing id 409
// conflict, a height without snapshot 404; pause ends the lease and
// keeps input waiting, a call to a paused world is 409 at once, resume
// runs the waiting input, archive refuses new input for good.
func TestForkAndStatus(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("src", universe)
	add := typeName(t, Add{})
	for i, k := range []string{"a", "b", "c", "d"} {
		must(r.Client.Send(r.Ctx, "src", add, Add{By: int64(i + 1), Key: k}, k))(t)
	}
	r.WaitFor("src snapshotted at 4", func() (bool, error) {
		s, ok, err := r.Store.ActiveSnapshot(r.Ctx, "src")
		return ok && s.Height == 4, err
	})
	f, created, err := r.Client.Fork(r.Ctx, "src", "fork", 0)
	if err != nil || !created || f.Lineage == nil || f.Lineage.Parent != "src" || f.Lineage.ForkedAtHeight != 4 || f.Lineage.ParentSnapshotHash == "" || f.Universe != universe {
		t.Fatalf("fork: %+v %v %v", f, created, err)
	}
	again, created, err := r.Client.Fork(r.Ctx, "src", "fork", 4)
	if err != nil || created || again.ID != "fork" {
		t.Fatalf("fork again: %+v %v %v", again, created, err)
	}
	_, _, err = r.Client.Fork(r.Ctx, "fork", "src", 0)
	apiError(t, err, http.StatusConflict, api.CodeConflict)
	if !errors.Is(err, plane.ErrConflict) {
		t.Fatalf("409 conflict does not match plane.ErrConflict: %v", err)
	}
	// A height without a snapshot forks from the state replayed up to it,
	// whose hash the lineage records.
	if s, ok, err := r.Store.SnapshotBelow(r.Ctx, "src", 4); err != nil || (ok && s.Height == 3) {
		t.Fatalf("a snapshot at 3 (%v): the fork would not be derived", err)
	}
	at3 := must(r.Client.StateAt(r.Ctx, "src", 3))(t)
	f3, created, err := r.Client.Fork(r.Ctx, "src", "fork-3", 3)
	if err != nil || !created || f3.Lineage == nil || f3.Lineage.Parent != "src" || f3.Lineage.ForkedAtHeight != 3 || f3.Lineage.ParentSnapshotHash != at3.Hash {
		t.Fatalf("fork at 3: %+v %v %v", f3, created, err)
	}
	if again, created, err := r.Client.Fork(r.Ctx, "src", "fork-3", 3); err != nil || created || again.ID != "fork-3" {
		t.Fatalf("fork at 3 again: %+v %v %v", again, created, err)
	}
	_, _, err = r.Client.Fork(r.Ctx, "src", "fork-3", 2)
	apiError(t, err, http.StatusConflict, api.CodeConflict)
	if fs, fv := r.stateOf("fork-3"); fs.Height != 3 || fv.N != 6 || !slices.Equal(fv.Seen, []string{"a", "b", "c"}) {
		t.Fatalf("fork-3 state: %d %+v", fs.Height, fv)
	}
	_, _, err = r.Client.Fork(r.Ctx, "src", "fork-9", 9)
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	if !errors.Is(err, plane.ErrInvalid) {
		t.Fatalf("fork above the head: %v", err)
	}
	_, _, err = r.Client.Fork(r.Ctx, "nobody", "fork-4", 0)
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	if fs, fv := r.stateOf("fork"); fs.Height != 4 || fv.N != 10 {
		t.Fatalf("fork state: %d %+v", fs.Height, fv)
	}

	p, err := r.Client.Pause(r.Ctx, "src", "maintenance")
	if err != nil || p.Status != "paused" || p.StatusReason != "maintenance" || p.StatusChangedAt.IsZero() {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if v := must(r.Client.GetWorld(r.Ctx, "src"))(t); v.Lease == nil || v.Lease.Holder != "" {
		t.Fatalf("a paused world's lease: %+v", v.Lease)
	}
	if a, err := r.Client.Send(r.Ctx, "src", add, Add{By: 100, Key: "while-paused"}, "wp"); err != nil || a.Seq != 5 {
		t.Fatalf("input to a paused world: %+v %v", a, err)
	}
	_, err = r.Client.Call(r.Ctx, "src", typeName(t, Get{}), nil, api.CallOptions{})
	apiError(t, err, http.StatusConflict, api.CodePaused)
	if !errors.Is(err, store.ErrWorldPaused) {
		t.Fatalf("409 paused does not match store.ErrWorldPaused: %v", err)
	}
	if rs, err := r.Client.Resume(r.Ctx, "src", "done"); err != nil || rs.Status != "active" {
		t.Fatalf("resume: %+v %v", rs, err)
	}
	res := must(r.Client.Call(r.Ctx, "src", typeName(t, Get{}), nil, api.CallOptions{}))(t)
	if string(res.Reply) != "110" {
		t.Fatalf("after resume: %s", res.Reply)
	}
	if ar, err := r.Client.Archive(r.Ctx, "src", "retired"); err != nil || ar.Status != "archived" {
		t.Fatalf("archive: %+v %v", ar, err)
	}
	_, err = r.Client.Send(r.Ctx, "src", add, Add{By: 1}, "")
	apiError(t, err, http.StatusConflict, api.CodeArchived)
	if !errors.Is(err, store.ErrWorldArchived) {
		t.Fatalf("409 archived does not match store.ErrWorldArchived: %v", err)
	}
	_, err = r.Client.Resume(r.Ctx, "src", "")
	apiError(t, err, http.StatusConflict, api.CodeArchived)
	_, err = r.Client.Pause(r.Ctx, "nobody", "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
}

// completeAs completes a claimed effect as an adapter would, with a
// receipt of status.
func completeAs(t *testing.T, r *rig, hash string, status vocab.ReceiptStatus) {
	t.Helper()
	items, err := r.Store.Claim(r.Ctx, "adapter-1", []string{world.KindHTTPRequest}, 10, time.Minute)
	if err != nil || len(items) != 1 || items[0].IntentHash != hash {
		t.Fatalf("claim: %+v %v", items, err)
	}
	payload, err := world.EncodeReceipt(world.Receipt{IntentHash: hash, Kind: items[0].Kind, Status: status, Retry: uint64(items[0].Retries)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Store.Complete(r.Ctx, hash, items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptStatus(status), Payload: payload}); err != nil {
		t.Fatal(err)
	}
}

// TestEffectsTimersRetry: a world's pending effect is listed with its
// params as JSON; retrying it while pending is 409 not_retryable; after an
// error receipt the retry puts it back to pending with its reason; an
// unknown intent is 404; an armed timer is listed.
func TestEffectsTimersRetry(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("e", universe)
	must(r.Client.Send(r.Ctx, "e", typeName(t, Pay{}), nil, "pay"))(t)
	must(r.Client.Send(r.Ctx, "e", typeName(t, Arm{}), Arm{AfterMs: 3_600_000}, "arm"))(t)
	var effects []api.Effect
	r.WaitFor("the effect queued", func() (bool, error) {
		var err error
		effects, err = r.Client.Effects(r.Ctx, "e")
		return len(effects) == 1, err
	})
	eff := effects[0]
	var params struct{ Method, URL string }
	if eff.Kind != world.KindHTTPRequest || eff.State != "pending" || eff.World != "e" || json.Unmarshal(eff.Params, &params) != nil ||
		params.Method != "POST" || params.URL != "https://pay.example" || len(eff.ParamsCBOR) == 0 || eff.Origin == "" {
		t.Fatalf("effect: %+v", eff)
	}
	_, err := r.Client.RetryEffect(r.Ctx, eff.IntentHash, "too early")
	apiError(t, err, http.StatusConflict, api.CodeNotRetryable)
	if !errors.Is(err, store.ErrNotRetryable) {
		t.Fatalf("409 not_retryable does not match store.ErrNotRetryable: %v", err)
	}
	completeAs(t, r, eff.IntentHash, vocab.ReceiptError)
	r.WaitFor("the effect done", func() (bool, error) {
		effects, err := r.Client.Effects(r.Ctx, "e")
		return len(effects) == 0, err
	})
	st, err := r.Client.RetryEffect(r.Ctx, eff.IntentHash, "the payee is back")
	if err != nil || st.State != "pending" || st.Retries != 1 || st.RetryReason != "the payee is back" || st.World != "e" {
		t.Fatalf("retry: %+v %v", st, err)
	}
	if effects := must(r.Client.Effects(r.Ctx, "e"))(t); len(effects) != 1 || effects[0].Retries != 1 || effects[0].State != "pending" {
		t.Fatalf("after the retry: %+v", effects)
	}
	_, err = r.Client.RetryEffect(r.Ctx, strings.Repeat("0", 64), "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	_, err = r.Client.Effects(r.Ctx, "nobody")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)

	timers := must(r.Client.Timers(r.Ctx, "e"))(t)
	if len(timers) != 1 || timers[0].State != "scheduled" || timers[0].World != "e" || timers[0].DeliverAt.IsZero() {
		t.Fatalf("timers: %+v", timers)
	}
	_, err = r.Client.Timers(r.Ctx, "")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
}

// TestInjectReceipt: an operator's receipt reaches the world exactly as an
// adapter's would (its handler records the intent and status), a second
// one is a duplicate, an unknown effect 404, a bad status 400; the store
// records the effect as resolved by an operator, with the reason.
func TestInjectReceipt(t *testing.T) {
	st := memstore.New()
	r := newRig(t, rigOptions{store: st})
	r.Create("e", universe)
	must(r.Client.Send(r.Ctx, "e", typeName(t, Pay{}), nil, "pay"))(t)
	var effects []api.Effect
	r.WaitFor("the effect queued", func() (bool, error) {
		var err error
		effects, err = r.Client.Effects(r.Ctx, "e")
		return len(effects) == 1, err
	})
	hash := effects[0].IntentHash
	ack, err := r.Client.InjectReceipt(r.Ctx, hash, "ok", map[string]any{"status": 200, "note": "paid by hand"}, "the bank answered by phone")
	if err != nil || ack.Duplicate || ack.Seq == 0 {
		t.Fatalf("inject: %+v %v", ack, err)
	}
	es, err := st.EffectStatus(r.Ctx, hash)
	if err != nil || es.State != vocab.EffectDone || !es.Resolved || es.ResolveReason != "the bank answered by phone" ||
		es.Receipt == nil || es.Receipt.Status != vocab.ReceiptOK {
		t.Fatalf("the effect after the operator's receipt: %+v %v", es, err)
	}
	var rec world.Receipt
	if err := event.Unmarshal(es.Receipt.Payload, &rec); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if rec.IntentHash != hash || rec.Kind != world.KindHTTPRequest || rec.Status != vocab.ReceiptOK || rec.Retry != 0 ||
		world.Decode(rec.Body, &body) != nil || body["note"] != "paid by hand" {
		t.Fatalf("the receipt payload: %+v body %v", rec, body)
	}
	r.WaitFor("the world consumed the receipt", func() (bool, error) {
		_, v := r.stateOf("e")
		return slices.Equal(v.Receipts, []string{hash}) && slices.Equal(v.Statuses, []string{"ok"}), nil
	})
	dup, err := r.Client.InjectReceipt(r.Ctx, hash, "error", nil, "")
	if err != nil || !dup.Duplicate || dup.Seq != ack.Seq {
		t.Fatalf("a second receipt: %+v %v", dup, err)
	}
	_, err = r.Client.InjectReceipt(r.Ctx, strings.Repeat("a", 64), "ok", nil, "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	_, err = r.Client.InjectReceipt(r.Ctx, hash, "maybe", nil, "")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
}

// TestWorkersLeasesDrain: the inventory shows both hosts live with the
// worlds each holds; leases list per worker and for all; draining the
// holder of a world moves it to the other worker; an unknown worker is
// 404.
func TestWorkersLeasesDrain(t *testing.T) {
	r := newRig(t, rigOptions{workers: []string{"w1", "w2"}})
	ids := []string{"d1", "d2", "d3", "d4"}
	for _, id := range ids {
		r.Create(id, universe)
	}
	holders := map[string]string{}
	r.WaitFor("every world leased", func() (bool, error) {
		rows, err := r.Client.Leases(r.Ctx, "")
		if err != nil {
			return false, err
		}
		clear(holders)
		for _, row := range rows {
			if row.Lease != nil && row.Lease.Holder == row.Worker {
				holders[row.World] = row.Worker
			}
		}
		return len(holders) == len(ids), nil
	})
	workers := must(r.Client.Workers(r.Ctx))(t)
	if len(workers) != 2 || workers[0].ID != "w1" || workers[1].ID != "w2" {
		t.Fatalf("workers: %+v", workers)
	}
	held := 0
	for _, w := range workers {
		if !w.Live || w.Draining || w.Capacity == 0 || w.HeartbeatAt.IsZero() {
			t.Fatalf("worker: %+v", w)
		}
		held += w.WorldsHeld
	}
	if held != len(ids) {
		t.Fatalf("worlds held in all: %d", held)
	}
	victim := holders["d1"]
	rows := must(r.Client.Leases(r.Ctx, victim))(t)
	found := false
	for _, row := range rows {
		if row.Worker != victim {
			t.Fatalf("a row of another worker: %+v", row)
		}
		found = found || row.World == "d1"
	}
	if !found {
		t.Fatalf("leases of %s lack d1: %+v", victim, rows)
	}

	w, err := r.Client.Drain(r.Ctx, victim, true)
	if err != nil || !w.Draining || w.ID != victim {
		t.Fatalf("drain: %+v %v", w, err)
	}
	r.WaitFor("d1 moved off the drained worker", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "d1")
		return err == nil && v.Lease != nil && v.Lease.Holder != "" && v.Lease.Holder != victim, err
	})
	if w, err := r.Client.Drain(r.Ctx, victim, false); err != nil || w.Draining {
		t.Fatalf("undrain: %+v %v", w, err)
	}
	_, err = r.Client.Drain(r.Ctx, "nobody", true)
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("404 on a worker does not match store.ErrNotFound: %v", err)
	}
}
