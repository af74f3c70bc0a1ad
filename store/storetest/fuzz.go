package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// FuzzAppend fuzzes the append authority's input: any record either appends
// (and reads back byte for byte, and a retry is idempotent) or fails with a
// typed *store.Error of kind ErrInvalid, and nothing panics. Backends call it
// from a Fuzz function with their factory.
func FuzzAppend(f *testing.F, open Factory) {
	f.Add("run-1", "ev-1", "key-1", "StepStarted", "step", uint64(1), uint64(1), []byte{0xa0})
	f.Add("", "", "", "", "", uint64(0), uint64(0), []byte(nil))
	f.Add("run|1", "ev\x00", "k\xff", "T", "", uint64(1), uint64(0), []byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, stream, id, key, typ, step string, logical, engine uint64, payload []byte) {
		h := open(t)
		r := store.Record{EventID: id, IdempotencyKey: key, EventType: typ, StepID: step,
			LogicalAttemptID: logical, EngineAttemptID: engine, Payload: payload}
		got, err := h.Store.Append(bg, stream, []store.Record{r}, freeOpts)
		if err != nil {
			var se *store.Error
			if !errors.As(err, &se) || !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("bad input gave %T %v, want a *store.Error of kind ErrInvalid", err, err)
			}
			if head, herr := h.Store.Head(bg, stream); herr == nil && head != 0 {
				t.Fatalf("a rejected append moved the head to %d", head)
			}
			return
		}
		evs, err := h.Store.Read(bg, stream, 0, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("Read after append: %d events, %v", len(evs), err)
		}
		back := evs[0]
		if back.EventID != id || back.IdempotencyKey != key || back.EventType != typ || back.StepID != step ||
			back.LogicalAttemptID != logical || back.EngineAttemptID != engine || !bytes.Equal(back.Payload, payload) ||
			back.RunSeq != got[0].RunSeq {
			t.Fatalf("read back %+v, appended %+v", back, r)
		}
		again, err := h.Store.Append(bg, stream, []store.Record{r}, freeOpts)
		if err != nil || !again[0].Idempotent || again[0].RunSeq != got[0].RunSeq {
			t.Fatalf("retry = %+v, %v; want idempotent at runSeq %d", again, err, got[0].RunSeq)
		}
	})
}

