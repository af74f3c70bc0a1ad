package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/store/internal/groupcommit"
	"github.com/orrery-run/orrery/vocab"
)

// The append committer. A batch of Append, Commit and DrainToJournal
// requests commits in one transaction, by one of two paths:
//
//   - The checked path (two round trips): BEGIN, lock and read everything
//     the batch's decisions need (lease rows FOR SHARE, stream rows FOR
//     UPDATE, then which streams are worlds, the stored metadata of every
//     idempotency key at stake, the snapshots at the heights offered); Go
//     decides every request with the contract's functions; one pipelined
//     round trip writes and COMMITs.
//   - The speculative path (one round trip), for the common case of a
//     process appending to streams it appended to before: Go decides
//     against the heads its own last commits left (no stored duplicate
//     assumed, every fence assumed valid, every free stream assumed not a
//     world) and sends the decisions with their assumptions as assertions
//     that raise: the fences are checked, each stream's head is
//     compared-and-swapped under its row lock, no free stream names a
//     world, and a key taken for new that is stored (in events or
//     compacted_keys) violates the unique index or an assertion. If any
//     assumption is wrong, the transaction rolls back whole and the batch
//     takes the checked path. A commit is therefore only ever what the
//     checked path would have decided.
//
// A Commit takes the speculative path too (its world's head cached, and no
// Snapshot: the snapshot's height and conflict checks need the stored
// snapshot). Its decision assumes, besides the head and the fence, that
// the inbox cursor is at ExpectedCursor and that NewCursor does not pass
// the world's last enqueued seq, and, with a Status, that the world is
// active. One call, guard_batch, asserts every guess of a batch in the
// checked path's lock order (world rows FOR UPDATE for a Status, then the
// lease rows, then the stream rows) and moves the heads and cursors. Its
// intents, timers and cancellations assume nothing, and are written as the
// checked path writes them.
//
// Either way a request's typed failure (a stale fence, a head mismatch) is
// decided before anything is written, and never fails its neighbours.
//
// A Commit is one world cycle: it rides in the same transaction as the
// other worlds' cycles and appends of its batch (group commit across
// worlds), so a batch carries at most one Commit per world: a second one
// of the same world starts the next transaction (see cutBatch), which
// keeps every world's cycles in their order for the effect and timer
// writes too.
//
// A Commit with a Status (a world's last cycle, or one that pauses it)
// also changes its world's status as SetWorldStatus does: the checked path
// locks that world's row FOR UPDATE before the lease rows, and the lease
// rows FOR UPDATE (the locks and lock order of SetWorldStatus; an
// Acquire, which holds the world row FOR KEY SHARE, waits for it),
// contract.Transition decides on the status it read, and the status and
// lease rows are written with the batch (queueStatus).
// Requests are decided in batch order on one view, and a Commit that ends
// its lease releases it in that view: an append of the same world later
// in the batch meets a released lease and is ErrFenced, as it would be in
// the next transaction.

// batchTimeout bounds one group commit; no caller's context is used for
// it, since one caller giving up must not fail the others.
const batchTimeout = 30 * time.Second

// runAppends commits one batch (its lane's goroutine runs it, so a
// stream's batches never overlap in this process). A request whose
// context already ended was refused when the batch was cut (groupcommit).
func (s *backend) runAppends(batch []*appendReq) {
	live := batch
	for len(live) > 0 {
		n := cutBatch(live)
		s.runAppendBatch(live[:n])
		live = live[n:]
	}
}

// cutBatch returns how many of reqs one transaction takes: all of them up
// to a second Commit of one world.
func cutBatch(reqs []*appendReq) int {
	seen := map[string]bool{}
	for i, r := range reqs {
		if r.commit == nil {
			continue
		}
		if seen[r.stream] {
			return i
		}
		seen[r.stream] = true
	}
	return len(reqs)
}

// runAppendBatch commits reqs speculatively if it can, else (or if the
// speculation fails) by the checked path. If the checked path fails for a
// reason no decision foresaw (the database refused a value), every request
// runs again on its own, so that one request's failure never fails its
// neighbours.
func (s *backend) runAppendBatch(live []*appendReq) {
	s.stats.appendReqs.Add(uint64(len(live)))
	if spec := s.speculate(live); spec != nil {
		res, ok, err := s.commitSpeculation(spec)
		if err != nil {
			// It committed here, unacknowledged by the standby: its
			// outcome is unknown, and running it again would write it
			// twice or fail it for what it wrote itself.
			for _, r := range live {
				r.finish(dbErr("append", r.stream, err))
			}
			return
		}
		if ok {
			for i, r := range live {
				r.res = res[i]
				r.finish(nil)
			}
			return
		}
	}
	res, err := s.appendWithRetry(live)
	if err != nil && len(live) > 1 && !errors.Is(err, errSyncRepCut) {
		for _, r := range live {
			one, err := s.appendWithRetry([]*appendReq{r})
			if err != nil {
				r.finish(err)
				continue
			}
			r.res = one[0]
			r.finish(nil)
		}
		return
	}
	for i, r := range live {
		if err != nil {
			r.finish(err)
			continue
		}
		r.res = res[i]
		r.finish(nil)
	}
}

// appendWithRetry commits reqs by the checked path, again after a
// transient conflict, and remembers the heads it left.
func (s *backend) appendWithRetry(reqs []*appendReq) ([]appendResult, error) {
	var res []appendResult
	var heads map[string]*streamRow
	err := s.retry(context.Background(), "append", "", func() error {
		var err error
		res, heads, err = s.appendChecked(reqs)
		return err
	})
	if err == nil {
		s.heads.remember(heads)
	}
	return res, err
}

// appendResult is one request's answer.
type appendResult struct {
	out                             []store.Appended
	head                            uint64 // a Commit's head after it
	published, scheduled, cancelled int
	withdrawn                       int
	statusChanged, leaseEnded       bool // a Commit's Status: the hints it owes
	err                             error
}

