//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// figure prints a measured figure for the lead to quote: in the test log
// and as a line on stdout, both with the prefix "cluster:".
func (c *cluster) figure(format string, a ...any) {
	line := "cluster: " + c.t.Name() + ": " + fmt.Sprintf(format, a...)
	c.t.Log(line)
	fmt.Println(line)
}

// createWorlds creates the worlds through the API.
func (c *cluster) createWorlds(ids []string) {
	c.t.Helper()
	for _, id := range ids {
		if _, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
			w, _, err := cl.CreateWorld(ctx, id, clusterUniverse)
			return w, err
		}); err != nil {
			c.t.Fatalf("create world %s: %v", id, err)
		}
	}
}

// holders reads, through the API's leases endpoint, which worker holds an
// unexpired lease on each of ids, and at which epoch.
func (c *cluster) holders(ids []string) (map[string]api.Lease, error) {
	v, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) { return cl.Leases(ctx, "") })
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	now := time.Now()
	out := map[string]api.Lease{}
	for _, r := range v.([]api.LeaseRow) {
		if want[r.World] && r.Lease != nil && r.Lease.Holder == r.Worker && r.Lease.ExpiresAt.After(now) {
			out[r.World] = *r.Lease
		}
	}
	return out, nil
}

// awaitPlaced waits until every world is held by one of procs and the
// placement has settled (each is held where it is assigned).
func (c *cluster) awaitPlaced(ids []string, procs []*child, limit time.Duration) map[string]api.Lease {
	c.t.Helper()
	ok := map[string]bool{}
	for _, p := range procs {
		ok[p.worker] = true
	}
	var last map[string]api.Lease
	var lastErr error
	if !poll(limit, 100*time.Millisecond, func() bool {
		last, lastErr = c.holders(ids)
		if lastErr != nil || len(last) != len(ids) {
			return false
		}
		for _, l := range last {
			if !ok[l.Holder] {
				return false
			}
		}
		return true
	}) {
		c.t.Fatalf("worlds not all held by %v within %v: %d of %d held (%v); last error %v", keys(ok), limit, len(last), len(ids), last, lastErr)
	}
	return last
}

// busiest returns the running process that holds the most of ids (the
// lowest worker id on a tie) and its leases on them.
func (c *cluster) busiest(ids []string) (*child, map[string]store.Lease) {
	c.t.Helper()
	hs, err := c.holders(ids)
	if err != nil {
		c.t.Fatalf("read leases: %v", err)
	}
	by := map[string]map[string]store.Lease{}
	for w, l := range hs {
		if by[l.Holder] == nil {
			by[l.Holder] = map[string]store.Lease{}
		}
		by[l.Holder][w] = store.Lease{World: w, Holder: l.Holder, Epoch: l.Epoch, ExpiresAt: l.ExpiresAt}
	}
	best := ""
	for _, worker := range keys(by) {
		if best == "" || len(by[worker]) > len(by[best]) {
			best = worker
		}
	}
	if best == "" {
		c.t.Fatalf("nobody holds any of the worlds")
	}
	return c.byWorker(best), by[best]
}

// orchestrator names the worker whose orchestrator acts (holds the
// orchestrator lease), for the log: a failover of the acting
// orchestrator's own worker waits for that lease too.
func (c *cluster) orchestrator() string {
	l, ok, err := c.db.st.GetLease(context.Background(), plane.OrchestratorWorld)
	switch {
	case err != nil:
		return "unknown (" + err.Error() + ")"
	case !ok || l.Holder == "":
		return "none"
	}
	return l.Holder
}

// moved is how a world left its holder: when it was first seen assigned
// to a successor (placed; the same as after if it was seen held at once)
// and held by it (after), the lease it was seen held with, and the expiry
// of the old holder's lease, the latest seen.
type moved struct {
	placed, after time.Duration
	lease         store.Lease
	oldExpiry     time.Time
}

// acquiredAt is when the successor acquired the lease, by the store's
// clock: a lease expires its TTL after its acquisition or last renewal,
// and the first sighting comes long before the first renewal (a third of
// the TTL before expiry).
func (m moved) acquiredAt() time.Time { return m.lease.ExpiresAt.Add(-leaseTTL) }