// FuzzSpawn fuzzes Spawn's spec: any spec either spawns the world exactly
// as asked (its items at seqs 1…n byte for byte, its lease at epoch 1 when
// a holder is named, its events at runSeqs 1…n) or fails with a typed
// *store.Error of kind ErrInvalid (ErrWorldExists for the taken id) and
// writes nothing; nothing panics. The items are two, the second's fields
// fuzzed, so repeated keys and reserved kinds and prefixes are reachable;
// the events are the first events%3 of two, the second's key and payload
// fuzzed, so a repeated key, a bad key, a payload too long and events
// without a holder are reachable too. Backends call it from a Fuzz
// function with their factory.
func FuzzSpawn(f *testing.F, open Factory) {
	none := []byte(nil)
	f.Add("u1", "new", "start", []byte("input"), "run-start", "event", none, "k2", "A", int64(time.Minute), uint8(0), "", none)
	f.Add("u1", "new", "start", none, "", "event", []byte{0xff}, "", "", int64(0), uint8(0), "", none)
	f.Add("u1", "taken", "start", none, "k", "event", none, "k2", "A", int64(time.Minute), uint8(0), "", none)
	f.Add("u1", "new", "start", none, "k", "event", none, "k", "A", int64(time.Minute), uint8(0), "", none)
	f.Add("u1", "new", "start", none, "", vocab.KindReceipt, none, "", "A", int64(time.Minute), uint8(0), "", none)
	f.Add("u1", "new", "start", none, "", "event", none, store.TimerKeyPrefix+"h", "", int64(0), uint8(0), "", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "A", int64(0), uint8(0), "", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "", int64(time.Second), uint8(0), "", none)
	f.Add("", "w\xff", "", none, "k\x00", "", none, "", "h\x00", int64(-1), uint8(0), "", none)
	// With events.
	f.Add("u1", "new", "start", []byte("input"), "run-start", "event", none, "", "A", int64(time.Minute), uint8(2), "key-step", []byte{0xa0})
	f.Add("u1", "new", "start", none, "", "event", none, "", "A", int64(time.Minute), uint8(1), "", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "A", int64(time.Minute), uint8(2), "key-run", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "", int64(0), uint8(2), "key-step", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "A", int64(time.Minute), uint8(2), "k\xff", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "A", int64(time.Minute), uint8(2), "", none)
	f.Add("u1", "new", "start", none, "", "event", none, "", "A", int64(time.Minute), uint8(2), "key-step", make([]byte, store.MaxPayloadBytes+1))
	f.Add("u1", "taken", "start", none, "", "event", none, "", "A", int64(time.Minute), uint8(2), "key-step", none)
	f.Fuzz(func(t *testing.T, universe, world, kind1 string, payload1 []byte, key1, kind2 string, payload2 []byte, key2, holder string, ttl int64,
		events uint8, eventKey string, eventPayload []byte) {
		x := setup(t, open)
		x.world("taken")
		spec := store.SpawnSpec{Universe: universe, World: world, Holder: holder, TTL: time.Duration(ttl),
			Items: []store.InboxItem{
				{Kind: kind1, Payload: payload1, DedupeKey: key1},
				{Kind: kind2, Payload: payload2, DedupeKey: key2},
			},
			Events: []store.Record{
				{EventID: "ev-run", IdempotencyKey: "key-run", EventType: "RunStarted", LogicalAttemptID: 1, EngineAttemptID: 1},
				{EventID: "ev-step", IdempotencyKey: eventKey, EventType: "StepStarted", StepID: "s1", LogicalAttemptID: 1, EngineAttemptID: 1, Payload: eventPayload},
			}[:events%3]}
		sp, err := x.s.Spawn(bg, spec)
		if err != nil {
			var se *store.Error
			if !errors.As(err, &se) || !(errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrWorldExists) && world == "taken") {
				t.Fatalf("Spawn(%+v) = %T %v, want ErrInvalid or, for the taken id, ErrWorldExists", spec, err, err)
			}
			// Only the taken world exists, in whatever universe the spec named.
			for _, u := range []string{"u1", universe} {
				ws, err := x.s.ListWorlds(bg, u, "")
				must(t, err, "ListWorlds")
				for _, w := range ws {
					if w.ID != "taken" {
						t.Fatalf("a refused Spawn created %+v", w)
					}
				}
			}
			if items := x.inbox("taken"); len(items) != 0 {
				t.Fatalf("a refused Spawn enqueued %+v into the taken world", items)
			}
			if _, ok, _ := x.s.GetLease(bg, "taken"); ok {
				t.Fatal("a refused Spawn leased the taken world")
			}
			for _, id := range []string{"taken", world} {
				if store.CheckID("", "", id) == nil {
					if h, evs := x.head(id), x.read(id); h != 0 || len(evs) != 0 {
						t.Fatalf("a refused Spawn left head %d and events %v on %q", h, eventIDs(evs), id)
					}
				}
			}
			return
		}
		if world == "taken" {
			t.Fatal("Spawn over the taken id succeeded")
		}
		w, err := x.s.GetWorld(bg, world)
		if err != nil || w.Universe != universe || w.Status != store.WorldActive {
			t.Fatalf("GetWorld = %+v, %v", w, err)
		}
		items := x.inbox(world)
		if len(items) != 2 || len(sp.Seqs) != 2 {
			t.Fatalf("inbox %+v, seqs %v; want 2 items", items, sp.Seqs)
		}
		for i, it := range items {
			want := spec.Items[i]
			if it.Seq != uint64(i+1) || sp.Seqs[i] != it.Seq || it.Kind != want.Kind || !bytes.Equal(it.Payload, want.Payload) || it.DedupeKey != want.DedupeKey {
				t.Fatalf("item %d = %+v, want %+v at seq %d", i, it, want, i+1)
			}
		}
		l, ok, err := x.s.GetLease(bg, world)
		switch {
		case err != nil:
			t.Fatalf("GetLease: %v", err)
		case holder == "" && (ok || sp.Lease != store.Lease{}):
			t.Fatalf("Spawn without a holder leased: %+v / %+v", l, sp.Lease)
		case holder != "" && (!ok || l.Holder != holder || l.Epoch != 1 || sp.Lease.Epoch != 1 || !l.ExpiresAt.Equal(sp.Lease.ExpiresAt)):
			t.Fatalf("lease = %+v (%v), Spawn answered %+v; want %s at epoch 1", l, ok, sp.Lease, holder)
		}
		if len(spec.Events) > 0 && holder == "" {
			t.Fatal("Spawn wrote events without a holder")
		}
		evs := x.read(world)
		if len(evs) != len(spec.Events) || len(sp.Appended) != len(spec.Events) || x.head(world) != uint64(len(spec.Events)) {
			t.Fatalf("journal %v (head %d), Appended %+v; want the %d events", eventIDs(evs), x.head(world), sp.Appended, len(spec.Events))
		}
		for i, r := range evs {
			want, a := spec.Events[i], sp.Appended[i]
			if !sameRecord(r, want, world, uint64(i+1)) || a.EventID != want.EventID || a.RunSeq != uint64(i+1) || a.Idempotent || !a.PersistedAt.Equal(r.PersistedAt) {
				t.Fatalf("event %d = %+v, answered %+v; want %+v at runSeq %d", i, r, a, want, i+1)
			}
		}
	})
}

