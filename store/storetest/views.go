package storetest

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Read-only views (issue 7 item 13): an operator's and the metrics' look
// at the queues, which changes nothing.
func viewTests() []testCase {
	return []testCase{
		{"ListEffectsListTimersAndQueueDepthsReflectStateAndChangeNothing", testViews},
		{"QueryEffectsPagesEveryRowOnceAcrossWorldsAndFilters", testQueryEffects},
		{"QueryTimersPagesEveryRowOnceAcrossWorldsAndFilters", testQueryTimers},
		{"QueryRefusesALimitOverTheMax", testQueryLimit},
	}
}

func testViews(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "A")
	f.publish("w", e, "i1", "i2", "i3")
	f.publish("v", ev, "v1")
	c1 := f.claimOne("adapter", "i1").ClaimOf()
	f.claimOne("adapter", "i2")
	f.complete("i1", c1, vocab.Receipt{Status: vocab.ReceiptOK}) // done: not listed
	now := f.now()
	must(t, f.s.Schedule(bg, "w", e, "t-late", now.Add(time.Hour), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t-b", now.Add(time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t-a", now.Add(time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "v", ev, "t-v", now.Add(time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t-fired", now, nil), "Schedule")
	f.advance(2 * time.Second)
	for _, it := range f.claimDue("tw", 1) { // t-fired, the earliest
		f.fire(it.IntentHash, it.ClaimOf())
	}
	if got := f.claimDue("tw", 1); len(got) != 1 || got[0].IntentHash != "t-a" {
		t.Fatalf("ClaimDue = %+v, want t-a", got)
	}
	f.enqueue("w", "event", "", nil)
	f.enqueue("v", "event", "", nil)
	vLast, _ := f.enqueue("v", "event", "", nil)
	before := f.fingerprint()

	effects, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(effects) != 2 || effects[0].IntentHash != "i2" || effects[0].State != vocab.EffectInflight || effects[0].ClaimedBy != "adapter" ||
		effects[1].IntentHash != "i3" || effects[1].State != vocab.EffectPending || effects[1].World != "w" || effects[0].Seq >= effects[1].Seq {
		t.Fatalf("ListEffects(w) = %+v, want i2 inflight then i3 pending", effects)
	}
	page, err := f.s.ListEffects(bg, "w", effects[0].Seq, 10)
	must(t, err, "ListEffects after")
	if len(page) != 1 || page[0].IntentHash != "i3" {
		t.Fatalf("ListEffects(w, after i2) = %+v", page)
	}
	if page, _ := f.s.ListEffects(bg, "w", 0, 1); len(page) != 1 || page[0].IntentHash != "i2" {
		t.Fatalf("ListEffects(w, limit 1) = %+v", page)
	}
	timers, err := f.s.ListTimers(bg, "w", 10)
	must(t, err, "ListTimers")
	if timersSummary(timers) != timersSummary([]store.TimerItem{
		{IntentHash: "t-a", State: store.TimerClaimed, ClaimedBy: "tw", Attempt: 1, DeliverAt: now.Add(time.Second)},
		{IntentHash: "t-b", State: store.TimerScheduled, DeliverAt: now.Add(time.Second)},
		{IntentHash: "t-late", State: store.TimerScheduled, DeliverAt: now.Add(time.Hour)},
	}) {
		t.Fatalf("ListTimers(w) = %s", timersSummary(timers))
	}
	if page, _ := f.s.ListTimers(bg, "w", 2); len(page) != 2 || page[1].IntentHash != "t-b" {
		t.Fatalf("ListTimers(w, 2) = %+v", page)
	}
	d, err := f.s.QueueDepths(bg)
	must(t, err, "QueueDepths")
	want := store.QueueDepths{EffectsPending: 2, EffectsInflight: 1, TimersScheduled: 3, TimersClaimed: 1, InboxBacklog: 5}
	if d != want {
		t.Fatalf("QueueDepths = %+v, want %+v", d, want)
	}
	if after := f.fingerprint(); after != before {
		t.Fatalf("the views changed state:\nbefore %s\nafter  %s", before, after)
	}
	// The backlog shrinks when a world drains.
	_, err = f.s.DrainToJournal(bg, "v", ev, 0, 0, vLast, []store.Record{rec("x")})
	must(t, err, "DrainToJournal")
	if d, _ := f.s.QueueDepths(bg); d.InboxBacklog != 3 {
		t.Fatalf("InboxBacklog after draining v = %d, want 3", d.InboxBacklog)
	}
}

// pageEffects reads every page of q at limit n and the pages' sizes.
func pageEffects(t *testing.T, s store.Store, q store.EffectFilter, n int) ([]vocab.EffectItem, []int) {
	t.Helper()
	var all []vocab.EffectItem
	var sizes []int
	q.Limit = n
	for range 100 {
		page, err := s.QueryEffects(bg, q)
		must(t, err, "QueryEffects")
		if page == nil {
			t.Fatalf("QueryEffects(%+v) = nil, want an empty page", q)
		}
		sizes = append(sizes, len(page))
		if len(page) == 0 {
			return all, sizes
		}
		all = append(all, page...)
		q.AfterSeq = page[len(page)-1].Seq
	}
	t.Fatalf("QueryEffects(%+v) never reached an empty page", q)
	return nil, nil
}

func effectHashes(es []vocab.EffectItem) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.IntentHash
	}
	return out
}

// Effects across worlds, in every state, page in seq order: every row
// once, filters by world, kind and state, an empty last page, an unknown
// world an empty page, a row published between pages on the next one.
func testQueryEffects(t *testing.T, open Factory) {
	f := setup(t, open)
	ew, ev, eu := f.leased("w", "A"), f.leased("v", "A"), f.leased("u", "A")
	f.publish("w", ew, "w1", "w2")
	f.publish("v", ev, "v1")
	mail := []vocab.Intent{{IntentHash: "u-mail", Kind: "mail.send", Params: []byte("p"), Origin: "test", PolicyContextHash: "pch"}}
	_, err := f.s.Publish(bg, "u", eu, mail)
	must(t, err, "Publish mail")
	f.publish("w", ew, "w3")
	c := f.claimOne("adapter", "w1").ClaimOf()
	f.complete("w1", c, vocab.Receipt{Status: vocab.ReceiptOK})
	c2 := f.claimOne("adapter", "w2").ClaimOf()
	before := f.fingerprint()

	all, sizes := pageEffects(t, f.s, store.EffectFilter{}, 2)
	if got := strings.Join(effectHashes(all), ","); got != "w1,w2,v1,u-mail,w3" {
		t.Fatalf("every effect paged by 2 = %s (pages %v), want w1,w2,v1,u-mail,w3 once each in seq order", got, sizes)
	}
	if !slices.Equal(sizes, []int{2, 2, 1, 0}) {
		t.Fatalf("page sizes = %v, want [2 2 1 0]", sizes)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Seq >= all[i].Seq {
			t.Fatalf("seqs not increasing: %+v", all)
		}
	}
	if all[0].State != vocab.EffectDone || all[1].State != vocab.EffectInflight || all[1].ClaimedBy != "adapter" ||
		all[2].World != "v" || all[3].Kind != "mail.send" || all[4].State != vocab.EffectPending {
		t.Fatalf("rows = %+v", all)
	}
	for _, c := range []struct {
		q    store.EffectFilter
		want string
	}{
		{store.EffectFilter{World: "w"}, "w1,w2,w3"},
		{store.EffectFilter{Kind: "mail.send"}, "u-mail"},
		{store.EffectFilter{States: []vocab.EffectState{vocab.EffectPending}}, "v1,u-mail,w3"},
		{store.EffectFilter{States: []vocab.EffectState{vocab.EffectDone}}, "w1"},
		{store.EffectFilter{States: []vocab.EffectState{vocab.EffectPending, vocab.EffectInflight}}, "w2,v1,u-mail,w3"},
		{store.EffectFilter{World: "w", States: []vocab.EffectState{vocab.EffectInflight}, Kind: effectKind}, "w2"},
		{store.EffectFilter{World: "w", Kind: "mail.send"}, ""},
		{store.EffectFilter{World: "nobody"}, ""},
	} {
		got, _ := pageEffects(t, f.s, c.q, 1)
		if s := strings.Join(effectHashes(got), ","); s != c.want {
			t.Errorf("QueryEffects(%+v) = %s, want %s", c.q, s, c.want)
		}
	}
	if page, err := f.s.QueryEffects(bg, store.EffectFilter{Limit: 0}); err != nil || len(page) != 0 {
		t.Fatalf("QueryEffects(limit 0) = %+v, %v; want an empty page", page, err)
	}
	if after := f.fingerprint(); after != before {
		t.Fatalf("QueryEffects changed state:\nbefore %s\nafter  %s", before, after)
	}
	// A row reads as ListEffects reads it, field for field, a retry's
	// schedule (failures, retry time, last error) included.
	must(t, f.s.RetryLater(bg, "w2", c2, 10*time.Second, "refused"), "RetryLater")
	listed, err := f.s.ListEffects(bg, "w", 0, 100)
	must(t, err, "ListEffects")
	openW, _ := pageEffects(t, f.s, store.EffectFilter{World: "w", States: []vocab.EffectState{vocab.EffectPending, vocab.EffectInflight}}, 10)
	if !reflect.DeepEqual(listed, openW) {
		t.Fatalf("QueryEffects reads the open effects of w as\n%+v\nListEffects as\n%+v", openW, listed)
	}
	if len(openW) == 0 || openW[0].IntentHash != "w2" || openW[0].Failures != 1 || openW[0].RetryAt.IsZero() {
		t.Fatalf("w2 after RetryLater reads %+v, want one failure and its retry time", openW)
	}
	// Keyset paging: a row published after the first page comes once, on
	// a later page, and nothing read already comes again.
	first, err := f.s.QueryEffects(bg, store.EffectFilter{Limit: 3})
	must(t, err, "QueryEffects")
	f.publish("v", ev, "v2")
	rest, _ := pageEffects(t, f.s, store.EffectFilter{AfterSeq: first[len(first)-1].Seq}, 10)
	if got := strings.Join(effectHashes(append(first, rest...)), ","); got != "w1,w2,v1,u-mail,w3,v2" {
		t.Fatalf("pages around a publish = %s, want w1,w2,v1,u-mail,w3,v2", got)
	}
}

// pageTimers reads every page of q at limit n.
func pageTimers(t *testing.T, s store.Store, q store.TimerFilter, n int) ([]store.TimerItem, []int) {
	t.Helper()
	var all []store.TimerItem
	var sizes []int
	q.Limit = n
	for range 100 {
		page, err := s.QueryTimers(bg, q)
		must(t, err, "QueryTimers")
		if page == nil {
			t.Fatalf("QueryTimers(%+v) = nil, want an empty page", q)
		}
		sizes = append(sizes, len(page))
		if len(page) == 0 {
			return all, sizes
		}
		all = append(all, page...)
		q.After = page[len(page)-1].CursorOf()
	}
	t.Fatalf("QueryTimers(%+v) never reached an empty page", q)
	return nil, nil
}

func timerHashes(ts []store.TimerItem) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.IntentHash
	}
	return strings.Join(out, ",")
}

