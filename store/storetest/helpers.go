package storetest

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Durations the tests use. Every expiry check stays well away from the
// boundary (Advance by leaseTTL+margin, or by less than half the TTL), so a
// backend with a real clock that moves a few milliseconds between calls
// answers like one whose clock only moves with Advance.
const (
	universe = "u1"
	leaseTTL = time.Minute
	claimTTL = 30 * time.Second
	margin   = 5 * time.Second
	// timeTol absorbs a backend's timestamp precision (microseconds in
	// Postgres) and the real time a backend's clock moves during a call.
	timeTol = 2 * time.Second
)

// fx is one test's fresh store with helpers that fail the test on error.
// Its helpers are for the test's own goroutine; concurrent parts of a test
// call h.Store directly and report with t.Errorf.
type fx struct {
	t *testing.T
	h Harness
	s store.Store
}

func setup(t *testing.T, open Factory) *fx {
	h := open(t)
	return &fx{t: t, h: h, s: h.Store}
}

func (f *fx) advance(d time.Duration) { f.h.Advance(d) }

func (f *fx) now() time.Time {
	f.t.Helper()
	now, err := f.s.Now(bg)
	must(f.t, err, "Now")
	return now
}

// world creates an active world in the default universe.
func (f *fx) world(id string) store.World {
	f.t.Helper()
	w, err := f.s.CreateWorld(bg, universe, id, nil)
	must(f.t, err, "CreateWorld "+id)
	return w
}

// setStatus is the operator's status change; it fails the test on error.
func (f *fx) setStatus(world string, status store.WorldStatus, reason string) store.World {
	f.t.Helper()
	w, err := f.s.SetWorldStatus(bg, world, status, reason)
	must(f.t, err, fmt.Sprintf("SetWorldStatus %s %s", world, status))
	return w
}

func (f *fx) acquire(world, worker string) store.Lease {
	f.t.Helper()
	l, err := f.s.Acquire(bg, world, worker, leaseTTL)
	must(f.t, err, fmt.Sprintf("Acquire %s by %s", world, worker))
	return l
}

// leased creates world and has worker acquire it; it returns the epoch.
func (f *fx) leased(world, worker string) uint64 {
	f.t.Helper()
	f.world(world)
	return f.acquire(world, worker).Epoch
}

func (f *fx) append(stream string, opts store.AppendOptions, keys ...string) []store.Appended {
	f.t.Helper()
	evs := make([]store.Record, len(keys))
	for i, k := range keys {
		evs[i] = rec(k)
	}
	got, err := f.s.Append(bg, stream, evs, opts)
	must(f.t, err, "Append "+stream)
	if len(got) != len(keys) {
		f.t.Fatalf("Append %s: %d results for %d events", stream, len(got), len(keys))
	}
	return got
}

// freeOpts appends to a stream no world owns (store.FreeStream).
var freeOpts = store.AppendOptions{Kind: store.FreeStream}

func fenced(world string, epoch uint64) store.AppendOptions {
	return store.AppendOptions{Fence: &store.Fence{World: world, Epoch: epoch}}
}

// read returns the stream's whole journal, a page of 1,000 at a time.
func (f *fx) read(stream string) []store.Record {
	f.t.Helper()
	var all []store.Record
	for {
		var after uint64
		if len(all) > 0 {
			after = all[len(all)-1].RunSeq
		}
		evs, err := f.s.Read(bg, stream, after, 1000)
		must(f.t, err, "Read "+stream)
		all = append(all, evs...)
		if len(evs) < 1000 {
			return all
		}
	}
}

func (f *fx) head(stream string) uint64 {
	f.t.Helper()
	h, err := f.s.Head(bg, stream)
	must(f.t, err, "Head "+stream)
	return h
}

func (f *fx) enqueue(world, kind, key string, payload []byte) (uint64, bool) {
	f.t.Helper()
	seq, dup, err := f.s.Enqueue(bg, world, store.InboxItem{Kind: kind, DedupeKey: key, Payload: payload})
	must(f.t, err, "Enqueue "+world)
	return seq, dup
}