// FuzzFireHeld fuzzes FireHeld's arguments against a world "w" leased at
// epoch 1 whose timer "t1" is due (and claimed by a timer worker when
// claimed is set): any call either fires t1 for w's holder (the firing
// read back byte for byte, a repeat answering dup), or answers w's lease
// holder nothing for another epoch (ErrFenced), another world
// (ErrWorldNotFound) or another timer (ErrNotFound), or fails with a typed
// *store.Error of kind ErrInvalid; whatever was refused wrote nothing, and
// nothing panics. Backends call it from a Fuzz function with their factory.
func FuzzFireHeld(f *testing.F, open Factory) {
	f.Add("w", uint64(1), "t1", false)
	f.Add("w", uint64(1), "t1", true)
	f.Add("w", uint64(2), "t1", false)
	f.Add("w", uint64(0), "t1", true)
	f.Add("v", uint64(1), "t1", false)
	f.Add("w", uint64(1), "t2", false)
	f.Add("w", uint64(1)<<63, "t1", false)
	f.Add("w\xff", uint64(1), "t1", false)
	f.Add("w", uint64(1), "", false)
	f.Add("", uint64(1), "t1\x00", true)
	f.Fuzz(func(t *testing.T, world string, epoch uint64, hash string, claimed bool) {
		x := setup(t, open)
		e := x.leased("w", "A")
		must(t, x.s.Schedule(bg, "w", e, "t1", x.now(), []byte("tick")), "Schedule")
		x.advance(time.Second)
		var c vocab.Claim
		if claimed {
			c = x.claimTimer("tw", "t1").ClaimOf()
		}
		res, err := x.s.FireHeld(bg, world, epoch, hash)
		if err != nil {
			var se *store.Error
			ok := errors.As(err, &se)
			switch {
			case !ok:
				t.Fatalf("FireHeld(%q, %d, %q) = %T %v, want a *store.Error", world, epoch, hash, err, err)
			case errors.Is(err, store.ErrInvalid):
			case errors.Is(err, store.ErrFenced) && world == "w" && epoch != e:
			case errors.Is(err, store.ErrWorldNotFound) && world != "w":
			case errors.Is(err, store.ErrNotFound) && world == "w" && epoch == e && hash != "t1":
			default:
				t.Fatalf("FireHeld(%q, %d, %q) = %v", world, epoch, hash, err)
			}
			if items := x.inbox("w"); len(items) != 0 {
				t.Fatalf("a refused FireHeld enqueued %+v", items)
			}
			if claimed {
				if seq, dup := x.fire("t1", c); dup || seq != 1 {
					t.Fatalf("the worker's Fire after a refused FireHeld = %d dup %v, want the firing at 1", seq, dup)
				}
			}
			return
		}
		if world != "w" || epoch != e || hash != "t1" {
			t.Fatalf("FireHeld(%q, %d, %q) fired", world, epoch, hash)
		}
		items := x.inbox("w")
		if res.Dup || len(items) != 1 || items[0].Seq != res.Item.Seq || !bytes.Equal(items[0].Payload, []byte("tick")) ||
			items[0].DedupeKey != store.TimerKey("t1") || res.Item.DedupeKey != items[0].DedupeKey {
			t.Fatalf("FireHeld = %+v, inbox %+v", res, items)
		}
		if again, err := x.s.FireHeld(bg, world, epoch, hash); err != nil || !again.Dup || again.Item.Seq != res.Item.Seq {
			t.Fatalf("FireHeld again = %+v, %v; want dup at %d", again, err, res.Item.Seq)
		}
		if claimed {
			if seq, dup := x.fire("t1", c); !dup || seq != res.Item.Seq {
				t.Fatalf("the worker's Fire after FireHeld = %d dup %v, want dup at %d", seq, dup, res.Item.Seq)
			}
		}
	})
}