// awaitMoves polls the lease records (the test's own store handle, every
// interval) until every world of from (the leases worker held) is held,
// unexpired, by one of to at a higher epoch. It returns how each moved,
// timed from start. It also follows the old leases while they are listed,
// for the expiry each last had.
func (c *cluster) awaitMoves(worker string, from map[string]store.Lease, to []*child, start time.Time, limit, interval time.Duration) map[string]moved {
	c.t.Helper()
	got := map[string]moved{}
	placed := map[string]time.Duration{}
	oldExpiry := map[string]time.Time{}
	for w, l := range from {
		oldExpiry[w] = l.ExpiresAt
	}
	ok := poll(limit, interval, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		now, err := c.db.st.Now(ctx)
		if err != nil {
			return false
		}
		rows, err := c.db.st.ListWorkerWorlds(ctx, worker, "", 1000)
		if err != nil {
			return false
		}
		for _, r := range rows {
			if old, want := from[r.World]; want && r.Lease != nil && r.Lease.Holder == worker && r.Lease.Epoch == old.Epoch &&
				r.Lease.ExpiresAt.After(oldExpiry[r.World]) {
				oldExpiry[r.World] = r.Lease.ExpiresAt
			}
		}
		for _, p := range to {
			rows, err := c.db.st.ListWorkerWorlds(ctx, p.worker, "", 1000)
			if err != nil {
				return false
			}
			at := time.Since(start)
			for _, r := range rows {
				old, want := from[r.World]
				if _, seen := got[r.World]; !want || seen {
					continue
				}
				if _, seen := placed[r.World]; !seen && r.Assignment != nil && r.Assignment.DesiredWorker == p.worker {
					placed[r.World] = at
				}
				if r.Lease != nil && r.Lease.Holder == p.worker && r.Lease.Epoch > old.Epoch && r.Lease.ExpiresAt.After(now) {
					got[r.World] = moved{placed: placed[r.World], after: at, lease: *r.Lease, oldExpiry: oldExpiry[r.World]}
				}
			}
		}
		return len(got) == len(from)
	})
	if !ok {
		ctx := context.Background()
		var missing []string
		for _, w := range keys(from) {
			if _, seen := got[w]; !seen {
				l, _, lerr := c.db.st.GetLease(ctx, w)
				a, _, aerr := c.db.st.GetAssignment(ctx, w)
				missing = append(missing, fmt.Sprintf("%s (was %s's at epoch %d; now lease %s@%d expiring %v (%v), assigned to %q (%v))",
					w, worker, from[w].Epoch, l.Holder, l.Epoch, l.ExpiresAt, lerr, a.DesiredWorker, aerr))
			}
		}
		now, _ := c.db.st.Now(ctx)
		c.t.Fatalf("%d of %d worlds not taken over within %v (store clock now %v): %s", len(missing), len(from), limit, now, strings.Join(missing, "; "))
	}
	return got
}

// checkNoOverlap checks, on the store's clock, that no successor acquired
// a lease before the old holder's had expired: with a crashed or paused
// holder there is never a moment with two holders.
func (c *cluster) checkNoOverlap(moves map[string]moved) {
	c.t.Helper()
	for _, w := range keys(moves) {
		m := moves[w]
		if m.acquiredAt().Before(m.oldExpiry) {
			c.t.Errorf("%s: %s acquired it at epoch %d at %v, before the old holder's lease expired at %v",
				w, m.lease.Holder, m.lease.Epoch, m.acquiredAt(), m.oldExpiry)
		}
	}
}

// quantiles summarises durations: p50, p95, p99 and max, nearest rank.
func quantiles(ds []time.Duration) (p50, p95, p99, mx time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.5) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return q(0.50), q(0.95), q(0.99), s[len(s)-1]
}

func durations(ms map[string]moved) []time.Duration {
	out := make([]time.Duration, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.after)
	}
	return out
}

// worldReport is one world read back from the store: its journal, inbox
// and cursor, and its state restored by the plane.
type worldReport struct {
	id      string
	state   tally
	marks   map[string]int64 // v2's marks (nil on v1)
	version uint64           // the version its state is on (world.StateVersion; 0: never upgraded)
	journal []event.Envelope
	inbox   map[uint64]store.InboxItem
	lastSeq uint64 // the inbox's last seq
	cursor  uint64
	steps   map[uint64]int // inbox seq → journal records that drained it
	direct  int            // records of timer firings stepped by their holder, without an inbox item (seq 0)
	// upgrades are the journal's WorldUpgraded records, in order.
	upgrades []upgradeRec
}