type streamKey struct{ stream, key string }

// storedKey is what a stored idempotency key is compared against.
type storedKey struct {
	a         store.Appended
	eventType string
	sum       []byte // nil: unknown (compacted by schema version 1)
}

// statusMove is a Commit's decided status change.
type statusMove struct {
	to       store.WorldStatus
	reason   string
	endLease bool  // the world leaves active with a holder: its lease ends
	now      int64 // the store's time it records (the speculative path reads none: it records the clock at the write)
}

type streamRow struct {
	head, cursor int64
	read         int64  // the head the batch found (the CAS's expected value)
	baseline     *int64 // a snapshot the batch stores above the baseline
	touched      bool   // head, cursor or baseline moved in this batch
}

// newEvent is a row the batch inserts.
type newEvent struct {
	stream    string
	runSeq    int64
	rec       *store.Record
	sum       [sha256.Size]byte
	persisted int64 // from RETURNING
}

type snapKey struct {
	world  string
	height uint64
}

// view is what the batch's decisions are made against.
type view struct {
	speculative bool                         // fences, stored keys and world ids are assumed, not read
	leases      map[string]contract.LeaseRow // fenced worlds' leases
	statuses    map[string]store.WorldStatus // the statuses of worlds whose Commit asks for a new one
	worlds      map[string]int64             // streams that are worlds -> their last inbox seq
	heads       map[string]*streamRow
	existing    map[streamKey]storedKey
	snapshots   map[snapKey]string // stored state hashes at the heights offered
	now         time.Time
}

// plan is the batch's decisions: each request's answer (or failure), and
// the writes.
type plan struct {
	res     []appendResult
	refs    [][]outRef
	rows    []newEvent
	streams []string // every stream at stake, sorted
	drains  []drainRange
	// refused lists the keys of requests refused for their head in the
	// speculative path: their answer relied on the keys being new, but no
	// insert of theirs will prove it.
	refused []streamKey

	// The commits' other writes, each with the index of its request.
	intents []owned[vocab.Intent]
	timers  []owned[vocab.TimerSet]
	cancels []owned[string]
	snaps   []owned[store.Snapshot]
	moves   []owned[statusMove]
	// withdraws are the commits' Withdraw hashes.
	withdraws []owned[string]
}

type owned[T any] struct {
	req   int
	world string
	v     T
}

type outRef struct {
	row int // index in plan.rows, or -1 when out is final
	out store.Appended
}

type drainRange struct {
	world  string
	lo, hi int64
}

// fencedWorld returns the world whose lease r's decision reads, if any: a
// Commit's, or a world-stream append's whose fence names its own stream
// (any other fence fails without a row).
func fencedWorld(r *appendReq) (string, bool) {
	if r.commit != nil {
		return r.stream, true
	}
	if r.opts.Kind == store.WorldStream && r.opts.Fence != nil && r.opts.Fence.World == r.stream {
		return r.stream, true
	}
	return "", false
}

// scope lists what reqs touch: the worlds whose status a Commit changes,
// the fenced worlds and the streams (all sorted: the lock order), the
// idempotency keys and snapshots at stake.
func scope(reqs []*appendReq) (statusWorlds, fenceWorlds, streams, keyStreams, keyKeys, snapWorlds []string, snapHeights []int64) {
	seenFence, seenStream := map[string]bool{}, map[string]bool{}
	seenKey := map[streamKey]bool{}
	for _, r := range reqs {
		if w, ok := fencedWorld(r); ok && !seenFence[w] {
			seenFence[w] = true
			fenceWorlds = append(fenceWorlds, w)
		}
		if !seenStream[r.stream] {
			seenStream[r.stream] = true
			streams = append(streams, r.stream)
		}
		for i := range r.events {
			k := streamKey{r.stream, r.events[i].IdempotencyKey}
			if !seenKey[k] {
				seenKey[k] = true
				keyStreams = append(keyStreams, k.stream)
				keyKeys = append(keyKeys, k.key)
			}
		}
		if r.commit != nil && r.commit.b.Snapshot != nil {
			snapWorlds = append(snapWorlds, r.stream)
			snapHeights = append(snapHeights, int64(r.commit.b.Snapshot.Height))
		}
		// cutBatch keeps one Commit per world in a batch: no world twice.
		if r.commit != nil && r.commit.b.Status != nil {
			statusWorlds = append(statusWorlds, r.stream)
		}
	}
	sort.Strings(statusWorlds)
	sort.Strings(fenceWorlds)
	sort.Strings(streams)
	return
}