// FuzzAcquireLeases fuzzes AcquireLeases's arguments: the call either
// fails as a whole with a typed *store.Error of kind ErrInvalid and takes
// no lease, or answers one result per world, in order, each a lease the
// worker now holds (as stored) or one of Acquire's typed refusals, and a
// world named twice gets the same answer twice; nothing panics. The worlds
// are the first n%4 of three fuzzed names, against a store holding f-free
// (acquirable, with an item waiting), f-held (B's) and f-paused, so every
// verdict is reachable. Backends call it from a Fuzz function with their
// factory.
func FuzzAcquireLeases(f *testing.F, open Factory) {
	f.Add("A", "f-free", "f-held", "f-paused", int64(time.Minute), uint8(3))
	f.Add("A", "f-free", "f-free", "f-missing", int64(time.Minute), uint8(3))
	f.Add("B", "f-held", "f-free", "", int64(time.Second), uint8(2))
	f.Add("", "f-free", "", "", int64(time.Minute), uint8(1))
	f.Add("A\x00", "f-free", "", "", int64(time.Minute), uint8(1))
	f.Add("A", "f-free", "w\xff", "", int64(time.Minute), uint8(2))
	f.Add("A", "f-free", "", "", int64(0), uint8(1))
	f.Add("A", "f-free", "", "", int64(-1), uint8(1))
	f.Add("A", "f-free", "", "", int64(store.MaxTTL)+1, uint8(1))
	f.Add("A", "", "", "", int64(time.Minute), uint8(0))
	f.Fuzz(func(t *testing.T, worker, w1, w2, w3 string, ttl int64, n uint8) {
		x := setup(t, open)
		x.world("f-free")
		x.enqueue("f-free", "event", "", nil)
		x.leased("f-held", "B")
		x.world("f-paused")
		x.setStatus("f-paused", store.WorldPaused, "")
		before := func() string {
			out := ""
			for _, w := range []string{"f-free", "f-held", "f-paused"} {
				l, ok, err := x.s.GetLease(bg, w)
				must(t, err, "GetLease")
				out += fmt.Sprintf("%s=%v/%s/%d/%d ", w, ok, l.Holder, l.Epoch, l.ExpiresAt.UnixNano())
			}
			return out
		}
		was := before()
		ws := []string{w1, w2, w3}[:n%4]
		res, err := x.s.AcquireLeases(bg, worker, ws, time.Duration(ttl))
		if err != nil {
			var se *store.Error
			if !errors.As(err, &se) || !errors.Is(err, store.ErrInvalid) || res != nil {
				t.Fatalf("AcquireLeases(%q, %q, %d) = %+v, %T %v; want no results and a *store.Error of kind ErrInvalid", worker, ws, ttl, res, err, err)
			}
			if now := before(); now != was {
				t.Fatalf("a refused call changed leases:\nbefore %s\nafter  %s", was, now)
			}
			return
		}
		if len(res) != len(ws) {
			t.Fatalf("%d results for %d worlds", len(res), len(ws))
		}
		first := map[string]store.AcquireResult{}
		for i, r := range res {
			if r.World != ws[i] {
				t.Fatalf("result %d is for %q, want %q", i, r.World, ws[i])
			}
			if prev, ok := first[r.World]; ok && (prev.Lease != r.Lease || errKind(prev.Err) != errKind(r.Err) || prev.Backlog != r.Backlog) {
				t.Fatalf("%q named twice: %+v, then %+v", r.World, prev, r)
			}
			first[r.World] = r
			if r.Err != nil {
				switch {
				case errors.Is(r.Err, store.ErrLeaseHeld) && r.World == "f-held" && worker != "B",
					errors.Is(r.Err, store.ErrWorldPaused) && r.World == "f-paused",
					errors.Is(r.Err, store.ErrWorldNotFound) && r.World != "f-free" && r.World != "f-held" && r.World != "f-paused":
				default:
					t.Fatalf("%q refused with %v", r.World, r.Err)
				}
				continue
			}
			stored, ok, err := x.s.GetLease(bg, r.World)
			must(t, err, "GetLease")
			if !ok || stored != r.Lease || r.Lease.Holder != worker || r.Universe != universe || r.Backlog != (r.World == "f-free") {
				t.Fatalf("%q = %+v; stored %+v", r.World, r, stored)
			}
		}
	})
}