// upgradeRec is the part of a WorldUpgraded record the checker reads. It
// decodes it itself, as it does the runs' events.
type upgradeRec struct {
	Height uint64 `cbor:"-"`
	Input  struct {
		Seq  uint64 `cbor:"seq"`
		Kind string `cbor:"kind"`
	} `cbor:"input"`
	From    uint64 `cbor:"from"`
	To      uint64 `cbor:"to"`
	Outcome string `cbor:"outcome"`
	Error   string `cbor:"error"`
}

// readWorld reads a world back and checks replay parity: the plane's
// restore (its baseline plus the journal tail) and a replay of the whole
// journal from genesis give the same state bytes. A journal that grew
// between the two reads is reported as such, for the caller to read again.
func readWorld(ctx context.Context, st store.Store, id string) (*worldReport, error) {
	journal, err := plane.ReadTail(ctx, st, id, 0)
	if err != nil {
		return nil, err
	}
	inst, cursor, err := plane.Restore(ctx, st, testKernels(), id)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if inst.Height() != uint64(len(journal)) {
		return nil, errMoving
	}
	full, err := testKernels()[clusterUniverse].Replay(id, world.Snapshot{}, journal)
	if err != nil {
		return nil, fmt.Errorf("replay from genesis: %w", err)
	}
	if !bytes.Equal(full.State(), inst.State()) {
		return nil, fmt.Errorf("replay parity: the genesis replay (%s) and the restore (%s) differ at height %d",
			full.StateHash(), inst.StateHash(), inst.Height())
	}
	snap := inst.Snapshot()
	s, marks, err := tallyState(id, snap)
	if err != nil {
		return nil, err
	}
	items, err := st.ReadInbox(ctx, id, 0, 0)
	if err != nil {
		return nil, err
	}
	rep := &worldReport{id: id, state: s, marks: marks, version: world.StateVersion(snap.State), journal: journal, inbox: map[uint64]store.InboxItem{}, cursor: cursor, steps: map[uint64]int{}}
	for _, it := range items {
		rep.inbox[it.Seq] = it
		rep.lastSeq = max(rep.lastSeq, it.Seq)
	}
	for _, e := range journal {
		if e.EventType == world.EventWorldUpgraded {
			var u upgradeRec
			if err := event.Unmarshal(e.Payload, &u); err != nil {
				return nil, fmt.Errorf("record %d (%s): %w", e.RunSeq, e.EventType, err)
			}
			u.Height = e.RunSeq
			rep.upgrades = append(rep.upgrades, u)
			rep.steps[u.Input.Seq]++
			continue
		}
		in, err := world.RecordInput(e)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", e.RunSeq, err)
		}
		if in.Seq == 0 && in.Kind == vocab.KindTimer {
			rep.direct++
			continue
		}
		rep.steps[in.Seq]++
	}
	return rep, nil
}

// errMoving: the world committed while it was being read.
var errMoving = fmt.Errorf("the journal grew while it was read")

// findings are what a check found: broken promises (never repaired by
// waiting: a duplicate, a gap) and work not done yet.
type findings struct {
	broken  []string
	pending []string
}

func (f *findings) brokenf(format string, a ...any) {
	f.broken = append(f.broken, fmt.Sprintf(format, a...))
}
func (f *findings) pendingf(format string, a ...any) {
	f.pending = append(f.pending, fmt.Sprintf(format, a...))
}