func (f *fx) inbox(world string) []store.InboxItem {
	f.t.Helper()
	items, err := f.s.ReadInbox(bg, world, 0, 1000)
	must(f.t, err, "ReadInbox "+world)
	return items
}

func (f *fx) cursor(world string) uint64 {
	f.t.Helper()
	c, err := f.s.Cursor(bg, world)
	must(f.t, err, "Cursor "+world)
	return c
}

func (f *fx) publish(world string, epoch uint64, hashes ...string) int {
	f.t.Helper()
	n, err := f.s.Publish(bg, world, epoch, intents(hashes...))
	must(f.t, err, "Publish")
	return n
}

func intents(hashes ...string) []vocab.Intent {
	out := make([]vocab.Intent, len(hashes))
	for i, h := range hashes {
		out[i] = vocab.Intent{IntentHash: h, Kind: effectKind, Params: []byte("params-" + h), Origin: "test", PolicyContextHash: "pch"}
	}
	return out
}

// effectKind is the kind intents() publishes and claim() serves.
const effectKind = "http.request"

func (f *fx) claim(worker string, n int) []vocab.EffectItem {
	f.t.Helper()
	items, err := f.s.Claim(bg, worker, []string{effectKind}, n, claimTTL)
	must(f.t, err, "Claim")
	return items
}

// claimOne claims the effect hash (it must be the only pending one of
// effectKind, or come first in queue order) and returns its item.
func (f *fx) claimOne(worker, hash string) vocab.EffectItem {
	f.t.Helper()
	items := f.claim(worker, 1)
	if len(items) != 1 || items[0].IntentHash != hash {
		f.t.Fatalf("Claim by %s = %+v, want %s", worker, items, hash)
	}
	return items[0]
}

// complete completes an effect under claim c and fails the test on error.
func (f *fx) complete(hash string, c vocab.Claim, r vocab.Receipt) (uint64, bool) {
	f.t.Helper()
	seq, dup, err := f.s.Complete(bg, hash, c, r)
	must(f.t, err, "Complete "+hash)
	return seq, dup
}

// fire fires a timer under claim c and fails the test on error.
func (f *fx) fire(hash string, c vocab.Claim) (uint64, bool) {
	f.t.Helper()
	seq, dup, err := f.s.Fire(bg, hash, c)
	must(f.t, err, "Fire "+hash)
	return seq, dup
}

// claimTimer claims the due timer hash and returns its item.
func (f *fx) claimTimer(worker, hash string) store.TimerItem {
	f.t.Helper()
	items := f.claimDue(worker, 1)
	if len(items) != 1 || items[0].IntentHash != hash {
		f.t.Fatalf("ClaimDue by %s = %+v, want %s", worker, items, hash)
	}
	return items[0]
}

func (f *fx) claimDue(worker string, n int) []store.TimerItem {
	f.t.Helper()
	items, err := f.s.ClaimDue(bg, worker, n, claimTTL)
	must(f.t, err, "ClaimDue")
	return items
}

func (f *fx) effectStatus(hash string) store.EffectStatus {
	f.t.Helper()
	st, err := f.s.EffectStatus(bg, hash)
	must(f.t, err, "EffectStatus "+hash)
	return st
}

func (f *fx) sweep() int {
	f.t.Helper()
	n, err := f.s.SweepDedupe(bg)
	must(f.t, err, "SweepDedupe")
	return n
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails unless err is a *store.Error of the given kind.
func wantErr(t testing.TB, err, kind error, what string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got %v, want %v", what, err, kind)
	}
	var se *store.Error
	if !errors.As(err, &se) {
		t.Fatalf("%s: %v is not a *store.Error", what, err)
	}
}

// near reports whether a and b are within tol of each other.
func near(a, b time.Time, tol time.Duration) bool {
	d := a.Sub(b)
	return d <= tol && d >= -tol
}

func itemSeqs(items []store.InboxItem) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

func runSeqs(evs []store.Record) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.RunSeq
	}
	return out
}

func eventIDs(evs []store.Record) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventID
	}
	return out
}

func slicesSort(s []string) { sort.Strings(s) }