// decide answers every request, in order, against v, and collects the
// writes. It writes nothing.
func decide(reqs []*appendReq, streams []string, v *view) *plan {
	p := &plan{res: make([]appendResult, len(reqs)), refs: make([][]outRef, len(reqs)), streams: streams}
	inBatch := map[streamKey]int{} // key -> index in p.rows
	intents, timers := map[string]bool{}, map[string]bool{}
	for i, r := range reqs {
		_, isWorld := v.worlds[r.stream]
		st := v.heads[r.stream]
		c := r.commit
		switch {
		case c != nil:
			// The speculative path assumes the fence and the last seq (and
			// its guessed cursor is ExpectedCursor); guard_batch asserts
			// them.
			if !v.speculative {
				if err := contract.Fence(r.op, r.stream, c.epoch, isWorld, v.leases[r.stream], v.now); err != nil {
					p.res[i].err = err
					continue
				}
			}
			last := uint64(v.worlds[r.stream])
			if v.speculative {
				last = math.MaxUint64 // guard_batch asserts the bound
			}
			if err := contract.CycleCursor(r.op, r.stream, uint64(st.cursor), c.b.ExpectedCursor, c.b.NewCursor, last); err != nil {
				p.res[i].err = err
				continue
			}
		case !v.speculative:
			if err := contract.AppendFence(r.op, r.stream, r.opts, isWorld, v.leases[r.stream], v.now); err != nil {
				p.res[i].err = err
				continue
			}
		}
		// Resolve duplicates and assign runSeqs tentatively: new events
		// get head+1 … head+n, gapless.
		ref := make([]outRef, len(r.events))
		fresh := map[string]int{} // key -> index in r.events of its first new occurrence
		var mine []int
		next := st.head
		for j := range r.events {
			ev := &r.events[j]
			k := streamKey{r.stream, ev.IdempotencyKey}
			if a, ok := v.existing[k]; ok {
				ref[j] = outRef{row: -1, out: a.a}
				// A key compacted by schema version 1 kept neither: no
				// conflict can be told there.
				ref[j].out.Conflict = contract.Conflict(a.eventType, a.sum, ev.EventType, r.sums[j][:])
				continue
			}
			if ri, ok := inBatch[k]; ok {
				first := &p.rows[ri]
				ref[j] = outRef{row: ri, out: store.Appended{EventID: first.rec.EventID, RunSeq: uint64(first.runSeq), Idempotent: true,
					Conflict: contract.Conflict(first.rec.EventType, first.sum[:], ev.EventType, r.sums[j][:])}}
				continue
			}
			if f, ok := fresh[ev.IdempotencyKey]; ok {
				ref[j] = ref[f]
				ref[j].out.Idempotent = true
				ref[j].out.Conflict = contract.Conflict(r.events[f].EventType, r.sums[f][:], ev.EventType, r.sums[j][:])
				continue
			}
			next++
			fresh[ev.IdempotencyKey] = j
			mine = append(mine, j)
			ref[j] = outRef{row: len(p.rows) + len(mine) - 1, out: store.Appended{EventID: ev.EventID, RunSeq: uint64(next)}}
		}
		var err error
		if c != nil {
			err = contract.CycleHead(r.op, r.stream, *r.head, uint64(st.head))
		} else {
			err = contract.AppendHead(r.op, r.stream, r.head, uint64(st.head), len(mine) > 0)
		}
		if err != nil {
			p.res[i].err = err
			if v.speculative {
				for _, j := range mine {
					p.refused = append(p.refused, streamKey{r.stream, r.events[j].IdempotencyKey})
				}
			}
			continue
		}
		var snap *store.Snapshot
		if c != nil && c.b.Snapshot != nil {
			sn := *c.b.Snapshot
			sn.World = r.stream
			write, err := contract.Snapshot(r.op, r.stream, sn, uint64(next), v.snapshots[snapKey{r.stream, sn.Height}])
			if err != nil {
				p.res[i].err = err
				continue
			}
			if write {
				snap = &sn
			}
		}
		var move *statusMove
		if c != nil && c.b.Status != nil {
			noop, endLease, err := contract.Transition(r.op, r.stream, v.statuses[r.stream], c.b.Status.Status)
			if err != nil {
				p.res[i].err = err
				continue
			}
			if !noop {
				// The fence passed (or is asserted), so the lease is held:
				// leaving active ends it.
				held := v.speculative || v.leases[r.stream].Holder != ""
				move = &statusMove{to: c.b.Status.Status, reason: c.b.Status.Reason,
					endLease: endLease && held, now: toNS(v.now)}
			}
		}

		// Decided: the request's writes join the plan.
		for _, j := range mine {
			ev := &r.events[j]
			inBatch[streamKey{r.stream, ev.IdempotencyKey}] = len(p.rows)
			p.rows = append(p.rows, newEvent{stream: r.stream, runSeq: int64(ref[j].out.RunSeq), rec: ev, sum: r.sums[j]})
		}
		if len(mine) > 0 {
			st.head, st.touched = next, true
		}
		p.refs[i] = ref
		if c == nil {
			continue
		}
		if int64(c.b.NewCursor) != st.cursor {
			p.drains = append(p.drains, drainRange{r.stream, st.cursor, int64(c.b.NewCursor)})
			st.cursor, st.touched = int64(c.b.NewCursor), true
		}
		p.res[i].head = uint64(st.head)
		// An intent or timer hash is global: its first publisher in the
		// batch owns it, as it would own it committing first.
		for _, in := range c.b.Intents {
			if !intents[in.IntentHash] {
				intents[in.IntentHash] = true
				p.intents = append(p.intents, owned[vocab.Intent]{i, r.stream, in})
			}
		}
		for _, t := range c.b.Timers {
			if !timers[t.IntentHash] {
				timers[t.IntentHash] = true
				p.timers = append(p.timers, owned[vocab.TimerSet]{i, r.stream, t})
			}
		}
		for _, h := range c.b.CancelTimers {
			p.cancels = append(p.cancels, owned[string]{i, r.stream, h})
		}
		for _, h := range c.b.Withdraw {
			p.withdraws = append(p.withdraws, owned[string]{i, r.stream, h})
		}
		if snap != nil {
			p.snaps = append(p.snaps, owned[store.Snapshot]{i, r.stream, *snap})
			if h := int64(snap.Height); st.baseline == nil || *st.baseline < h {
				st.baseline, st.touched = &h, true
			}
		}
		if move != nil {
			p.moves = append(p.moves, owned[statusMove]{i, r.stream, *move})
			p.res[i].statusChanged, p.res[i].leaseEnded = true, move.endLease
			v.statuses[r.stream] = move.to
			if move.endLease {
				// What the rest of the batch sees of this world's lease.
				l := v.leases[r.stream]
				l.Holder = ""
				if l.ExpiresAt.After(v.now) {
					l.ExpiresAt = v.now
				}
				v.leases[r.stream] = l
			}
		}
	}
	return p
}

