package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
)

// Model-based tests: rapid generates random operation sequences and each
// one is applied to the backend under test and to a fresh memstore, the
// reference model, in lockstep; every answer is compared (error kinds,
// flags, holders, epochs, attempts, payloads, and seqs up to a bijection,
// since runSeq and inbox seq may have gaps in another backend). Timestamps
// are compared relative to the check's start, with a tolerance.
//
// Run against memstore itself this compares memstore with memstore: it
// then checks determinism (same operations, same answers, whatever map
// order or timing) rather than conformance.
//
// One backend store serves a whole test (opening one per check would
// exhaust a database's connections); each check works in its own namespace
// (world, stream, worker and intent names prefixed by the check number) and
// leaves the global effect and timer queues empty when it ends, so every
// check starts from a clean queue. Only behaviour the other tests pin is
// generated: for instance drains carry fresh entries, and a holder never
// releases an expired lease here.
func modelTests() []testCase {
	return []testCase{
		{"ModelJournalAndLeases", testModelJournalAndLeases},
		{"ModelInboxAndEffects", testModelInboxAndEffects},
		{"ModelTimers", testModelTimers},
	}
}

// modelTick is the model's unit of time: every duration it generates is a
// number of ticks, and every lease TTL, claim TTL and timer due offset a
// whole number of ticks plus half a tick, so an expiry or due time always
// sits half a tick away from any instant the advances reach. A backend
// with a real clock (postgres: the server's) keeps moving with the wall
// clock while a check runs, and the reference's manual clock does not: the
// two agree on "expired" and "due" as long as a check's wall time stays
// under half a tick. Five minutes is far beyond any check, however loaded
// the machine (with half a second, one slow check once saw a timer due on
// PostgreSQL and not in the reference).
const modelTick = 10 * time.Minute

// ticks converts tick counts to durations.
func ticks(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n) * modelTick
	}
	return out
}

// errKinds are the sentinels an answer is compared by.
var errKinds = []error{
	store.ErrLeaseHeld, store.ErrNotHolder, store.ErrStaleEpoch, store.ErrNotAssigned, store.ErrFenced,
	store.ErrHeadMismatch, store.ErrCursorMismatch, store.ErrWorldNotFound, store.ErrWorldExists,
	store.ErrWorldPaused, store.ErrWorldArchived, store.ErrSnapshotNotFound, store.ErrSnapshotConflict,
	store.ErrClaimLost, store.ErrNotDue, store.ErrNotRetryable, store.ErrNotFound,
	store.ErrWatermarkConflict, store.ErrInvalid, store.ErrClosed, store.ErrAssignmentChanged,
}

func errKind(err error) string {
	if err == nil {
		return "ok"
	}
	for _, k := range errKinds {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "untyped error: " + err.Error()
}

// lockstep is one check: the backend under test (sut) and the reference.
type lockstep struct {
	rt      *rapid.T
	h       Harness
	sut     store.Store
	ref     *memstore.Store
	clock   *memstore.ManualClock
	p       string // this check's namespace
	sutBase time.Time
	refBase time.Time
	elapsed time.Duration // sum of advances in this check
	started time.Time     // the wall clock at the start of this check
	seqs    map[string]*seqMap
	counter int
}

// newLockstep starts check number n of a test on its backend h.
func newLockstep(rt *rapid.T, h Harness, n int) *lockstep {
	clock := memstore.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l := &lockstep{
		rt: rt, h: h, sut: h.Store, clock: clock,
		ref:  memstore.New(memstore.WithClock(clock.Now), memstore.WithDedupeRetention(h.Store.DedupeRetention())),
		p:    fmt.Sprintf("m%d-", n),
		seqs: map[string]*seqMap{},
	}
	var err error
	l.sutBase, err = h.Store.Now(bg)
	if err != nil {
		rt.Fatalf("Now: %v", err)
	}
	l.refBase = clock.Now()
	l.started = time.Now()
	return l
}

func (l *lockstep) advance(d time.Duration) {
	l.h.Advance(d)
	l.clock.Advance(d)
	l.elapsed += d
}

// at is the instant offset after the check's virtual now, on each side.
// Computing due times from a base rather than from each side's Now keeps
// instants that the reference sees as equal equal in the backend too.
func (l *lockstep) at(offset time.Duration) (sut, ref time.Time) {
	return l.sutBase.Add(l.elapsed + offset), l.refBase.Add(l.elapsed + offset)
}

// relSame compares two instants relative to each side's base.
// relSame compares two times relative to each store's start. A backend with
// a real clock (postgres: the server's) also moves with the wall clock while
// the check runs, which the reference's manual clock does not; that drift,
// plus a second, is the tolerance, so a loaded machine cannot fail the check
// while an expiry computed from the wrong base or TTL still does.
func (l *lockstep) relSame(what string, s, r time.Time) {
	tol := time.Second + time.Since(l.started)
	if d := s.Sub(l.sutBase) - r.Sub(l.refBase); d > tol || d < -tol {
		l.rt.Fatalf("%s: backend %v after its start, reference %v", what, s.Sub(l.sutBase), r.Sub(l.refBase))
	}
}

// both compares error kinds and reports whether both calls succeeded.
func (l *lockstep) both(op string, sutErr, refErr error) bool {
	if s, r := errKind(sutErr), errKind(refErr); s != r {
		l.rt.Fatalf("%s: backend answered %s (%v), reference %s (%v)", op, s, sutErr, r, refErr)
	}
	return sutErr == nil
}

func (l *lockstep) eq(what string, s, r any) {
	if fmt.Sprint(s) != fmt.Sprint(r) {
		l.rt.Fatalf("%s: backend %v, reference %v", what, s, r)
	}
}

func (l *lockstep) seqMap(name string) *seqMap {
	m := l.seqs[name]
	if m == nil {
		m = &seqMap{s2r: map[uint64]uint64{0: 0}, r2s: map[uint64]uint64{0: 0}, pairs: [][2]uint64{{0, 0}}}
		l.seqs[name] = m
	}
	return m
}

func (l *lockstep) next() int { l.counter++; return l.counter }

// seqMap is the bijection between the backend's and the reference's seqs
// of one sequence (a journal stream or an inbox), in assignment order.
type seqMap struct {
	pairs    [][2]uint64 // (backend, reference), increasing; starts at (0, 0)
	s2r, r2s map[uint64]uint64
}

// fresh records a newly assigned pair: both must be above every earlier one.
func (m *seqMap) fresh(rt *rapid.T, what string, s, r uint64) {
	last := m.pairs[len(m.pairs)-1]
	if s <= last[0] || r <= last[1] {
		rt.Fatalf("%s: new seq %d (reference %d) not above %d (%d)", what, s, r, last[0], last[1])
	}
	m.pairs = append(m.pairs, [2]uint64{s, r})
	m.s2r[s], m.r2s[r] = r, s
}

// same checks that s and r name the same element.
func (m *seqMap) same(rt *rapid.T, what string, s, r uint64) {
	if got, ok := m.s2r[s]; !ok || got != r {
		rt.Fatalf("%s: backend seq %d and reference seq %d are not the same element (backend %d ↔ reference %d)", what, s, r, s, got)
	}
}

func (m *seqMap) pick(rt *rapid.T, label string) [2]uint64 {
	return m.pairs[rapid.IntRange(0, len(m.pairs)-1).Draw(rt, label)]
}

func (m *seqMap) last() [2]uint64 { return m.pairs[len(m.pairs)-1] }

func (l *lockstep) createWorlds(ids ...string) {
	for _, id := range ids {
		_, serr := l.sut.CreateWorld(bg, l.p+"u", id, nil)
		_, rerr := l.ref.CreateWorld(bg, l.p+"u", id, nil)
		if !l.both("CreateWorld "+id, serr, rerr) {
			l.rt.Fatalf("CreateWorld %s: %v", id, serr)
		}
	}
}

func (l *lockstep) names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%s%d", l.p, prefix, i)
	}
	return out
}

