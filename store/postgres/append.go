package postgres

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
)

// The append committer. A batch of Append and DrainToJournal requests
// commits in one transaction, by one of two paths:
//
//   - The checked path (two round trips): BEGIN, lock and read everything
//     the batch's decisions need (lease rows FOR SHARE, stream rows FOR
//     UPDATE, the stored metadata of every idempotency key at stake); Go
//     decides every request; one statement writes; COMMIT.
//   - The speculative path (one round trip), for the common case of a
//     process appending to streams it appended to before: Go decides
//     against the heads its own last commits left (no stored duplicate
//     assumed, every fence assumed valid) and sends the decisions with
//     their assumptions as assertions that raise: the fences are checked,
//     each stream's head is compared-and-swapped under its row lock, and a
//     key taken for new that is stored (in events or compacted_keys)
//     violates the unique index or an assertion. If any assumption is
//     wrong, the transaction rolls back whole and the batch takes the
//     checked path. A commit is therefore only ever what the checked path
//     would have decided. Drains always take the checked path.
//
// Either way a request's typed failure (a stale fence, a head mismatch) is
// decided before anything is written, and never fails its neighbours.

// batchTimeout bounds one group commit; no caller's context is used for
// it, since one caller giving up must not fail the others.
const batchTimeout = 30 * time.Second

// runAppends commits one batch (its lane's goroutine runs it, so a
// stream's batches never overlap in this process). A request whose
// context already ended is answered without being sent. The batch commits
// speculatively if it can, else (or if the speculation fails) by the
// checked path. If the checked path fails for a reason no decision
// foresaw (the database refused a value), every request runs again on its
// own, so that one request's failure never fails its neighbours.
func (s *Store) runAppends(batch []*appendReq) {
	live := liveRequests(batch)
	if len(live) == 0 {
		return
	}
	s.stats.appendReqs.Add(uint64(len(live)))
	if spec := s.speculate(live); spec != nil {
		if res, ok := s.commitSpeculation(spec); ok {
			for i, r := range live {
				r.out, r.err = res[i].out, res[i].err
				r.finish(nil)
			}
			return
		}
	}
	res, err := s.appendWithRetry(live)
	if err != nil && len(live) > 1 {
		for _, r := range live {
			one, err := s.appendWithRetry([]*appendReq{r})
			if err != nil {
				r.finish(err)
				continue
			}
			r.out, r.err = one[0].out, one[0].err
			r.finish(nil)
		}
		return
	}
	for i, r := range live {
		if err != nil {
			r.finish(err)
			continue
		}
		r.out, r.err = res[i].out, res[i].err
		r.finish(nil)
	}
}