// writeSQL is the statement that writes a plan's new events, all with
// one reading of the store's clock (an InitPlan: read once, before the
// first row). It takes no CTE: on PostgreSQL 15 the same insert written as
// data-modifying CTEs (the clock, the events, the drains) made each
// transaction that ran it about 0.2 ms longer (pipelined BEGIN, insert,
// COMMIT, medians of 300 alternated runs: 0.62–0.67 against 0.41–0.45
// ms), and a run commits twice.
const writeSQL = `INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, emitted_at_ns,
		persisted_at_ns, step_id, logical_attempt_id, engine_attempt_id, plan_id, plan_version, payload,
		payload_sha256)
	SELECT u.s, u.q, u.id, u.k, u.t, u.em, (SELECT now_ns($13)), u.st, u.la, u.ea, u.pid, u.pv, u.p, u.h
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[],
		$7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::bytea[], $14::bytea[])
		AS u(s, q, id, k, t, em, st, la, ea, pid, pv, p, h)
	RETURNING run_seq, stream, persisted_at_ns`

// drainSQL records a plan's inbox drains: the drained items' dedupe keys
// complete now, and their retention starts (one row per cursor move, see
// 0003_inbox_drains.sql).
const drainSQL = `INSERT INTO inbox_drains (world, lo, hi, drained_at_ns)
	SELECT d.w, d.lo, d.hi, now_ns($4)
	FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS d(w, lo, hi)
	WHERE d.hi > d.lo`

// queueHeads queues the checked plan's head, cursor and baseline moves on
// b (the speculative path's are guard_batch's, see queueSpeculation).
func (s *backend) queueHeads(b *batch, p *plan, v *view) {
	var us []string
	var uh, uc []int64
	var ub []*int64
	for _, st := range p.streams {
		if h := v.heads[st]; h != nil && h.touched {
			us, uh, uc, ub = append(us, st), append(uh, h.head), append(uc, h.cursor), append(ub, h.baseline)
		}
	}
	if len(us) > 0 {
		b.queue(nil, `UPDATE streams x SET head = u.h, inbox_cursor = u.c, baseline_height = greatest(x.baseline_height, u.b)
			FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(s, h, c, b) WHERE x.stream = u.s`, us, uh, uc, ub)
	}
}

// queueInserts queues the plan's new events and drained keys on b.
func (s *backend) queueInserts(b *batch, p *plan) {
	if n := len(p.rows); n > 0 {
		var (
			cs, ids, keys, types, steps, plans = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			seqs, emitted, la, ea, pv          = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
			payloads, sums                     = make([][]byte, n), make([][]byte, n)
		)
		for j, row := range p.rows {
			ev := row.rec
			cs[j], seqs[j], ids[j], keys[j], types[j] = row.stream, row.runSeq, ev.EventID, ev.IdempotencyKey, ev.EventType
			emitted[j], steps[j], la[j], ea[j] = toNS(ev.EmittedAt), ev.StepID, int64(ev.LogicalAttemptID), int64(ev.EngineAttemptID)
			plans[j], pv[j], payloads[j], sums[j] = ev.PlanID, int64(ev.PlanVersion), ev.Payload, p.rows[j].sum[:]
		}
		b.queue(func(br pgx.BatchResults) error {
			byKey := make(map[streamSeq]int, len(p.rows))
			for j := range p.rows {
				byKey[streamSeq{p.rows[j].stream, p.rows[j].runSeq}] = j
			}
			var k streamSeq
			var at int64
			n := 0
			err := scanEach(br, []any{&k.seq, &k.stream, &at}, func() {
				if j, ok := byKey[k]; ok {
					p.rows[j].persisted = at
					n++
				}
			})
			if err == nil && n != len(p.rows) {
				err = errUnreachable
			}
			return err
		}, writeSQL, cs, seqs, ids, keys, types, emitted, steps, la, ea, plans, pv, payloads, s.off(), sums)
	}
	if len(p.drains) > 0 {
		dw, lo, hi := make([]string, len(p.drains)), make([]int64, len(p.drains)), make([]int64, len(p.drains))
		for j, d := range p.drains {
			dw[j], lo[j], hi[j] = d.world, d.lo, d.hi
		}
		b.queue(nil, drainSQL, dw, lo, hi, s.off())
	}
}