// checkJournal checks what no stale writer could leave behind: heights
// 1…n without a gap, n equal to the inbox cursor plus the timer firings
// stepped directly (each named by its timer, so the journal's idempotency
// keys keep one per timer), every inbox item up to the cursor drained by
// exactly one record and no record of any other item.
func checkJournal(rep *worldReport, f *findings) {
	var version uint64
	for i, e := range rep.journal {
		if e.RunSeq != uint64(i+1) {
			f.brokenf("%s: journal record %d has height %d (a gap or a reorder)", rep.id, i+1, e.RunSeq)
			return
		}
		// A record names the version that wrote it: once a world has moved
		// on, no older version writes to it again.
		if e.PlanVersion < version {
			f.brokenf("%s: journal record %d was written by version %d after one of version %d", rep.id, e.RunSeq, e.PlanVersion, version)
		}
		version = max(version, e.PlanVersion)
	}
	for _, u := range rep.upgrades {
		if u.Outcome != string(world.OutcomeOK) {
			f.brokenf("%s: the upgrade at height %d from %d to %d ended %s: %s", rep.id, u.Height, u.From, u.To, u.Outcome, u.Error)
		}
	}
	if uint64(len(rep.journal)-rep.direct) != rep.cursor {
		f.brokenf("%s: %d journal records (%d direct timer firings) but the inbox cursor is %d", rep.id, len(rep.journal), rep.direct, rep.cursor)
	}
	for _, seq := range slices.Sorted(maps.Keys(rep.steps)) {
		if _, ok := rep.inbox[seq]; !ok || seq > rep.cursor {
			f.brokenf("%s: a journal record drained inbox seq %d, beyond the cursor %d or absent from the inbox", rep.id, seq, rep.cursor)
		}
	}
	for seq := uint64(1); seq <= rep.cursor; seq++ {
		if _, ok := rep.inbox[seq]; !ok {
			continue // inbox seqs may have gaps; the store assigns them
		}
		if n := rep.steps[seq]; n != 1 {
			f.brokenf("%s: inbox item %d (key %q) has %d journal records, want 1", rep.id, seq, rep.inbox[seq].DedupeKey, n)
		}
	}
	if rep.cursor < rep.lastSeq {
		f.pendingf("%s: inbox drained to %d of %d", rep.id, rep.cursor, rep.lastSeq)
	}
}

// checkAcked checks every acknowledged event of a world: it is in the
// inbox at the acknowledged seq under its key, journaled once, counted
// once in the state; an alarm's timer fired once; a pay's effect has one
// receipt, done in the store, and reached the target.
func (c *cluster) checkAcked(ctx context.Context, rep *worldReport, acks []acked, f *findings, final bool) {
	s := rep.state
	for _, a := range acks {
		it, ok := rep.inbox[a.Seq]
		if !ok || it.DedupeKey != a.Key {
			f.brokenf("%s: %s %q acknowledged at inbox seq %d, but that item is %q (present %v)", rep.id, a.Kind, a.Key, a.Seq, it.DedupeKey, ok)
			continue
		}
		if a.Seq > rep.cursor {
			f.pendingf("%s: %s %q not drained yet", rep.id, a.Kind, a.Key)
			continue
		}
		switch a.Kind {
		case opAdd:
			if n := s.Adds[a.Key]; n != 1 {
				f.brokenf("%s: add %q counted %d times in the state, want 1", rep.id, a.Key, n)
			}
		case opMark:
			if n := rep.marks[a.Key]; n != 1 {
				f.brokenf("%s: mark %q counted %d times in the state (on version %d), want 1", rep.id, a.Key, n, rep.version)
			}
		case opAlarm:
			if n := s.Alarms[a.Key]; n != 1 {
				f.brokenf("%s: alarm %q counted %d times in the state, want 1", rep.id, a.Key, n)
			}
			switch n := s.Beeps[a.Key]; {
			case n == 0:
				f.pendingf("%s: alarm %q has not fired", rep.id, a.Key)
			case n > 1:
				f.brokenf("%s: alarm %q fired %d times, want 1", rep.id, a.Key, n)
			}
		case opPay:
			hash := s.Pays[a.Key]
			if hash == "" {
				f.brokenf("%s: pay %q journaled but no intent recorded", rep.id, a.Key)
				continue
			}
			switch n := s.Receipts[hash]; {
			case n == 0:
				f.pendingf("%s: pay %q (intent %.12s) has no receipt yet", rep.id, a.Key, hash)
				continue
			case n > 1:
				f.brokenf("%s: pay %q (intent %.12s) has %d receipts, want 1", rep.id, a.Key, hash, n)
			}
			if st := s.Statuses[hash]; st != string(vocab.ReceiptOK) {
				f.brokenf("%s: pay %q (intent %.12s) receipt status %q, want ok", rep.id, a.Key, hash, st)
			}
			if !final {
				continue
			}
			es, err := c.db.st.EffectStatus(ctx, hash)
			switch {
			case err != nil:
				f.brokenf("%s: pay %q: effect status of %.12s: %v", rep.id, a.Key, hash, err)
			case es.State != vocab.EffectDone:
				f.brokenf("%s: pay %q: effect %.12s is %s in the store, want done", rep.id, a.Key, hash, es.State)
			}
			if c.target.seen(a.Key) < 1 {
				f.brokenf("%s: pay %q: its receipt is ok but the target never saw the key", rep.id, a.Key)
			}
		}
	}
	// Nothing in the state may be counted twice, acknowledged or not.
	for _, m := range []map[string]int64{s.Adds, s.Alarms, s.Beeps, s.Receipts, rep.marks} {
		for _, k := range keys(m) {
			if m[k] > 1 {
				f.brokenf("%s: %q counted %d times in the state", rep.id, k, m[k])
			}
		}
	}
	for _, k := range keys(s.Beeps) {
		if s.Alarms[k] != 1 {
			f.brokenf("%s: beep %q without its alarm", rep.id, k)
		}
	}
}