// modelRecord is a valid record; the eventId varies so that a duplicate's
// answer (the first occurrence's id) is checked.
func (l *lockstep) modelRecord(key string) store.Record {
	r := rec(key)
	r.EventID = fmt.Sprintf("ev-%s-%d", key, l.next())
	r.Payload = []byte(r.EventID)
	return r
}

// compareAppended checks an append's answers and records new runSeqs.
func (l *lockstep) compareAppended(op, stream string, s, r []store.Appended) {
	if len(s) != len(r) {
		l.rt.Fatalf("%s: %d answers, reference %d", op, len(s), len(r))
	}
	m := l.seqMap(stream)
	for i := range s {
		l.eq(fmt.Sprintf("%s[%d] idempotent", op, i), s[i].Idempotent, r[i].Idempotent)
		l.eq(fmt.Sprintf("%s[%d] eventId", op, i), s[i].EventID, r[i].EventID)
		if r[i].Idempotent {
			m.same(l.rt, op, s[i].RunSeq, r[i].RunSeq)
		} else {
			m.fresh(l.rt, op, s[i].RunSeq, r[i].RunSeq)
		}
	}
}

func (l *lockstep) compareHead(stream string) (sut, ref uint64) {
	sh, serr := l.sut.Head(bg, stream)
	rh, rerr := l.ref.Head(bg, stream)
	if l.both("Head", serr, rerr) {
		l.seqMap(stream).same(l.rt, "Head "+stream, sh, rh)
	}
	return sh, rh
}

func (l *lockstep) compareRead(stream string) {
	after := l.seqMap(stream).pick(l.rt, "after")
	limit := rapid.IntRange(1, 5).Draw(l.rt, "limit")
	s, serr := l.sut.Read(bg, stream, after[0], limit)
	r, rerr := l.ref.Read(bg, stream, after[1], limit)
	if !l.both("Read", serr, rerr) {
		return
	}
	l.eq("Read length", len(s), len(r))
	for i := range s {
		l.seqMap(stream).same(l.rt, "Read runSeq", s[i].RunSeq, r[i].RunSeq)
		if s[i].EventID != r[i].EventID || s[i].IdempotencyKey != r[i].IdempotencyKey || !bytes.Equal(s[i].Payload, r[i].Payload) {
			l.rt.Fatalf("Read[%d]: backend %+v, reference %+v", i, s[i], r[i])
		}
	}
}

// ---- journal and leases ----

