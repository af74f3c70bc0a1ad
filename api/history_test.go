package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// historyWorld drives world "h" through every kind of step the journal
// detail shows: an event (1), a call (2), an effect (3), a timer (4), the
// effect's receipt (5) and a fabric send (6). It returns the effect's
// intent hash.
func historyWorld(t *testing.T, r *rig) string {
	t.Helper()
	r.Create("h", universe)
	must(r.Client.Send(r.Ctx, "h", typeName(t, Add{}), Add{By: 5, Key: "five"}, "add"))(t)
	must(r.Client.Call(r.Ctx, "h", typeName(t, Get{}), Get{}, api.CallOptions{CallID: "get-1"}))(t)
	must(r.Client.Send(r.Ctx, "h", typeName(t, Pay{}), nil, "pay"))(t)
	must(r.Client.Send(r.Ctx, "h", typeName(t, Arm{}), Arm{AfterMs: 3_600_000}, "arm"))(t)
	var effects []api.Effect
	r.WaitFor("the effect queued", func() (bool, error) {
		var err error
		effects, err = r.Client.Effects(r.Ctx, "h")
		return len(effects) == 1, err
	})
	completeAs(t, r, effects[0].IntentHash, "ok")
	r.WaitFor("the receipt journaled", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "h")
		return v.Head >= 5, err
	})
	// The send last: its own receipt (from the fabric adapter) comes after
	// it, whenever it comes.
	must(r.Client.Send(r.Ctx, "h", typeName(t, testworlds.Relay{}), testworlds.Relay{To: "elsewhere", Key: "hello"}, "relay"))(t)
	r.WaitFor("the send journaled", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "h")
		return v.Head >= 6, err
	})
	return effects[0].IntentHash
}

// TestJournalDetail: with detail=true each record shows its input's value
// as JSON and its payload, a call's reply, the effect, timer and send a
// step made, and for a receipt the effect it answers (intent hash, kind,
// status, attempts); without it the page is the summary it always was.
func TestJournalDetail(t *testing.T) {
	r := newRig(t, rigOptions{})
	pay := historyWorld(t, r)

	plain := must(r.Client.Journal(r.Ctx, "h", 0, 6, 0))(t)
	for _, rec := range plain.Records {
		if rec.Derived || rec.Input.Value != nil || rec.Reply != nil || rec.Intents != nil || rec.Receipt != nil {
			t.Fatalf("a record without detail=true carries detail: %+v", rec)
		}
	}
	page := must(r.Client.JournalDetail(r.Ctx, "h", 0, 6))(t)
	if len(page.Records) != 6 {
		t.Fatalf("%d records", len(page.Records))
	}
	recs := page.Records
	for _, rec := range recs {
		if !rec.Derived || rec.DeriveError != "" || len(rec.Input.PayloadCBOR) == 0 {
			t.Fatalf("record %d not derived: %+v", rec.Height, rec)
		}
	}
	var add struct {
		By  int64
		Key string
	}
	if err := json.Unmarshal(recs[0].Input.Value, &add); err != nil || add.By != 5 || add.Key != "five" {
		t.Fatalf("the event's value %s: %v", recs[0].Input.Value, err)
	}
	if rp := recs[1].Reply; rp == nil || rp.CallID != "get-1" || string(rp.Value) != "5" || len(rp.ValueCBOR) == 0 {
		t.Fatalf("the call's reply: %+v", rp)
	}
	if recs[0].Reply != nil {
		t.Fatalf("an event has a reply: %+v", recs[0].Reply)
	}
	var params struct{ Method, URL string }
	if in := recs[2].Intents; len(in) != 1 || in[0].IntentHash != pay || in[0].Kind != world.KindHTTPRequest ||
		json.Unmarshal(in[0].Params, &params) != nil || params.URL != "https://pay.example" {
		t.Fatalf("the effect's intents: %+v", in)
	}
	timers := must(r.Client.Timers(r.Ctx, "h"))(t)
	if tm := recs[3].Timers; len(tm) != 1 || len(timers) != 1 || tm[0].IntentHash != timers[0].IntentHash ||
		!tm[0].DeliverAt.Equal(timers[0].DeliverAt) || tm[0].Type != typeName(t, testworlds.Tick{}) {
		t.Fatalf("the timer set: %+v, the store's: %+v", tm, timers)
	}
	var msg struct{ Key string }
	if sd := recs[5].Sends; len(sd) != 1 || sd[0].DestWorld != "elsewhere" || sd[0].Type != typeName(t, testworlds.Msg{}) ||
		json.Unmarshal(sd[0].Value, &msg) != nil || msg.Key != "hello" || sd[0].IntentHash == "" || len(recs[5].Intents) != 0 {
		t.Fatalf("the send: %+v (intents %+v)", sd, recs[5].Intents)
	}
	if rc := recs[4].Receipt; rc == nil || rc.IntentHash != pay || rc.Kind != world.KindHTTPRequest || rc.Status != "ok" ||
		rc.Attempt != 1 || rc.EffectState != "done" || rc.Retry != 0 {
		t.Fatalf("the receipt: %+v", rc)
	}

	// A page that starts mid-journal is derived from the snapshot below it.
	if p := must(r.Client.JournalDetail(r.Ctx, "h", 5, 1))(t); len(p.Records) != 1 || len(p.Records[0].Sends) != 1 {
		t.Fatalf("page after 5: %+v", p.Records)
	}
	if code, body := r.Do(http.MethodGet, "/v1/worlds/h/journal?detail=maybe", "", "", ""); code != http.StatusBadRequest {
		t.Fatalf("detail=maybe: %d %s", code, body)
	}
}