// Timers across worlds, in every state, page in (deliverAt, intentHash)
// order, ties on the due time included: every row once, filters by world
// and state, an empty last page.
func testQueryTimers(t *testing.T, open Factory) {
	f := setup(t, open)
	ew, ev := f.leased("w", "A"), f.leased("v", "A")
	now := f.now()
	sec := now.Add(time.Second)
	must(t, f.s.Schedule(bg, "w", ew, "t-fired", now, nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", ew, "t-b", sec, nil), "Schedule")
	must(t, f.s.Schedule(bg, "v", ev, "t-a", sec, nil), "Schedule")
	must(t, f.s.Schedule(bg, "v", ev, "t-c", sec, nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", ew, "t-late", now.Add(time.Hour), []byte("p")), "Schedule")
	f.advance(2 * time.Second)
	for _, it := range f.claimDue("tw", 1) {
		f.fire(it.IntentHash, it.ClaimOf())
	}
	if got := f.claimDue("tw", 1); len(got) != 1 || got[0].IntentHash != "t-a" {
		t.Fatalf("ClaimDue = %+v, want t-a", got)
	}
	before := f.fingerprint()

	all, sizes := pageTimers(t, f.s, store.TimerFilter{}, 2)
	if got := timerHashes(all); got != "t-fired,t-a,t-b,t-c,t-late" {
		t.Fatalf("every timer paged by 2 = %s (pages %v), want t-fired,t-a,t-b,t-c,t-late", got, sizes)
	}
	if !slices.Equal(sizes, []int{2, 2, 1, 0}) {
		t.Fatalf("page sizes = %v, want [2 2 1 0]", sizes)
	}
	if all[0].State != store.TimerDelivered || all[1].State != store.TimerClaimed || all[1].ClaimedBy != "tw" ||
		all[2].State != store.TimerScheduled || !all[2].DeliverAt.Equal(sec) || all[4].World != "w" || string(all[4].Payload) != "p" {
		t.Fatalf("rows = %s", timersSummary(all))
	}
	for _, c := range []struct {
		q    store.TimerFilter
		want string
	}{
		{store.TimerFilter{World: "v"}, "t-a,t-c"},
		{store.TimerFilter{States: []store.TimerState{store.TimerScheduled}}, "t-b,t-c,t-late"},
		{store.TimerFilter{States: []store.TimerState{store.TimerScheduled, store.TimerClaimed}}, "t-a,t-b,t-c,t-late"},
		{store.TimerFilter{States: []store.TimerState{store.TimerClaimed}}, "t-a"},
		{store.TimerFilter{States: []store.TimerState{store.TimerDelivered}, World: "w"}, "t-fired"},
		{store.TimerFilter{States: []store.TimerState{store.TimerDelivered}, World: "v"}, ""},
		{store.TimerFilter{World: "nobody"}, ""},
	} {
		got, _ := pageTimers(t, f.s, c.q, 1)
		if s := timerHashes(got); s != c.want {
			t.Errorf("QueryTimers(%+v) = %s, want %s", c.q, s, c.want)
		}
	}
	if after := f.fingerprint(); after != before {
		t.Fatalf("QueryTimers changed state:\nbefore %s\nafter  %s", before, after)
	}
}

// A limit over MaxListLimit is refused, not clamped: a caller never takes
// a short page for the end. The maximum itself is a page.
func testQueryLimit(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.QueryEffects(bg, store.EffectFilter{Limit: store.MaxListLimit + 1})
	wantErr(t, err, store.ErrInvalid, "QueryEffects over the max")
	_, err = f.s.QueryTimers(bg, store.TimerFilter{Limit: store.MaxListLimit + 1})
	wantErr(t, err, store.ErrInvalid, "QueryTimers over the max")
	if page, err := f.s.QueryEffects(bg, store.EffectFilter{Limit: store.MaxListLimit}); err != nil || len(page) != 0 {
		t.Fatalf("QueryEffects(max) on an empty store = %+v, %v", page, err)
	}
	if page, err := f.s.QueryTimers(bg, store.TimerFilter{Limit: store.MaxListLimit}); err != nil || len(page) != 0 {
		t.Fatalf("QueryTimers(max) on an empty store = %+v, %v", page, err)
	}
}