func testModelJournalAndLeases(t *testing.T, open Factory) {
	h := open(t)
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		l := newLockstep(rt, h, checks)
		worlds := l.names("w", 2)
		workers := l.names("worker", 3)
		streams := append([]string{l.p + "run"}, worlds...)
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
		ttls := []time.Duration{10*modelTick + modelTick/2, 30*modelTick + modelTick/2}
		// A worker acquires as one of a few incarnations (none named: the
		// empty one), so takeovers between incarnations and refusals of a
		// displaced one are drawn too.
		incs := []string{"", "inc-1", "inc-2"}
		l.createWorlds(worlds...)
		maxEpoch := map[string]uint64{}
		known := map[string]map[string]bool{} // idempotency keys stored, per stream
		releasedBy := map[string]string{}     // world -> the worker whose release freed it
		epoch := func(w string) uint64 {
			return uint64(rapid.IntRange(0, int(maxEpoch[w])+1).Draw(rt, "epoch"))
		}
		// holderOrAny picks, half the time, the world's current holder and
		// epoch (so renewals and releases also succeed), else any.
		holderOrAny := func(w string) (string, string, uint64) {
			if rapid.Bool().Draw(rt, "current holder") {
				if cur, ok, _ := l.ref.GetLease(bg, w); ok && cur.Holder != "" {
					return w, cur.Holder, cur.Epoch
				}
			}
			return w, rapid.SampledFrom(workers).Draw(rt, "worker"), epoch(w)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				stream := rapid.SampledFrom(streams).Draw(rt, "stream")
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				evs := make([]store.Record, n)
				for i := range evs {
					evs[i] = l.modelRecord(rapid.SampledFrom(keys).Draw(rt, "key"))
				}
				// A world's stream is written under a fence (the world's
				// current epoch or a stale one), the free stream without.
				// One failure at a time: which of a fence failure and a head
				// mismatch wins is not pinned, nor whether a stale fence fails
				// a batch of duplicates (nothing would be written).
				var sopts, ropts store.AppendOptions
				fenceOK := true
				if stream == l.p+"run" {
					sopts.Kind, ropts.Kind = store.FreeStream, store.FreeStream
				} else {
					e := epoch(stream)
					if rapid.Bool().Draw(rt, "current epoch") {
						if cur, ok, _ := l.ref.GetLease(bg, stream); ok {
							e = cur.Epoch
						}
					}
					fenceOK = l.fenceOK(stream, e)
					if !fenceOK && allKnown(known[stream], evs) {
						return
					}
					f := &store.Fence{World: stream, Epoch: e}
					sopts.Fence, ropts.Fence = f, f
				}
				option := rapid.IntRange(0, 3).Draw(rt, "option")
				if option != 0 && !fenceOK {
					return
				}
				switch option {
				case 1:
					sh, rh := l.compareHead(stream)
					sopts.ExpectedHead, ropts.ExpectedHead = store.Head(sh), store.Head(rh)
				case 2:
					p := l.seqMap(stream).pick(rt, "stale head")
					sopts.ExpectedHead, ropts.ExpectedHead = store.Head(p[0]), store.Head(p[1])
				case 3:
					p := l.seqMap(stream).last()
					sopts.ExpectedHead, ropts.ExpectedHead = store.Head(p[0]+1000), store.Head(p[1]+1000)
				}
				s, serr := l.sut.Append(bg, stream, evs, sopts)
				r, rerr := l.ref.Append(bg, stream, evs, ropts)
				if l.both("Append", serr, rerr) {
					l.compareAppended("Append", stream, s, r)
					if known[stream] == nil {
						known[stream] = map[string]bool{}
					}
					for _, ev := range evs {
						known[stream][ev.IdempotencyKey] = true
					}
				}
			},
			"read": func(rt *rapid.T) {
				l.compareRead(rapid.SampledFrom(streams).Draw(rt, "stream"))
			},
			"head": func(rt *rapid.T) {
				l.compareHead(rapid.SampledFrom(streams).Draw(rt, "stream"))
			},
			"acquire": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				worker := rapid.SampledFrom(workers).Draw(rt, "worker")
				ttl := rapid.SampledFrom(ttls).Draw(rt, "ttl")
				inc := store.WithIncarnation(rapid.SampledFrom(incs).Draw(rt, "incarnation"))
				s, serr := l.sut.Acquire(bg, w, worker, ttl, inc)
				r, rerr := l.ref.Acquire(bg, w, worker, ttl, inc)
				if l.both("Acquire", serr, rerr) {
					l.compareLease("Acquire", s, r)
					maxEpoch[w] = max(maxEpoch[w], r.Epoch)
				}
			},
			"renew": func(rt *rapid.T) {
				w, worker, e := holderOrAny(rapid.SampledFrom(worlds).Draw(rt, "world"))
				ttl := rapid.SampledFrom(ttls).Draw(rt, "ttl")
				if cur, ok, _ := l.ref.GetLease(bg, w); ok && cur.Holder == worker && cur.Epoch != e && !l.clock.Now().Before(cur.ExpiresAt) {
					return // expired and another epoch: which error wins is not pinned
				}
				s, serr := l.sut.Renew(bg, w, worker, e, ttl)
				r, rerr := l.ref.Renew(bg, w, worker, e, ttl)
				if l.both("Renew", serr, rerr) {
					l.compareLease("Renew", s, r)
				}
			},
			"release": func(rt *rapid.T) {
				w, worker, e := holderOrAny(rapid.SampledFrom(worlds).Draw(rt, "world"))
				cur, ok, _ := l.ref.GetLease(bg, w)
				switch {
				case ok && cur.Holder != "" && !l.clock.Now().Before(cur.ExpiresAt):
					return // releasing an expired lease: not pinned
				case ok && cur.Holder == "" && cur.Epoch == e && releasedBy[w] != worker:
					return // another worker re-releasing a released epoch: not pinned
				}
				if l.both("Release", l.sut.Release(bg, w, worker, e), l.ref.Release(bg, w, worker, e)) && cur.Holder != "" {
					releasedBy[w] = worker
				}
			},
			"acquireMany": func(rt *rapid.T) {
				// Up to four worlds, repeats and a missing one among them.
				ws := rapid.SliceOfN(rapid.SampledFrom(append([]string{l.p + "missing"}, worlds...)), 0, 4).Draw(rt, "worlds")
				worker := rapid.SampledFrom(workers).Draw(rt, "worker")
				ttl := rapid.SampledFrom(ttls).Draw(rt, "ttl")
				inc := store.WithIncarnation(rapid.SampledFrom(incs).Draw(rt, "incarnation"))
				s, serr := l.sut.AcquireLeases(bg, worker, ws, ttl, inc)
				r, rerr := l.ref.AcquireLeases(bg, worker, ws, ttl, inc)
				if l.both("AcquireLeases", serr, rerr) {
					l.compareAcquired(s, r)
					for _, a := range r {
						maxEpoch[a.World] = max(maxEpoch[a.World], a.Lease.Epoch)
					}
				}
			},
			"getLease": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				s, sok, serr := l.sut.GetLease(bg, w)
				r, rok, rerr := l.ref.GetLease(bg, w)
				if l.both("GetLease", serr, rerr) {
					l.eq("GetLease ok", sok, rok)
					l.eq("GetLease epoch", s.Epoch, r.Epoch)
					// An expired lease's record may or may not show its last
					// holder: compare holders of live or released leases.
					if r.Holder == "" || l.clock.Now().Before(r.ExpiresAt) {
						l.eq("GetLease holder", s.Holder, r.Holder)
						l.eq("GetLease incarnation", s.Incarnation, r.Incarnation)
					}
				}
			},
			"assign": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				a := store.Assignment{DesiredWorker: rapid.SampledFrom(append([]string{""}, workers...)).Draw(rt, "desired")}
				l.both("Assign", l.sut.Assign(bg, w, a, nil), l.ref.Assign(bg, w, a, nil))
			},
			"unassign": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				l.both("Unassign", l.sut.Unassign(bg, w, nil), l.ref.Unassign(bg, w, nil))
			},
			"compareAndAssign": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				maybe := func(label string) *store.Assignment {
					d := rapid.SampledFrom(append([]string{"none", ""}, workers...)).Draw(rt, label)
					if d == "none" {
						return nil
					}
					return &store.Assignment{DesiredWorker: d}
				}
				prev, next := maybe("prev"), maybe("next")
				l.both("CompareAndAssign", l.sut.CompareAndAssign(bg, w, prev, next, nil), l.ref.CompareAndAssign(bg, w, prev, next, nil))
			},
			"workerWorlds": func(rt *rapid.T) {
				worker := rapid.SampledFrom(workers).Draw(rt, "worker")
				s, serr := l.sut.ListWorkerWorlds(bg, worker, "", 100)
				r, rerr := l.ref.ListWorkerWorlds(bg, worker, "", 100)
				if l.both("ListWorkerWorlds", serr, rerr) {
					l.eq("ListWorkerWorlds", workerWorldsSummary(s), workerWorldsSummary(r))
				}
			},
			"advance": func(rt *rapid.T) {
				l.advance(rapid.SampledFrom(ticks(1, 2, 5, 10, 20, 40)).Draw(rt, "d"))
			},
		})
	})
}