// TestStateAtHeight: the state at each height is what the world was
// after that step (0: its initial state), replayed from a snapshot; a
// height above the head is 400 invalid_argument; a height whose journal
// is compacted is 410 compacted; without a height the state is the head's.
func TestStateAtHeight(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("s", universe)
	add := typeName(t, Add{})
	for i := range 5 {
		must(r.Client.Send(r.Ctx, "s", add, Add{By: int64(i + 1), Key: string(rune('a' + i))}, string(rune('a'+i))))(t)
	}
	r.WaitFor("the head at 5", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "s")
		return v.Head == 5, err
	})
	sums := []int64{0, 1, 3, 6, 10, 15}
	for h, want := range sums {
		s, err := r.Client.StateAt(r.Ctx, "s", uint64(h))
		if err != nil {
			t.Fatalf("height %d: %v", h, err)
		}
		var v struct{ N int64 }
		if err := json.Unmarshal(s.State, &v); err != nil || s.Height != uint64(h) || v.N != want || s.Hash == "" {
			t.Fatalf("height %d: %+v (%v)", h, s, err)
		}
		// The hash is the one the journal recorded for that height.
		if h > 0 {
			rec := must(r.Client.Journal(r.Ctx, "s", uint64(h-1), 1, 0))(t).Records[0]
			if rec.StateHash != s.Hash {
				t.Fatalf("height %d: hash %s, journal %s", h, s.Hash, rec.StateHash)
			}
		}
	}
	head := must(r.Client.State(r.Ctx, "s"))(t)
	if at5 := must(r.Client.StateAt(r.Ctx, "s", 5))(t); at5.Hash != head.Hash {
		t.Fatalf("state at the head %s, the state %s", at5.Hash, head.Hash)
	}

	_, err := r.Client.StateAt(r.Ctx, "s", 6)
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	if !errors.Is(err, plane.ErrInvalid) {
		t.Fatalf("above the head: %v", err)
	}
	if code, body := r.Do(http.MethodGet, "/v1/worlds/s/state?height=-1", "", "", ""); code != http.StatusBadRequest {
		t.Fatalf("height=-1: %d %s", code, body)
	}
	_, err = r.Client.StateAt(r.Ctx, "nobody", 1)
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)

	// Compacted below the active snapshot: a height below it with no
	// snapshot of its own can no longer be derived; the snapshot's height
	// and above still can.
	var snap store.Snapshot
	r.WaitFor("a snapshot at 2 or above", func() (bool, error) {
		var ok bool
		var err error
		snap, ok, err = r.Store.ActiveSnapshot(r.Ctx, "s")
		return ok && snap.Height >= 2, err
	})
	l, ok, err := r.Store.GetLease(r.Ctx, "s")
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	if _, err := r.Store.Compact(r.Ctx, "s", l.Epoch, 0); err != nil {
		t.Fatal(err)
	}
	below := uint64(0)
	for h := snap.Height - 1; h > 0 && below == 0; h-- {
		if b, ok, err := r.Store.SnapshotBelow(r.Ctx, "s", h+1); err == nil && (!ok || b.Height < h) {
			below = h
		}
	}
	if below == 0 {
		t.Fatalf("every height below the snapshot at %d has a snapshot", snap.Height)
	}
	_, err = r.Client.StateAt(r.Ctx, "s", below)
	apiError(t, err, http.StatusGone, api.CodeCompacted)
	if !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("compacted: %v", err)
	}
	if s := must(r.Client.StateAt(r.Ctx, "s", 5))(t); s.Height != 5 || s.Hash != head.Hash {
		t.Fatalf("above the floor: %+v", s)
	}
	// The detail of a page above the floor still derives.
	if p := must(r.Client.JournalDetail(r.Ctx, "s", snap.Height, 0))(t); len(p.Records) != int(5-snap.Height) || (len(p.Records) > 0 && !p.Records[0].Derived) {
		t.Fatalf("detail above the floor: %+v", p.Records)
	}
}

// TestForksList: a world's forks are listed from the source, and a fork's
// lineage names the source.
func TestForksList(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("src", universe)
	add := typeName(t, Add{})
	for _, k := range []string{"a", "b"} {
		must(r.Client.Send(r.Ctx, "src", add, Add{By: 1, Key: k}, k))(t)
	}
	r.WaitFor("snapshotted at 2", func() (bool, error) {
		s, ok, err := r.Store.ActiveSnapshot(r.Ctx, "src")
		return ok && s.Height == 2, err
	})
	if fs := must(r.Client.Forks(r.Ctx, "src"))(t); len(fs) != 0 {
		t.Fatalf("forks before any: %+v", fs)
	}
	for _, id := range []string{"f2", "f1"} {
		if _, _, err := r.Client.Fork(r.Ctx, "src", id, 2); err != nil {
			t.Fatal(err)
		}
	}
	fs := must(r.Client.Forks(r.Ctx, "src"))(t)
	ids := worldIDs(fs)
	if !slices.Equal(ids, []string{"f1", "f2"}) || fs[0].Lineage == nil || fs[0].Lineage.Parent != "src" || fs[0].Lineage.ForkedAtHeight != 2 {
		t.Fatalf("forks: %+v", fs)
	}
	if fs := must(r.Client.Forks(r.Ctx, "f1"))(t); len(fs) != 0 {
		t.Fatalf("a fork's forks: %+v", fs)
	}
	_, err := r.Client.Forks(r.Ctx, "nobody")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
}