// appendWithRetry commits reqs by the checked path, again after a
// transient conflict, and remembers the heads it left.
func (s *Store) appendWithRetry(reqs []*appendReq) ([]appendResult, error) {
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

type appendResult struct {
	out []store.Appended
	err error
}

type streamKey struct{ stream, key string }

type leaseRow struct {
	epoch   int64
	holder  string
	expires int64
}

type streamRow struct {
	head, cursor int64
	read         int64 // the head the batch found (the CAS's expected value)
	touched      bool  // head or cursor moved in this batch
}

// newEvent is a row the batch inserts.
type newEvent struct {
	stream    string
	runSeq    int64
	rec       *store.Record
	persisted int64 // from RETURNING
}

// view is what the batch's decisions are made against.
type view struct {
	speculative bool                // fences and stored keys are assumed, not read
	leases      map[string]leaseRow // fenced worlds' leases
	exists      map[string]bool     // fenced worlds without a lease row that exist
	inboxSeq    map[string]int64    // drained worlds' last inbox seq
	heads       map[string]*streamRow
	existing    map[streamKey]store.Appended
	now         int64
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
}

type outRef struct {
	row int // index in plan.rows, or -1 when out is final
	out store.Appended
}

type drainRange struct {
	world  string
	lo, hi int64
}

// scope lists what reqs touch: the fenced worlds and the streams (both
// sorted: the lock order), and the idempotency keys at stake.
func scope(reqs []*appendReq) (fenceWorlds, streams, keyStreams, keyKeys []string) {
	seenFence, seenStream := map[string]bool{}, map[string]bool{}
	seenKey := map[streamKey]bool{}
	for _, r := range reqs {
		if f := r.fence; f != nil && f.World != "" && validText(f.World) && !seenFence[f.World] {
			seenFence[f.World] = true
			fenceWorlds = append(fenceWorlds, f.World)
		}
		// A drain's stream row holds its cursor, compared before its
		// entries are validated; an invalid append needs nothing.
		if r.invalid != nil && (!r.drain || r.stream == "" || !validText(r.stream)) {
			continue
		}
		if !seenStream[r.stream] {
			seenStream[r.stream] = true
			streams = append(streams, r.stream)
		}
		if r.invalid != nil {
			continue
		}
		for i := range r.events {
			k := streamKey{r.stream, r.events[i].IdempotencyKey}
			if !seenKey[k] {
				seenKey[k] = true
				keyStreams = append(keyStreams, k.stream)
				keyKeys = append(keyKeys, k.key)
			}
		}
	}
	sort.Strings(fenceWorlds)
	sort.Strings(streams)
	return
}

// decide answers every request, in order, against v, and collects the
// writes. It writes nothing.
func decide(reqs []*appendReq, streams []string, v *view) *plan {
	p := &plan{res: make([]appendResult, len(reqs)), refs: make([][]outRef, len(reqs)), streams: streams}
	inBatch := map[streamKey]int{} // key -> index in p.rows
	for i, r := range reqs {
		fail := func(kind error, format string, args ...any) {
			p.res[i].err = store.Errorf(r.op, kind, r.stream, format, args...)
		}
		if f := r.fence; f != nil {
			if f.World == "" || !validText(f.World) {
				p.res[i].err = store.Errorf(r.op, store.ErrInvalid, "", "empty or invalid world id")
				continue
			}
			if !v.speculative {
				l, ok := v.leases[f.World]
				switch {
				case !ok && !v.exists[f.World]:
					p.res[i].err = store.Errorf(r.op, store.ErrWorldNotFound, f.World, "")
				case !ok:
					p.res[i].err = store.Errorf(r.op, store.ErrFenced, f.World, "epoch %d: never leased", f.Epoch)
				case uint64(l.epoch) != f.Epoch:
					p.res[i].err = store.Errorf(r.op, store.ErrFenced, f.World, "epoch %d: lease is at epoch %d", f.Epoch, l.epoch)
				case l.holder == "":
					p.res[i].err = store.Errorf(r.op, store.ErrFenced, f.World, "epoch %d: lease released", f.Epoch)
				case l.expires <= v.now:
					p.res[i].err = store.Errorf(r.op, store.ErrFenced, f.World, "epoch %d: lease expired", f.Epoch)
				}
				if p.res[i].err != nil {
					continue
				}
			}
		}
		if r.invalid != nil && !r.drain {
			p.res[i].err = r.invalid
			continue
		}
		st := v.heads[r.stream]
		if r.drain {
			switch {
			case st == nil:
				p.res[i].err = r.invalid // only an invalid request has no stream row
			case uint64(st.cursor) != r.expCursor:
				fail(store.ErrCursorMismatch, "cursor is %d, expected %d", st.cursor, r.expCursor)
			case r.newCursor < r.expCursor:
				fail(store.ErrInvalid, "cursor cannot move back from %d to %d", r.expCursor, r.newCursor)
			case r.newCursor > uint64(v.inboxSeq[r.stream]):
				fail(store.ErrInvalid, "cursor %d passes the last seq %d", r.newCursor, v.inboxSeq[r.stream])
			case r.invalid != nil:
				p.res[i].err = r.invalid
			}
			if p.res[i].err != nil {
				continue
			}
		}
		// Resolve duplicates and assign runSeqs tentatively.
		ref := make([]outRef, len(r.events))
		fresh := map[string]int{} // key -> index in r.events of its first new occurrence
		var mine []int
		next := st.head
		for j := range r.events {
			ev := &r.events[j]
			k := streamKey{r.stream, ev.IdempotencyKey}
			if a, ok := v.existing[k]; ok {
				ref[j] = outRef{row: -1, out: a}
				continue
			}
			if ri, ok := inBatch[k]; ok {
				ref[j] = outRef{row: ri, out: store.Appended{EventID: p.rows[ri].rec.EventID, RunSeq: uint64(p.rows[ri].runSeq), Idempotent: true}}
				continue
			}
			if f, ok := fresh[ev.IdempotencyKey]; ok {
				ref[j] = ref[f]
				ref[j].out.Idempotent = true
				continue
			}
			next++
			fresh[ev.IdempotencyKey] = j
			mine = append(mine, j)
			ref[j] = outRef{row: len(p.rows) + len(mine) - 1, out: store.Appended{EventID: ev.EventID, RunSeq: uint64(next)}}
		}
		if r.head != nil && (len(mine) > 0 || r.drain) && *r.head != uint64(st.head) {
			fail(store.ErrHeadMismatch, "stream %s: head is %d, expected %d", r.stream, st.head, *r.head)
			if v.speculative {
				for _, j := range mine {
					p.refused = append(p.refused, streamKey{r.stream, r.events[j].IdempotencyKey})
				}
			}
			continue
		}
		for _, j := range mine {
			ev := &r.events[j]
			inBatch[streamKey{r.stream, ev.IdempotencyKey}] = len(p.rows)
			p.rows = append(p.rows, newEvent{stream: r.stream, runSeq: int64(ref[j].out.RunSeq), rec: ev})
		}
		if len(mine) > 0 {
			st.head, st.touched = next, true
		}
		if r.drain && int64(r.newCursor) != st.cursor {
			p.drains = append(p.drains, drainRange{r.stream, st.cursor, int64(r.newCursor)})
			st.cursor, st.touched = int64(r.newCursor), true
		}
		p.refs[i] = ref
	}
	return p
}

// writeSQL is the statement that writes a plan's new events and drained
// keys.
const writeSQL = `WITH clock AS (SELECT now_ns($13) AS now),
	ins AS (
		INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, emitted_at_ns,
			persisted_at_ns, step_id, logical_attempt_id, engine_attempt_id, plan_id, plan_version, payload)
		SELECT u.s, u.q, u.id, u.k, u.t, u.em, clock.now, u.st, u.la, u.ea, u.pid, u.pv, u.p
		FROM clock, unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[],
			$7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::bytea[])
			AS u(s, q, id, k, t, em, st, la, ea, pid, pv, p)
		RETURNING run_seq, stream, persisted_at_ns),
	drained AS (
		-- the drained items' dedupe keys complete now: their retention starts
		UPDATE inbox x SET key_drained_at_ns = clock.now
		FROM clock, unnest($14::text[], $15::bigint[], $16::bigint[]) AS d(w, lo, hi)
		WHERE x.world = d.w AND x.seq > d.lo AND x.seq <= d.hi AND x.key_live)
	SELECT run_seq, stream, persisted_at_ns FROM ins`

// queueHeads queues the plan's head and cursor moves on b. In the
// speculative path, cas_heads locks every stream at stake (in order) and
// fails unless each head is still the one the decisions assumed.
func (s *Store) queueHeads(b *batch, p *plan, v *view) {
	var us []string
	var uh, uc, uold []int64
	for _, st := range p.streams {
		h := v.heads[st]
		if h != nil && (h.touched || v.speculative) {
			us, uh, uc, uold = append(us, st), append(uh, h.head), append(uc, h.cursor), append(uold, h.read)
		}
	}
	if v.speculative {
		b.queue(nil, `SELECT cas_heads($1, $2, $3)`, us, uold, uh)
	} else if len(us) > 0 {
		b.queue(nil, `UPDATE streams x SET head = u.h, inbox_cursor = u.c
			FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(s, h, c) WHERE x.stream = u.s`, us, uh, uc)
	}
}

// queueInserts queues the plan's new events and drained keys on b.
func (s *Store) queueInserts(b *batch, p *plan) {
	if len(p.rows) == 0 && len(p.drains) == 0 {
		return
	}
	n := len(p.rows)
	var (
		cs, ids, keys, types, steps, plans = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seqs, emitted, la, ea, pv          = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		payloads                           = make([][]byte, n)
	)
	for j, row := range p.rows {
		ev := row.rec
		cs[j], seqs[j], ids[j], keys[j], types[j] = row.stream, row.runSeq, ev.EventID, ev.IdempotencyKey, ev.EventType
		emitted[j], steps[j], la[j], ea[j] = toNS(ev.EmittedAt), ev.StepID, int64(ev.LogicalAttemptID), int64(ev.EngineAttemptID)
		plans[j], pv[j], payloads[j] = ev.PlanID, int64(ev.PlanVersion), ev.Payload
	}
	dw, lo, hi := make([]string, len(p.drains)), make([]int64, len(p.drains)), make([]int64, len(p.drains))
	for j, d := range p.drains {
		dw[j], lo[j], hi[j] = d.world, d.lo, d.hi
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
	}, writeSQL, cs, seqs, ids, keys, types, emitted, steps, la, ea, plans, pv, payloads, s.off(), dw, lo, hi)
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
func (s *Store) appendChecked(reqs []*appendReq) ([]appendResult, map[string]*streamRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	fenceWorlds, streams, keyStreams, keyKeys := scope(reqs)
	p, err := s.beginTx(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer p.end()
	s.stats.appendTxs.Add(1)
	off := s.off()

	// Round trip 1: locks and reads.
	v := &view{
		leases: map[string]leaseRow{}, exists: map[string]bool{}, inboxSeq: map[string]int64{},
		heads: map[string]*streamRow{}, existing: map[streamKey]store.Appended{},
	}
	b := &batch{}
	b.queue(nil, "BEGIN")
	if len(fenceWorlds) > 0 {
		b.queue(func(br pgx.BatchResults) error {
			var w string
			var l leaseRow
			var seq int64
			return scanEach(br, []any{&w, &l.epoch, &l.holder, &l.expires, &seq, &v.now}, func() {
				v.leases[w], v.inboxSeq[w] = l, seq
			})
		}, `SELECT l.world, l.epoch, l.holder, l.expires_at_ns, x.inbox_seq, now_ns($2)
			FROM leases l JOIN worlds x ON x.world = l.world
			WHERE l.world = ANY($1) ORDER BY l.world FOR SHARE OF l`, fenceWorlds, off)
	}
	if len(streams) > 0 {
		// Create the missing rows (an insert racing ours waits for it), then
		// lock them all, in stream order. Locking writes no new row version,
		// unlike an upsert.
		b.queue(nil, `INSERT INTO streams (stream) SELECT s FROM unnest($1::text[]) AS s ORDER BY s
			ON CONFLICT (stream) DO NOTHING`, streams)
		b.queue(func(br pgx.BatchResults) error {
			var st string
			var head, cursor int64
			return scanEach(br, []any{&st, &head, &cursor, &v.now}, func() {
				v.heads[st] = &streamRow{head: head, cursor: cursor, read: head}
			})
		}, `SELECT stream, head, inbox_cursor, now_ns($2) FROM streams
			WHERE stream = ANY($1) ORDER BY stream FOR UPDATE`, streams, off)
	}
	if len(keyKeys) > 0 {
		b.queue(func(br pgx.BatchResults) error {
			var k streamKey
			var id string
			var seq, at int64
			return scanEach(br, []any{&k.stream, &k.key, &id, &seq, &at}, func() {
				v.existing[k] = store.Appended{EventID: id, RunSeq: uint64(seq), PersistedAt: fromNS(at), Idempotent: true}
			})
		}, `SELECT e.stream, e.idempotency_key, e.event_id, e.run_seq, e.persisted_at_ns
			FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN events e ON e.stream = k.s AND e.idempotency_key = k.key
			UNION ALL
			SELECT c.stream, c.idempotency_key, c.event_id, c.run_seq, c.persisted_at_ns
			FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN compacted_keys c ON c.stream = k.s AND c.idempotency_key = k.key`, keyStreams, keyKeys)
	}
	if err := b.send(ctx, p); err != nil {
		return nil, nil, err
	}
	for _, st := range streams {
		if v.heads[st] == nil {
			return nil, nil, errUnreachable
		}
	}
	// A fenced world without a lease row: it was never leased, or does not
	// exist (a rare answer, worth a round trip of its own).
	var unleased []string
	for _, w := range fenceWorlds {
		if _, ok := v.leases[w]; !ok {
			unleased = append(unleased, w)
		}
	}
	if len(unleased) > 0 {
		rows, _ := p.conn.Query(ctx, `SELECT world FROM worlds WHERE world = ANY($1)`, unleased)
		var w string
		if _, err := pgx.ForEachRow(rows, []any{&w}, func() error {
			v.exists[w] = true
			return nil
		}); err != nil {
			return nil, nil, err
		}
	}

	// Round trip 2: decide, write, commit.
	pl := decide(reqs, streams, v)
	b = &batch{}
	s.queueHeads(b, pl, v)
	s.queueInserts(b, pl)
	b.queue(nil, "COMMIT")
	if err := b.send(ctx, p); err != nil {
		return nil, nil, err
	}
	if !p.committed() {
		return nil, nil, errUnreachable
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
	reqs                 []*appendReq
	pl                   *plan
	v                    *view
	fenceWorlds, streams []string
	keyStreams, keyKeys  []string
}

// speculate decides reqs against the heads the cache guesses, or returns
// nil when the batch must take the checked path (a drain, a stream not
// cached or cooling down).
func (s *Store) speculate(reqs []*appendReq) *speculation {
	for _, r := range reqs {
		if r.drain {
			return nil
		}
	}
	fenceWorlds, streams, keyStreams, keyKeys := scope(reqs)
	if len(streams) == 0 {
		return nil
	}
	heads, ok := s.heads.lookup(streams)
	if !ok {
		return nil
	}
	v := &view{speculative: true, heads: heads}
	pl := decide(reqs, streams, v)
	return &speculation{reqs: reqs, pl: pl, v: v, fenceWorlds: fenceWorlds, streams: streams, keyStreams: keyStreams, keyKeys: keyKeys}
}

// commitSpeculation sends a speculation in one round trip; false means
// nothing was written and the batch must take the checked path.
func (s *Store) commitSpeculation(sp *speculation) ([]appendResult, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	p, err := s.beginTx(ctx)
	if err != nil {
		s.heads.miss(sp.streams)
		return nil, false
	}
	defer p.end()
	s.stats.appendTxs.Add(1)
	b := &batch{}
	b.queue(nil, "BEGIN")
	if len(sp.fenceWorlds) > 0 {
		// Every fence the batch relies on (the failing ones included: the
		// checked path reports them precisely).
		var fences []store.Fence
		seen := map[store.Fence]bool{}
		for _, r := range sp.reqs {
			if f := r.fence; f != nil && f.World != "" && validText(f.World) && !seen[*f] {
				seen[*f] = true
				fences = append(fences, *f)
			}
		}
		sort.Slice(fences, func(i, j int) bool { return fences[i].World < fences[j].World })
		ws, es := make([]string, len(fences)), make([]int64, len(fences))
		for i, f := range fences {
			ws[i], es[i] = f.World, int64(min(f.Epoch, 1<<63-1))
		}
		b.queue(nil, `SELECT check_fences($1, $2, $3)`, ws, es, s.off())
	}
	s.queueHeads(b, sp.pl, sp.v)
	// The decisions took every key for new. A new event's insert proves it
	// against events (the unique index), not against compacted_keys; a
	// request refused for its head inserts nothing, yet its keys decided
	// its answer.
	if len(sp.keyKeys) > 0 {
		b.queue(nil, `SELECT expect_count((SELECT count(*) FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN compacted_keys c ON c.stream = k.s AND c.idempotency_key = k.key), 0, 'a key was compacted')`,
			sp.keyStreams, sp.keyKeys)
	}
	if len(sp.pl.refused) > 0 {
		ks, kk := make([]string, len(sp.pl.refused)), make([]string, len(sp.pl.refused))
		for i, k := range sp.pl.refused {
			ks[i], kk[i] = k.stream, k.key
		}
		b.queue(nil, `SELECT expect_count((SELECT count(*) FROM unnest($1::text[], $2::text[]) AS k(s, key)
			JOIN events e ON e.stream = k.s AND e.idempotency_key = k.key), 0, 'a key is stored already')`, ks, kk)
	}
	s.queueInserts(b, sp.pl)
	b.queue(nil, "COMMIT")
	if err := b.send(ctx, p); err != nil || !p.committed() {
		// Some guess was wrong (or the database failed): nothing was
		// written; the checked path decides again.
		s.heads.miss(sp.streams)
		s.stats.speculationMisses.Add(1)
		return nil, false
	}
	s.heads.remember(sp.v.heads)
	return sp.pl.answers(), true
}