// compareAcquired compares two AcquireLeases answers world by world.
func (l *lockstep) compareAcquired(s, r []store.AcquireResult) {
	l.eq("AcquireLeases length", len(s), len(r))
	for i := range s {
		op := fmt.Sprintf("AcquireLeases[%d] %s", i, r[i].World)
		l.eq(op+" world", s[i].World, r[i].World)
		if l.both(op, s[i].Err, r[i].Err) {
			l.compareLease(op, s[i].Lease, r[i].Lease)
			l.eq(op+" universe", s[i].Universe, r[i].Universe)
			l.eq(op+" backlog", s[i].Backlog, r[i].Backlog)
		}
	}
}

func (l *lockstep) compareLease(op string, s, r store.Lease) {
	l.eq(op+" world", s.World, r.World)
	l.eq(op+" holder", s.Holder, r.Holder)
	l.eq(op+" incarnation", s.Incarnation, r.Incarnation)
	l.eq(op+" epoch", s.Epoch, r.Epoch)
	l.relSame(op+" expiresAt", s.ExpiresAt, r.ExpiresAt)
}

// ---- inbox and effects ----

const modelClaimTTL = 10*modelTick + modelTick/2

// drainQueues empties the backend's global effect and timer queues at the
// end of a check (see modelTests): past every claim and due time a check
// generates, everything is claimable.
func drainQueues(h Harness, worker string) {
	h.Advance(100 * modelTick)
	_, _ = h.Store.ReapEffects(bg)
	_, _ = h.Store.ReapTimers(bg)
	for i := 0; i < 100; i++ {
		items, err := h.Store.Claim(bg, worker, []string{effectKind}, 100, time.Hour)
		if err != nil || len(items) == 0 {
			break
		}
		for _, it := range items {
			_, _, _ = h.Store.Complete(bg, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
		}
	}
	for i := 0; i < 100; i++ {
		items, err := h.Store.ClaimDue(bg, worker, 100, time.Hour)
		if err != nil || len(items) == 0 {
			break
		}
		for _, it := range items {
			_, _, _ = h.Store.Fire(bg, it.IntentHash, it.ClaimOf())
		}
	}
}

// leaseAll has one worker lease every world for the whole check (the
// longest TTL there is: thousands of ticks).
func (l *lockstep) leaseAll(worlds []string) map[string]uint64 {
	epochs := map[string]uint64{}
	for _, w := range worlds {
		s, serr := l.sut.Acquire(bg, w, l.p+"host", store.MaxTTL)
		r, rerr := l.ref.Acquire(bg, w, l.p+"host", store.MaxTTL)
		if !l.both("Acquire", serr, rerr) {
			l.rt.Fatalf("Acquire %s: %v", w, serr)
		}
		l.compareLease("Acquire", s, r)
		epochs[w] = r.Epoch
	}
	return epochs
}

func testModelInboxAndEffects(t *testing.T, open Factory) {
	h := open(t)
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		l := newLockstep(rt, h, checks)
		defer drainQueues(h, l.p+"cleanup")
		worlds := l.names("w", 2)
		l.createWorlds(worlds...)
		epochs := l.leaseAll(worlds)
		hashes := l.names("i", 6)
		adapters := l.names("adapter", 2)
		inboxKeys := []string{"", "", "k0", "k1", "k2"}
		published := map[string]bool{}
		claims := map[string]vocab.Claim{} // the latest claim handed out, per hash

		compareItems := func(op, w string, s, r []store.InboxItem) {
			l.eq(op+" length", len(s), len(r))
			for i := range s {
				l.seqMap("inbox:"+w).same(rt, op, s[i].Seq, r[i].Seq)
				if s[i].Kind != r[i].Kind || s[i].DedupeKey != r[i].DedupeKey || !bytes.Equal(s[i].Payload, r[i].Payload) || s[i].World != r[i].World {
					rt.Fatalf("%s[%d]: backend %+v, reference %+v", op, i, s[i], r[i])
				}
			}
		}
		// inboxSeq records an inbox seq answered by an enqueue-like call.
		inboxSeq := func(op, w string, s, r uint64, dup bool) {
			if dup {
				l.seqMap("inbox:"+w).same(rt, op, s, r)
			} else {
				l.seqMap("inbox:"+w).fresh(rt, op, s, r)
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"acquireMany": func(rt *rapid.T) {
				// The host holds every world: its AcquireLeases keeps each
				// lease and says which inboxes have a backlog; another
				// worker is refused.
				ws := rapid.SliceOfN(rapid.SampledFrom(worlds), 0, 3).Draw(rt, "worlds")
				worker := rapid.SampledFrom([]string{l.p + "host", l.p + "host", l.p + "other"}).Draw(rt, "worker")
				s, serr := l.sut.AcquireLeases(bg, worker, ws, store.MaxTTL)
				r, rerr := l.ref.AcquireLeases(bg, worker, ws, store.MaxTTL)
				if l.both("AcquireLeases", serr, rerr) {
					l.compareAcquired(s, r)
				}
			},
			"enqueue": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				item := store.InboxItem{Kind: "event", DedupeKey: rapid.SampledFrom(inboxKeys).Draw(rt, "key"), Payload: []byte(fmt.Sprint("p", l.next()))}
				ss, sdup, serr := l.sut.Enqueue(bg, w, item)
				rs, rdup, rerr := l.ref.Enqueue(bg, w, item)
				if l.both("Enqueue", serr, rerr) {
					l.eq("Enqueue dup", sdup, rdup)
					inboxSeq("Enqueue", w, ss, rs, rdup)
				}
			},
			"readInbox": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				after := l.seqMap("inbox:"+w).pick(rt, "after")
				limit := rapid.IntRange(1, 5).Draw(rt, "limit")
				s, serr := l.sut.ReadInbox(bg, w, after[0], limit)
				r, rerr := l.ref.ReadInbox(bg, w, after[1], limit)
				if l.both("ReadInbox", serr, rerr) {
					compareItems("ReadInbox", w, s, r)
				}
			},
			"drain": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				inbox := l.seqMap("inbox:" + w)
				sc, serr := l.sut.Cursor(bg, w)
				rc, rerr := l.ref.Cursor(bg, w)
				if !l.both("Cursor", serr, rerr) {
					return
				}
				inbox.same(rt, "Cursor", sc, rc)
				sh, rh := l.compareHead(w)
				expCursor, expHead := [2]uint64{sc, rc}, [2]uint64{sh, rh}
				e := epochs[w]
				// The new cursor: a later seq (or one past the last, refused).
				var later [][2]uint64
				for _, p := range inbox.pairs {
					if p[1] > rc {
						later = append(later, p)
					}
				}
				last := inbox.last()
				newCursor := [2]uint64{last[0] + 1, last[1] + 1}
				if len(later) > 0 {
					newCursor = rapid.SampledFrom(later).Draw(rt, "new cursor")
				}
				// At most one fault: which check wins is not pinned.
				switch rapid.IntRange(0, 5).Draw(rt, "fault") {
				case 1:
					expCursor = inbox.pick(rt, "stale cursor")
				case 2:
					expHead = l.seqMap(w).pick(rt, "stale head")
				case 3:
					newCursor = [2]uint64{last[0] + 1, last[1] + 1}
				case 4:
					e++
				}
				faults := 0
				for _, fault := range []bool{expCursor != [2]uint64{sc, rc}, expHead != [2]uint64{sh, rh}, newCursor[1] > last[1], e != epochs[w]} {
					if fault {
						faults++
					}
				}
				if faults > 1 || expCursor[1] > newCursor[1] {
					return // two faults after all, or a cursor moving back: not pinned
				}
				entries := make([]store.Record, rapid.IntRange(1, 2).Draw(rt, "entries"))
				for i := range entries {
					entries[i] = l.modelRecord(fmt.Sprint("d", l.next()))
				}
				s, serr := l.sut.DrainToJournal(bg, w, e, expCursor[0], expHead[0], newCursor[0], entries)
				r, rerr := l.ref.DrainToJournal(bg, w, e, expCursor[1], expHead[1], newCursor[1], entries)
				if l.both("DrainToJournal", serr, rerr) {
					l.compareAppended("DrainToJournal", w, s, r)
				}
			},
			"commit": func(rt *rapid.T) {
				// A fault-free cycle: drain some of the inbox into entries
				// and publish intents, in one Commit.
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				inbox := l.seqMap("inbox:" + w)
				sc, serr := l.sut.Cursor(bg, w)
				rc, rerr := l.ref.Cursor(bg, w)
				if !l.both("Cursor", serr, rerr) {
					return
				}
				var later [][2]uint64
				for _, p := range inbox.pairs {
					if p[1] >= rc {
						later = append(later, p)
					}
				}
				if len(later) == 0 {
					return
				}
				newCursor := rapid.SampledFrom(later).Draw(rt, "new cursor")
				sh, rh := l.compareHead(w)
				entries := make([]store.Record, rapid.IntRange(0, 2).Draw(rt, "entries"))
				for i := range entries {
					entries[i] = l.modelRecord(fmt.Sprint("c", l.next()))
				}
				var hs []string
				for i := rapid.IntRange(0, 2).Draw(rt, "intents"); i > 0; i-- {
					hs = append(hs, rapid.SampledFrom(hashes).Draw(rt, "hash"))
				}
				sb := store.CommitBatch{ExpectedCursor: sc, NewCursor: newCursor[0], ExpectedHead: sh, Entries: entries, Intents: intents(hs...)}
				rb := store.CommitBatch{ExpectedCursor: rc, NewCursor: newCursor[1], ExpectedHead: rh, Entries: entries, Intents: intents(hs...)}
				s, serr := l.sut.Commit(bg, w, epochs[w], sb)
				r, rerr := l.ref.Commit(bg, w, epochs[w], rb)
				if l.both("Commit", serr, rerr) {
					l.compareAppended("Commit", w, s.Appended, r.Appended)
					l.seqMap(w).same(rt, "Commit head", s.Head, r.Head)
					l.eq("Commit published", s.Published, r.Published)
					for _, h := range hs {
						published[h] = true
					}
				}
			},
			"retry": func(rt *rapid.T) {
				hash := pickBiased(rt, published, hashes)
				s, serr := l.sut.RetryEffect(bg, hash, "model")
				r, rerr := l.ref.RetryEffect(bg, hash, "model")
				if l.both("RetryEffect", serr, rerr) {
					l.eq("RetryEffect", fmt.Sprint(s.State, s.Retries, s.Attempts, s.RetryReason), fmt.Sprint(r.State, r.Retries, r.Attempts, r.RetryReason))
				}
			},
			"publish": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				e := epochs[w]
				if rapid.IntRange(0, 5).Draw(rt, "stale epoch") == 0 {
					e++
				}
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				var hs []string
				for i := 0; i < n; i++ {
					hs = append(hs, rapid.SampledFrom(hashes).Draw(rt, "hash"))
				}
				if e != epochs[w] && allKnownHashes(published, hs) {
					return // a stale publish of nothing new: fenced or a no-op, not pinned
				}
				s, serr := l.sut.Publish(bg, w, e, intents(hs...))
				r, rerr := l.ref.Publish(bg, w, e, intents(hs...))
				if l.both("Publish", serr, rerr) {
					l.eq("Publish count", s, r)
					for _, h := range hs {
						published[h] = true
					}
				}
			},
			"claim": func(rt *rapid.T) {
				worker := rapid.SampledFrom(adapters).Draw(rt, "adapter")
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				s, serr := l.sut.Claim(bg, worker, []string{effectKind}, n, modelClaimTTL)
				r, rerr := l.ref.Claim(bg, worker, []string{effectKind}, n, modelClaimTTL)
				if !l.both("Claim", serr, rerr) {
					return
				}
				l.eq("Claim length", len(s), len(r))
				for i := range s {
					if s[i].IntentHash != r[i].IntentHash || s[i].World != r[i].World || s[i].Attempt != r[i].Attempt ||
						s[i].ClaimedBy != r[i].ClaimedBy || s[i].Kind != r[i].Kind || !bytes.Equal(s[i].Params, r[i].Params) {
						rt.Fatalf("Claim[%d]: backend %+v, reference %+v", i, s[i], r[i])
					}
					if i > 0 && s[i].Seq <= s[i-1].Seq {
						rt.Fatalf("Claim out of queue order: %+v", s)
					}
					l.relSame("ClaimExpires", s[i].ClaimExpires, r[i].ClaimExpires)
					claims[r[i].IntentHash] = r[i].ClaimOf()
				}
			},
			"complete": func(rt *rapid.T) {
				hash := pickBiased(rt, published, hashes)
				rc := vocab.Receipt{Status: rapid.SampledFrom([]vocab.ReceiptStatus{vocab.ReceiptOK, vocab.ReceiptError, vocab.ReceiptTimeout}).Draw(rt, "status"), Payload: []byte(fmt.Sprint("r", l.next()))}
				c := drawClaim(rt, claims[hash], adapters)
				ss, sdup, serr := l.sut.Complete(bg, hash, c, rc)
				rs, rdup, rerr := l.ref.Complete(bg, hash, c, rc)
				if l.both("Complete", serr, rerr) {
					l.eq("Complete dup", sdup, rdup)
					st, err := l.ref.EffectStatus(bg, hash)
					if err != nil {
						rt.Fatalf("reference EffectStatus: %v", err)
					}
					inboxSeq("Complete", st.World, ss, rs, rdup)
				}
			},
			"complete_many": func(rt *rapid.T) {
				n := rapid.IntRange(0, 4).Draw(rt, "n")
				cs := make([]vocab.Completion, n)
				for i := range cs {
					hash := pickBiased(rt, published, hashes)
					cs[i] = vocab.Completion{IntentHash: hash, Claim: drawClaim(rt, claims[hash], adapters),
						Receipt: vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte(fmt.Sprint("r", l.next()))}}
				}
				s, serr := l.sut.CompleteMany(bg, cs)
				r, rerr := l.ref.CompleteMany(bg, cs)
				if !l.both("CompleteMany", serr, rerr) {
					return
				}
				l.eq("CompleteMany length", len(s), len(r))
				for i := range r {
					if l.both("CompleteMany item", s[i].Err, r[i].Err) {
						l.eq("CompleteMany dup", s[i].Dup, r[i].Dup)
						st, err := l.ref.EffectStatus(bg, cs[i].IntentHash)
						if err != nil {
							rt.Fatalf("reference EffectStatus: %v", err)
						}
						inboxSeq("CompleteMany", st.World, s[i].InboxSeq, r[i].InboxSeq, r[i].Dup)
					}
				}
			},
			"resolve": func(rt *rapid.T) {
				hash := pickBiased(rt, published, hashes)
				rc := vocab.Receipt{Status: rapid.SampledFrom([]vocab.ReceiptStatus{vocab.ReceiptOK, vocab.ReceiptError, vocab.ReceiptTimeout}).Draw(rt, "status"), Payload: []byte(fmt.Sprint("o", l.next()))}
				reason := rapid.SampledFrom([]string{"", "operator"}).Draw(rt, "reason")
				ss, sdup, serr := l.sut.Resolve(bg, hash, rc, reason)
				rs, rdup, rerr := l.ref.Resolve(bg, hash, rc, reason)
				if l.both("Resolve", serr, rerr) {
					l.eq("Resolve dup", sdup, rdup)
					st, err := l.ref.EffectStatus(bg, hash)
					if err != nil {
						rt.Fatalf("reference EffectStatus: %v", err)
					}
					inboxSeq("Resolve", st.World, ss, rs, rdup)
				}
			},
			"reap": func(rt *rapid.T) {
				s, serr := l.sut.ReapEffects(bg)
				r, rerr := l.ref.ReapEffects(bg)
				if l.both("ReapEffects", serr, rerr) {
					l.eq("ReapEffects count", s, r)
				}
			},
			"status": func(rt *rapid.T) {
				hash := rapid.SampledFrom(hashes).Draw(rt, "hash")
				s, serr := l.sut.EffectStatus(bg, hash)
				r, rerr := l.ref.EffectStatus(bg, hash)
				if !l.both("EffectStatus", serr, rerr) {
					return
				}
				if s.State != r.State || s.Attempts != r.Attempts || s.World != r.World || (s.Receipt == nil) != (r.Receipt == nil) ||
					s.Retries != r.Retries || s.Resolved != r.Resolved || s.ResolveReason != r.ResolveReason {
					rt.Fatalf("EffectStatus: backend %+v, reference %+v", s, r)
				}
				if r.Receipt != nil {
					if s.Receipt.Status != r.Receipt.Status || !bytes.Equal(s.Receipt.Payload, r.Receipt.Payload) {
						rt.Fatalf("EffectStatus receipt: backend %+v, reference %+v", s.Receipt, r.Receipt)
					}
					l.seqMap("inbox:"+r.World).same(rt, "EffectStatus inboxSeq", s.InboxSeq, r.InboxSeq)
				}
			},
			"advance": func(rt *rapid.T) {
				l.advance(rapid.SampledFrom(ticks(1, 5, 10, 20)).Draw(rt, "d"))
			},
		})
	})
}