// verify waits (bounded) until the cluster is quiescent and every
// acknowledged event and workflow run has done all it should, then checks
// everything the tests promise about the journals and the state, world by
// world and run by run, that a call to each world answers what its state
// says, and that every process's API lists the runs as completed.
func (c *cluster) verify(led *ackLog, ids []string, limit time.Duration) map[string]*worldReport {
	t := c.t
	t.Helper()
	// Reported last, where a log's tail shows it.
	defer func() {
		if len(led.permanent) > 0 {
			t.Errorf("the API refused %d requests for good:\n%s", len(led.permanent), first(led.permanent, 10))
		}
	}()
	t.Logf("load: %s", led)
	acks := led.byWorld()
	runs := c.newRunChecker(led)
	start := time.Now()
	deadline := start.Add(limit)
	var f findings
	var qd store.QueueDepths
	var reports map[string]*worldReport
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f, reports = findings{}, map[string]*worldReport{}
		var err error
		qd, err = c.db.st.QueueDepths(ctx)
		switch {
		case err != nil:
			f.pendingf("queue depths: %v", err)
		case qd != (store.QueueDepths{}):
			f.pendingf("queues not empty: %+v", qd)
		default:
			for _, id := range ids {
				rep, err := readWorld(ctx, c.db.st, id)
				if err != nil {
					f.pendingf("%s: %v", id, err)
					continue
				}
				reports[id] = rep
				checkJournal(rep, &f)
				c.checkAcked(ctx, rep, acks[id], &f, false)
			}
			runs.check(ctx, &f, false)
			if len(f.pending) == 0 && len(f.broken) == 0 {
				// Everything is done: now the checks that read the
				// effect records and the target, once.
				for _, id := range ids {
					c.checkAcked(ctx, reports[id], acks[id], &f, true)
				}
				runs.check(ctx, &f, true)
			}
		}
		cancel()
		if len(f.broken) > 0 {
			t.Fatalf("%d broken promises (%d more pending); first ones:\n%s", len(f.broken), len(f.pending), first(f.broken, 20))
		}
		if len(f.pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not quiescent within %v: %d things pending, e.g.:\n%s", limit, len(f.pending), first(f.pending, 20))
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.figure("quiescent %v after the load stopped; %s", time.Since(start).Round(time.Millisecond), led)
	c.figure("workflow runs: %d acknowledged, every one completed once; %d of them taken up by more than one worker (lease epoch above 1)", len(runs.runs), runs.takenOver)
	c.checkCalls(reports)
	c.checkRunsAPI(led)
	return reports
}

// checkCalls calls Get on every world through the API and compares the
// reply with the state read from the store. A call that times out (a busy
// machine) is retried under its call id until clusterBound, the hang
// guard: only its answer is checked, not how soon it came.
func (c *cluster) checkCalls(reports map[string]*worldReport) {
	c.t.Helper()
	for _, id := range keys(reports) {
		rep := reports[id]
		want := summaryV2{summary: rep.state.summary(), Marks: len(rep.marks)}
		res, err := c.callUntilAnswered(id, clusterBound)
		if err != nil {
			c.t.Errorf("%s: call Get: %v", id, err)
			continue
		}
		var got summaryV2
		if err := json.Unmarshal(res.Reply, &got); err != nil {
			c.t.Errorf("%s: Get reply %s: %v", id, res.Reply, err)
			continue
		}
		if got != want {
			c.t.Errorf("%s: Get answered %+v, the state says %+v", id, got, want)
		}
	}
}

func first(ss []string, n int) string {
	return strings.Join(ss[:min(n, len(ss))], "\n")
}