// queueCycles queues the commits' intents, timers, cancellations,
// snapshots and status changes on b, in the order a cycle applies them (a
// timer scheduled and cancelled by one cycle is gone), and the
// notifications of what they may have changed. written is a status move
// already written (by guard_end), or nil.
func (s *backend) queueCycles(b *batch, p *plan, v *view, written *owned[statusMove]) {
	var topics []string
	if n := len(p.intents); n > 0 {
		hs, ws, ks, os, cs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		ps, rs := make([][]byte, n), make([][]byte, n)
		owner := make(map[string]int, n)
		for j, o := range p.intents {
			hs[j], ws[j], ks[j], ps[j], os[j], cs[j] = o.v.IntentHash, o.world, o.v.Kind, o.v.Params, o.v.Origin, o.v.PolicyContextHash
			if len(o.v.Retry) > 0 {
				rs[j] = o.v.Retry
			}
			owner[o.v.IntentHash] = o.req
		}
		b.queue(func(br pgx.BatchResults) error {
			var h string
			return scanEach(br, []any{&h}, func() { p.res[owner[h]].published++ })
		}, `INSERT INTO effects (intent_hash, world, kind, params, origin, policy_context_hash, enqueued_at_ns, state, retry_policy)
			SELECT u.h, u.w, u.k, u.p, u.o, u.c, (SELECT now_ns($7)), 'pending', u.r
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[], $8::bytea[])
				WITH ORDINALITY AS u(h, w, k, p, o, c, r, ord)
			ORDER BY u.ord
			ON CONFLICT (intent_hash) DO NOTHING
			RETURNING intent_hash`, hs, ws, ks, ps, os, cs, s.off(), rs)
		topics = append(topics, store.TopicEffects)
	}
	if n := len(p.timers); n > 0 {
		hs, ws, ds, ps := make([]string, n), make([]string, n), make([]int64, n), make([][]byte, n)
		owner := make(map[string]int, n)
		for j, o := range p.timers {
			hs[j], ws[j], ds[j], ps[j] = o.v.IntentHash, o.world, toNS(o.v.DeliverAt), o.v.Payload
			owner[o.v.IntentHash] = o.req
		}
		b.queue(func(br pgx.BatchResults) error {
			var h string
			return scanEach(br, []any{&h}, func() { p.res[owner[h]].scheduled++ })
		}, `INSERT INTO timers (intent_hash, world, deliver_at_ns, payload, state)
			SELECT u.h, u.w, u.d, u.p, 'due' FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) AS u(h, w, d, p)
			ON CONFLICT (intent_hash) DO NOTHING
			RETURNING intent_hash`, hs, ws, ds, ps)
	}
	if n := len(p.cancels); n > 0 {
		hs, ws := make([]string, n), make([]string, n)
		owner := make(map[streamKey]int, n)
		for j, o := range p.cancels {
			hs[j], ws[j] = o.v, o.world
			owner[streamKey{o.world, o.v}] = o.req
		}
		// An unknown, another world's or fired timer is skipped (the
		// kernel may cancel a timer whose firing waits in its inbox). The
		// rows are locked in key order, as a Fire batch locks them.
		b.queue(func(br pgx.BatchResults) error {
			var k streamKey
			return scanEach(br, []any{&k.stream, &k.key}, func() { p.res[owner[k]].cancelled++ })
		}, `DELETE FROM timers x WHERE x.intent_hash IN (
				SELECT t.intent_hash FROM timers t JOIN unnest($1::text[], $2::text[]) AS u(w, h)
					ON t.intent_hash = u.h AND t.world = u.w
				WHERE t.state <> 'delivered' ORDER BY t.intent_hash FOR UPDATE OF t)
			RETURNING x.world, x.intent_hash`, ws, hs)
	}
	if len(p.timers) > 0 || len(p.cancels) > 0 {
		topics = append(topics, store.TopicTimers)
	}
	// After the intents (a cycle that archives its world withdraws what it
	// published too): the named pending intents, and every pending one of
	// a world the batch archives. A batch holds at most one Commit per
	// world (cutBatch), so a world names its request.
	var ws, hs, all []string
	owner := map[string]int{}
	for _, o := range p.withdraws {
		ws, hs = append(ws, o.world), append(hs, o.v)
		owner[o.world] = o.req
	}
	for _, o := range p.moves {
		if contract.WithdrawsPending(o.v.to) {
			all = append(all, o.world)
			owner[o.world] = o.req
		}
	}
	if len(ws) > 0 || len(all) > 0 {
		queueWithdrawals(b, ws, hs, all, s.off(), func(w string) { p.res[owner[w]].withdrawn++ })
	}
	if n := len(p.snaps); n > 0 {
		ws, hs, shs, sts := make([]string, n), make([]int64, n), make([]string, n), make([][]byte, n)
		for j, o := range p.snaps {
			ws[j], hs[j], shs[j], sts[j] = o.world, int64(o.v.Height), o.v.StateHash, o.v.State
		}
		// The stream rows are locked, so no other snapshot of these worlds
		// lands meanwhile; DO NOTHING is a guard.
		b.queue(nil, `INSERT INTO snapshots (world, height, state, state_hash, created_at_ns)
			SELECT u.w, u.h, u.s, u.sh, (SELECT now_ns($5))
			FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[]) AS u(w, h, s, sh)
			ON CONFLICT (world, height) DO NOTHING`, ws, hs, sts, shs, s.off())
	}
	// Last, as a cycle applies it: the status, and the lease it ends.
	for i, o := range p.moves {
		var ts []string
		if written != nil && written == &p.moves[i] {
			ts = statusTopics(o.v.endLease)
		} else if v.speculative {
			ts = queueStatusNow(b, o.world, o.v.to, o.v.reason, o.v.endLease, s.off())
		} else {
			ts = queueStatus(b, o.world, o.v.to, o.v.reason, o.v.endLease, o.v.now)
		}
		for _, t := range ts {
			if !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	if len(topics) > 0 {
		b.queue(nil, notifySQL, topics)
	}
}

// answers turns a committed plan into the requests' answers.
func (p *plan) answers() []appendResult {
	for i := range p.res {
		if p.res[i].err != nil {
			continue
		}
		out := make([]store.Appended, len(p.refs[i]))
		for j, ref := range p.refs[i] {
			out[j] = ref.out
			if ref.row >= 0 {
				out[j].PersistedAt = fromNS(p.rows[ref.row].persisted)
			}
		}
		p.res[i].out = out
	}
	return p.res
}

// ---- the checked path ----

// appendChecked commits reqs in two round trips (see the top of this
// file) and returns the answers and the heads the batch left.
func (s *backend) appendChecked(reqs []*appendReq) ([]appendResult, map[string]*streamRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	statusWorlds, fenceWorlds, streams, keyStreams, keyKeys, snapWorlds, snapHeights := scope(reqs)
	p, err := s.beginTx(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer p.end()
	s.stats.appendTxs.Add(1)
	off := s.off()

	// Round trip 1: locks and reads.
	v := &view{
		leases: map[string]contract.LeaseRow{}, statuses: map[string]store.WorldStatus{}, worlds: map[string]int64{},
		heads: map[string]*streamRow{}, existing: map[streamKey]storedKey{}, snapshots: map[snapKey]string{},
	}
	var now int64
	b := &batch{}
	b.begin()
	if len(statusWorlds) > 0 {
		// Before the lease rows, as SetWorldStatus locks them.
		b.queue(func(br pgx.BatchResults) error {
			var w, st string
			return scanEach(br, []any{&w, &st}, func() { v.statuses[w] = store.WorldStatus(st) })
		}, `SELECT world, status FROM worlds WHERE world = ANY($1) ORDER BY world FOR UPDATE`, statusWorlds)
	}
	if len(fenceWorlds) > 0 {
		// A batch that may end a lease takes its lease rows FOR UPDATE up
		// front, as SetWorldStatus does: upgrading a shared lock at the
		// write would deadlock with an append of that world holding it and
		// waiting for the stream row this batch holds. (One statement keeps
		// them in world order; such batches are rare: a run's last cycle.)
		mode := "SHARE"
		if len(statusWorlds) > 0 {
			mode = "UPDATE"
		}
		b.queue(func(br pgx.BatchResults) error {
			var w, holder string
			var epoch, exp int64
			return scanEach(br, []any{&w, &epoch, &holder, &exp}, func() {
				v.leases[w] = contract.LeaseRow{Found: true, Holder: holder, Epoch: uint64(epoch), ExpiresAt: fromNS(exp)}
			})
		}, `SELECT world, epoch, holder, expires_at_ns FROM leases
			WHERE world = ANY($1) ORDER BY world FOR `+mode, fenceWorlds)
	}
	// Create the missing rows (an insert racing ours waits for it), then
	// lock them all, in stream order. Locking writes no new row version,
	// unlike an upsert.
	b.queue(nil, `INSERT INTO streams (stream) SELECT s FROM unnest($1::text[]) AS s ORDER BY s
		ON CONFLICT (stream) DO NOTHING`, streams)
	b.queue(func(br pgx.BatchResults) error {
		var st string
		var head, cursor int64
		return scanEach(br, []any{&st, &head, &cursor, &now}, func() {
			v.heads[st] = &streamRow{head: head, cursor: cursor, read: head}
		})
	}, `SELECT stream, head, inbox_cursor, now_ns($2) FROM streams
		WHERE stream = ANY($1) ORDER BY stream FOR UPDATE`, streams, off)
	// Which streams are worlds, read after the stream locks: a CreateWorld
	// locks the stream row too, so either it committed before (and this
	// sees the world) or it waits and then finds the events.
	b.queue(func(br pgx.BatchResults) error {
		var w string
		var seq int64
		return scanEach(br, []any{&w, &seq}, func() { v.worlds[w] = seq })
	}, `SELECT world, inbox_seq FROM worlds WHERE world = ANY($1)`, streams)
	if len(keyKeys) > 0 {
		b.queue(func(br pgx.BatchResults) error {
			var k streamKey
			var id string
			var typ *string
			var sum []byte
			var seq, at int64
			return scanEach(br, []any{&k.stream, &k.key, &id, &seq, &at, &typ, &sum}, func() {
				sk := storedKey{a: store.Appended{EventID: id, RunSeq: uint64(seq), PersistedAt: fromNS(at), Idempotent: true}, sum: sum}
				if typ != nil {
					sk.eventType = *typ
				}
				v.existing[k] = sk
			})
		}, `SELECT e.stream, e.idempotency_key, e.event_id, e.run_seq, e.persisted_at_ns, e.event_type,
				coalesce(e.payload_sha256, sha256(coalesce(e.payload, ''::bytea)))
			FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN events e ON e.stream = k.s AND e.idempotency_key = k.key
			UNION ALL
			SELECT c.stream, c.idempotency_key, c.event_id, c.run_seq, c.persisted_at_ns, c.event_type, c.payload_sha256
			FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN compacted_keys c ON c.stream = k.s AND c.idempotency_key = k.key`, keyStreams, keyKeys)
	}
	if len(snapWorlds) > 0 {
		b.queue(func(br pgx.BatchResults) error {
			var w, hash string
			var h int64
			return scanEach(br, []any{&w, &h, &hash}, func() { v.snapshots[snapKey{w, uint64(h)}] = hash })
		}, `SELECT n.world, n.height, n.state_hash FROM snapshots n
			JOIN unnest($1::text[], $2::bigint[]) AS k(w, h) ON n.world = k.w AND n.height = k.h`, snapWorlds, snapHeights)
	}
	if err := b.send(ctx, p); err != nil {
		return nil, nil, err
	}
	for _, st := range streams {
		if v.heads[st] == nil {
			return nil, nil, errUnreachable
		}
	}
	v.now = fromNS(now)

	// Round trip 2: decide, write, commit.
	pl := decide(reqs, streams, v)
	b = &batch{}
	s.queueHeads(b, pl, v)
	s.queueInserts(b, pl)
	s.queueCycles(b, pl, v, nil)
	b.commit()
	if err := b.send(ctx, p); err != nil {
		return nil, nil, err
	}
	if err := p.commitErr(); err != nil {
		return nil, nil, err
	}
	return pl.answers(), v.heads, nil
}

type streamSeq struct {
	stream string
	seq    int64
}

// ---- the speculative path ----

// headCache is the heads this process's own commits left, by stream. An
// entry is only ever a guess: the speculative path verifies it in the
// database (compare-and-swap under the row lock) before relying on it.
type headCache struct {
	mu    sync.Mutex
	heads map[string]int64
	cool  map[string]int // stream -> batches to take the checked path after a miss
}

// maxCachedHeads bounds the cache; past it, it starts over.
const maxCachedHeads = 1 << 16

// missCooldown is how many batches a stream takes the checked path after
// a speculation on it failed (another process appends to it too, or it
// keeps receiving duplicates).
const missCooldown = 16

func (c *headCache) remember(heads map[string]*streamRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.heads == nil || len(c.heads) > maxCachedHeads {
		c.heads = map[string]int64{}
	}
	for st, h := range heads {
		c.heads[st] = h.head
	}
}

// lookup returns the guessed heads of streams, or false if one is unknown
// or cooling down (which it counts down).
func (c *headCache) lookup(streams []string) (map[string]*streamRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*streamRow, len(streams))
	ok := true
	for _, st := range streams {
		if n := c.cool[st]; n > 0 {
			c.cool[st] = n - 1
			if n == 1 {
				delete(c.cool, st)
			}
			ok = false
			continue
		}
		h, found := c.heads[st]
		if !found {
			ok = false
			continue
		}
		out[st] = &streamRow{head: h, read: h}
	}
	return out, ok
}

func (c *headCache) miss(streams []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cool == nil || len(c.cool) > maxCachedHeads {
		c.cool = map[string]int{}
	}
	for _, st := range streams {
		delete(c.heads, st)
		c.cool[st] = missCooldown
	}
}

// speculation is a batch decided against guessed heads, ready to send.
type speculation struct {
	reqs                []*appendReq
	pl                  *plan
	v                   *view
	streams             []string
	keyStreams, keyKeys []string
	fences              []store.Fence          // the world streams' fences, in world order
	free                []string               // the free streams, assumed not worlds
	cursors             map[string]cursorGuess // by Commit world (one Commit each: cutBatch)
	statusWorlds        []string               // the worlds a Commit ends, assumed active, in world order
}

// cursorGuess is what a Commit's decision assumes of its world's inbox:
// the cursor is at expected, and the last enqueued seq is at least bound
// (the NewCursor it asks for).
type cursorGuess struct {
	expected, bound int64
}

// speculate decides reqs against the heads the cache guesses, or returns
// nil when the batch must take the checked path: a request newSpeculation
// refuses, or a stream not cached or cooling down.
func (s *backend) speculate(reqs []*appendReq) *speculation {
	sp := newSpeculation(reqs)
	if sp == nil {
		return nil
	}
	heads, ok := s.heads.lookup(sp.streams)
	if !ok {
		return nil
	}
	sp.decide(heads)
	return sp
}

// newSpeculation scopes reqs for the speculative path, or returns nil when
// one of them must take the checked path: a Commit with a Snapshot, an
// append whose fence decision needs no row (no fence on a world stream,
// another world's fence, a fence on a free stream: AppendFence answers
// those at once on the checked path), or a request after a Commit that
// ends its world's lease (the checked path fences it on the lease the
// Commit released; the speculative one asserts fences only as they stood
// before the batch).
func newSpeculation(reqs []*appendReq) *speculation {
	var fences []store.Fence
	var free, statusWorlds []string
	cursors := map[string]cursorGuess{}
	seenFence, seenFree, ended := map[store.Fence]bool{}, map[string]bool{}, map[string]bool{}
	fence := func(f store.Fence) {
		if !seenFence[f] {
			seenFence[f] = true
			fences = append(fences, f)
		}
	}
	for _, r := range reqs {
		if ended[r.stream] {
			return nil
		}
		switch c := r.commit; {
		case c != nil && c.b.Snapshot != nil:
			return nil
		case c != nil:
			fence(store.Fence{World: r.stream, Epoch: c.epoch})
			cursors[r.stream] = cursorGuess{expected: int64(c.b.ExpectedCursor), bound: int64(c.b.NewCursor)}
			if c.b.Status != nil {
				ended[r.stream] = true
				statusWorlds = append(statusWorlds, r.stream)
			}
		case r.opts.Kind == store.WorldStream && r.opts.Fence != nil && r.opts.Fence.World == r.stream:
			fence(*r.opts.Fence)
		case r.opts.Kind == store.FreeStream && r.opts.Fence == nil:
			if !seenFree[r.stream] {
				seenFree[r.stream] = true
				free = append(free, r.stream)
			}
		default:
			return nil
		}
	}
	_, _, streams, keyStreams, keyKeys, _, _ := scope(reqs)
	sort.Slice(fences, func(i, j int) bool { return fences[i].World < fences[j].World })
	sort.Strings(statusWorlds)
	return &speculation{reqs: reqs, streams: streams, keyStreams: keyStreams, keyKeys: keyKeys, fences: fences, free: free,
		cursors: cursors, statusWorlds: statusWorlds}
}

// decide decides the speculation's requests against heads (a guess the
// queued assertions verify), each Commit's world's cursor guessed at its
// ExpectedCursor and, with a Status, its status guessed active.
func (sp *speculation) decide(heads map[string]*streamRow) {
	sp.v = &view{speculative: true, heads: heads, worlds: map[string]int64{},
		leases: map[string]contract.LeaseRow{}, statuses: map[string]store.WorldStatus{}}
	for w, g := range sp.cursors {
		heads[w].cursor = g.expected
	}
	for _, w := range sp.statusWorlds {
		sp.v.statuses[w] = store.WorldActive
	}
	sp.pl = decide(sp.reqs, sp.streams, sp.v)
}

// commitSpeculation sends a speculation in one round trip; false means
// nothing was written and the batch must take the checked path. An error
// is a commit cut short of its synchronous replication (errSyncRepCut):
// it was written, its outcome is unknown.
func (s *backend) commitSpeculation(sp *speculation) ([]appendResult, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	p, err := s.beginTx(ctx)
	if err != nil {
		s.heads.miss(sp.streams)
		return nil, false, nil
	}
	defer p.end()
	s.stats.appendTxs.Add(1)
	b := &batch{}
	b.begin()
	s.queueSpeculation(b, sp)
	b.commit()
	err = b.send(ctx, p)
	if err == nil {
		err = p.commitErr()
		if errors.Is(err, errSyncRepCut) {
			s.heads.miss(sp.streams)
			return nil, false, err
		}
	}
	if err != nil {
		// Some guess was wrong (or the database failed): nothing was
		// written; the checked path decides again.
		if isDeadlock(err) {
			s.stats.deadlocks.Add(1)
		}
		s.heads.miss(sp.streams)
		s.stats.speculationMisses.Add(1)
		return nil, false, nil
	}
	s.heads.remember(sp.v.heads)
	return sp.pl.answers(), true, nil
}

// queueSpeculation queues a decided speculation's assertions and writes on
// b, inside the caller's transaction: if an assertion fails, it raises and
// the transaction rolls back whole.
func (s *backend) queueSpeculation(b *batch, sp *speculation) {
	if e := sp.loneEnd(); e != nil {
		// One call asserts and writes what guard_batch asserts and the
		// status change writes (guard_end): the updates take the locks.
		h := sp.v.heads[e.world]
		g := sp.cursors[e.world]
		b.queue(nil, guardEndSQL, e.world, int64(min(sp.fences[0].Epoch, 1<<63-1)), h.read, h.head, g.expected, h.cursor, g.bound,
			sp.keyKeys, string(e.v.to), e.v.reason, s.off())
		s.queueInserts(b, sp.pl)
		s.queueCycles(b, sp.pl, sp.v, e)
		return
	}
	// One call asserts the guesses in the checked path's lock order
	// (world rows of a batch that ends a world, lease rows, stream rows)
	// and moves the heads and cursors (guard_batch):
	//   - every fence the batch relies on (the failing ones included: the
	//     checked path reports them precisely), FOR UPDATE when the batch
	//     ends a lease, as the checked path locks them;
	//   - every stream at stake, its head compared and swapped (an unmoved
	//     one too: the decisions relied on it), and each Commit's cursor;
	//   - the keys decided new are not compacted. A new event's insert
	//     proves it against events (the unique index), not against
	//     compacted_keys.
	ws, es := make([]string, len(sp.fences)), make([]int64, len(sp.fences))
	for i, f := range sp.fences {
		ws[i], es[i] = f.World, int64(min(f.Epoch, 1<<63-1))
	}
	n := len(sp.streams)
	olds, news := make([]int64, n), make([]int64, n)
	oldc, newc, bound := make([]*int64, n), make([]*int64, n), make([]*int64, n)
	for i, st := range sp.streams {
		h := sp.v.heads[st]
		olds[i], news[i] = h.read, h.head
		if g, ok := sp.cursors[st]; ok {
			oldc[i], newc[i], bound[i] = &g.expected, &h.cursor, &g.bound
		}
	}
	if len(sp.cursors) == 0 {
		bound = nil // no cursor moves: nothing to bound
	}
	b.queue(nil, guardBatchSQL,
		sp.statusWorlds, ws, es, len(sp.statusWorlds) > 0,
		sp.streams, olds, news, oldc, newc, bound, sp.keyStreams, sp.keyKeys, s.off())
	// Read after the compare-and-swap locked the streams (see appendChecked).
	if len(sp.free) > 0 {
		b.queue(nil, `SELECT expect_count((SELECT count(*) FROM worlds WHERE world = ANY($1)), 0, 'a free stream is a world')`, sp.free)
	}
	// A request refused for its head inserts nothing, yet its keys decided
	// its answer.
	if len(sp.pl.refused) > 0 {
		ks, kk := make([]string, len(sp.pl.refused)), make([]string, len(sp.pl.refused))
		for i, k := range sp.pl.refused {
			ks[i], kk[i] = k.stream, k.key
		}
		b.queue(nil, `SELECT expect_count((SELECT count(*) FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN events e ON e.stream = k.s AND e.idempotency_key = k.key), 0, 'a key is stored already')`, ks, kk)
	}
	s.queueInserts(b, sp.pl)
	s.queueCycles(b, sp.pl, sp.v, nil)
}

// loneEnd returns the status move of a speculation that is one Commit
// ending its world's lease (a run's end, a world archived by its own
// cycle) on its world's stream alone, or nil.
func (sp *speculation) loneEnd() *owned[statusMove] {
	if len(sp.reqs) != 1 || len(sp.pl.moves) != 1 || len(sp.streams) != 1 || len(sp.fences) != 1 ||
		len(sp.free) != 0 || len(sp.pl.refused) != 0 {
		return nil
	}
	r, e := sp.reqs[0], &sp.pl.moves[0]
	if r.commit == nil || !e.v.endLease || e.world != r.stream || sp.streams[0] != r.stream || sp.fences[0].World != r.stream {
		return nil
	}
	if _, ok := sp.cursors[r.stream]; !ok {
		return nil
	}
	for _, ks := range sp.keyStreams {
		if ks != r.stream {
			return nil
		}
	}
	return e
}

// appendReq is one Append, Commit or DrainToJournal waiting for a group
// commit. A Commit is an append to its world's stream with the cycle's
// other writes attached (commit != nil); DrainToJournal is a Commit of
// only a cursor move and entries.
type appendReq struct {
	groupcommit.Ticket
	ctx    context.Context
	op     string
	stream string
	events []store.Record
	sums   [][sha256.Size]byte // SHA-256 of each event's payload
	head   *uint64             // ExpectedHead (a Commit's always)
	opts   store.AppendOptions // an Append's
	commit *commitReq

	res  appendResult
	done chan struct{}
}

// commitReq is the part of a Commit that is not the append.
type commitReq struct {
	epoch uint64
	b     *store.CommitBatch
}

func (r *appendReq) Context() context.Context { return r.ctx }

func (r *appendReq) Answered() <-chan struct{} { return r.done }

func (r *appendReq) Refuse(err error) { r.finish(err) }

func (r *appendReq) finish(err error) {
	if r.res.err == nil && err != nil {
		r.res.err = dbErr(r.op, r.stream, err)
	}
	close(r.done)
}

func newAppendReq(ctx context.Context, op, stream string, events []store.Record) *appendReq {
	r := &appendReq{ctx: ctx, op: op, stream: stream, events: events, done: make(chan struct{})}
	r.sums = make([][sha256.Size]byte, len(events))
	for i := range events {
		r.sums[i] = sha256.Sum256(events[i].Payload)
	}
	return r
}

func (s *backend) commitAppend(r *appendReq) error {
	if err := s.appends.Do(r.stream, r); err != nil {
		return dbErr(r.op, r.stream, err)
	}
	return r.res.err
}