// ---- timers ----

func testModelTimers(t *testing.T, open Factory) {
	h := open(t)
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		l := newLockstep(rt, h, checks)
		defer drainQueues(h, l.p+"cleanup")
		worlds := l.names("w", 2)
		l.createWorlds(worlds...)
		epochs := l.leaseAll(worlds)
		hashes := l.names("t", 6)
		workers := l.names("tw", 2)
		// What the model knows of each hash, to generate only pinned calls:
		// CancelTimer of a live timer by its own world, and Fire of a timer
		// that was claimed (so it was due), delivered, cancelled or never
		// scheduled.
		owner := map[string]string{} // hash -> world, once scheduled
		claimed, delivered, cancelled := map[string]bool{}, map[string]bool{}, map[string]bool{}
		timerClaims := map[string]vocab.Claim{} // the latest claim handed out, per hash

		rt.Repeat(map[string]func(*rapid.T){
			"schedule": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				hash := rapid.SampledFrom(hashes).Draw(rt, "hash")
				if cancelled[hash] {
					return // whether a cancelled hash may be scheduled again is not pinned
				}
				offset := rapid.SampledFrom(ticks(0, 3, 10, 20)).Draw(rt, "due in") + modelTick/2
				sAt, rAt := l.at(offset)
				e := epochs[w]
				if rapid.IntRange(0, 5).Draw(rt, "stale epoch") == 0 {
					e++
				}
				if _, ok := owner[hash]; ok && e != epochs[w] {
					return // a stale schedule of a known hash: fenced or a no-op, not pinned
				}
				payload := []byte(fmt.Sprint("tick", l.next()))
				if l.both("Schedule", l.sut.Schedule(bg, w, e, hash, sAt, payload), l.ref.Schedule(bg, w, e, hash, rAt, payload)) {
					if _, ok := owner[hash]; !ok {
						owner[hash] = w
					}
				}
			},
			"cancel": func(rt *rapid.T) {
				hash := rapid.SampledFrom(hashes).Draw(rt, "hash")
				w, ok := owner[hash]
				if !ok || delivered[hash] || cancelled[hash] {
					return
				}
				e := epochs[w]
				if rapid.IntRange(0, 5).Draw(rt, "stale epoch") == 0 {
					e++
				}
				if l.both("CancelTimer", l.sut.CancelTimer(bg, w, e, hash), l.ref.CancelTimer(bg, w, e, hash)) {
					cancelled[hash] = true
				}
			},
			"claimDue": func(rt *rapid.T) {
				worker := rapid.SampledFrom(workers).Draw(rt, "worker")
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				s, serr := l.sut.ClaimDue(bg, worker, n, modelClaimTTL)
				r, rerr := l.ref.ClaimDue(bg, worker, n, modelClaimTTL)
				if !l.both("ClaimDue", serr, rerr) {
					return
				}
				l.eq("ClaimDue length", len(s), len(r))
				for i := range s {
					if s[i].IntentHash != r[i].IntentHash || s[i].World != r[i].World || s[i].Attempt != r[i].Attempt ||
						s[i].ClaimedBy != r[i].ClaimedBy || !bytes.Equal(s[i].Payload, r[i].Payload) {
						rt.Fatalf("ClaimDue[%d]: backend %+v, reference %+v", i, s[i], r[i])
					}
					l.relSame("DeliverAt", s[i].DeliverAt, r[i].DeliverAt)
					l.relSame("ClaimExpires", s[i].ClaimExpires, r[i].ClaimExpires)
					claimed[r[i].IntentHash] = true
					timerClaims[r[i].IntentHash] = r[i].ClaimOf()
				}
			},
			"fire": func(rt *rapid.T) {
				hash := pickBiased(rt, claimed, hashes)
				// A timer that is not due was never claimed: ErrNotDue comes
				// before the claim check (see the package doc).
				c := drawClaim(rt, timerClaims[hash], workers)
				ss, sdup, serr := l.sut.Fire(bg, hash, c)
				rs, rdup, rerr := l.ref.Fire(bg, hash, c)
				if l.both("Fire", serr, rerr) {
					l.eq("Fire dup", sdup, rdup)
					m := l.seqMap("inbox:" + owner[hash])
					if rdup {
						m.same(rt, "Fire", ss, rs)
					} else {
						m.fresh(rt, "Fire", ss, rs)
					}
					delivered[hash] = true
				}
			},
			"fireHeld": func(rt *rapid.T) {
				hash := rapid.SampledFrom(hashes).Draw(rt, "hash")
				// Mostly the holder of the timer's own world; sometimes
				// the other world's holder, or a stale epoch.
				w, ok := owner[hash]
				if !ok || rapid.IntRange(0, 4).Draw(rt, "other world") == 0 {
					w = rapid.SampledFrom(worlds).Draw(rt, "world")
				}
				e := epochs[w]
				if rapid.IntRange(0, 5).Draw(rt, "stale epoch") == 0 {
					e++
				}
				s, serr := l.sut.FireHeld(bg, w, e, hash)
				r, rerr := l.ref.FireHeld(bg, w, e, hash)
				if !l.both("FireHeld", serr, rerr) {
					return
				}
				l.eq("FireHeld dup", s.Dup, r.Dup)
				m := l.seqMap("inbox:" + w)
				if r.Dup {
					m.same(rt, "FireHeld", s.Item.Seq, r.Item.Seq)
				} else {
					m.fresh(rt, "FireHeld", s.Item.Seq, r.Item.Seq)
					if s.Item.World != r.Item.World || s.Item.Kind != r.Item.Kind || s.Item.DedupeKey != r.Item.DedupeKey ||
						!bytes.Equal(s.Item.Payload, r.Item.Payload) {
						rt.Fatalf("FireHeld item: backend %+v, reference %+v", s.Item, r.Item)
					}
				}
				l.relSame("FireHeld DueAt", s.DueAt, r.DueAt)
				delivered[hash] = true
			},
			"reap": func(rt *rapid.T) {
				s, serr := l.sut.ReapTimers(bg)
				r, rerr := l.ref.ReapTimers(bg)
				if l.both("ReapTimers", serr, rerr) {
					l.eq("ReapTimers count", s, r)
				}
			},
			"readInbox": func(rt *rapid.T) {
				w := rapid.SampledFrom(worlds).Draw(rt, "world")
				s, serr := l.sut.ReadInbox(bg, w, 0, 100)
				r, rerr := l.ref.ReadInbox(bg, w, 0, 100)
				if !l.both("ReadInbox", serr, rerr) {
					return
				}
				l.eq("ReadInbox length", len(s), len(r))
				for i := range s {
					l.seqMap("inbox:"+w).same(rt, "ReadInbox", s[i].Seq, r[i].Seq)
					if s[i].Kind != r[i].Kind || s[i].DedupeKey != r[i].DedupeKey || !bytes.Equal(s[i].Payload, r[i].Payload) {
						rt.Fatalf("ReadInbox[%d]: backend %+v, reference %+v", i, s[i], r[i])
					}
				}
			},
			"advance": func(rt *rapid.T) {
				l.advance(rapid.SampledFrom(ticks(1, 3, 10, 20)).Draw(rt, "d"))
			},
		})
	})
}

// drawClaim draws the claim a completion presents: mostly the latest one
// handed out (when there is one), else any worker's at a small attempt.
func drawClaim(rt *rapid.T, latest vocab.Claim, workers []string) vocab.Claim {
	if latest.Worker != "" && rapid.IntRange(0, 3).Draw(rt, "latest claim") > 0 {
		return latest
	}
	return vocab.Claim{Worker: rapid.SampledFrom(workers).Draw(rt, "claim worker"), Attempt: rapid.IntRange(1, 3).Draw(rt, "claim attempt")}
}

// workerWorldsSummary renders a ListWorkerWorlds page comparably: the
// worlds, their lease epochs and assignments (the holder of an expired
// lease is not compared, as in getLease).
func workerWorldsSummary(ws []store.WorkerWorld) string {
	out := ""
	for _, w := range ws {
		out += w.World
		if w.Lease != nil {
			out += fmt.Sprintf(" lease@%d", w.Lease.Epoch)
		}
		if w.Assignment != nil {
			out += " assigned:" + w.Assignment.DesiredWorker
		}
		out += "; "
	}
	return out
}

// fenceOK reports whether a write fenced by (w, e) passes, per the reference.
func (l *lockstep) fenceOK(w string, e uint64) bool {
	cur, ok, err := l.ref.GetLease(bg, w)
	return err == nil && ok && cur.Holder != "" && cur.Epoch == e && l.clock.Now().Before(cur.ExpiresAt)
}

func allKnown(known map[string]bool, evs []store.Record) bool {
	for _, ev := range evs {
		if !known[ev.IdempotencyKey] {
			return false
		}
	}
	return true
}

func allKnownHashes(known map[string]bool, hs []string) bool {
	for _, h := range hs {
		if !known[h] {
			return false
		}
	}
	return true
}

// pickBiased draws, most of the time, one of the names in favoured (in
// sorted order, so that a draw sequence always means the same name), else
// any of all.
func pickBiased(rt *rapid.T, favoured map[string]bool, all []string) string {
	var fav []string
	for _, h := range all {
		if favoured[h] {
			fav = append(fav, h)
		}
	}
	if len(fav) > 0 && rapid.IntRange(0, 3).Draw(rt, "favoured") > 0 {
		return rapid.SampledFrom(fav).Draw(rt, "name")
	}
	return rapid.SampledFrom(all).Draw(rt, "name")
}
