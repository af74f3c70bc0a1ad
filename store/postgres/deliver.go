package postgres

import (
	"context"
	"errors"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/store/internal/groupcommit"
	"github.com/orrery-run/orrery/vocab"
)

// A delivery puts one item into a world's inbox: Enqueue, Complete and
// Resolve (the receipt), Fire (the timer-fired item) and Send (fabric).
// Deliveries are group-committed like appends (see deliveryTx): every
// check is decided before anything is written, so one request's typed
// failure (an unknown intent, an archived world) never fails its
// neighbours.

type deliveryKind uint8

const (
	dEnqueue deliveryKind = iota
	dComplete
	dFire
	dSend
)

type deliveryReq struct {
	groupcommit.Ticket
	ctx   context.Context
	op    string
	kind  deliveryKind
	world string      // Enqueue's world, Send's destination
	hash  string      // Complete's, Resolve's and Fire's intent hash
	msg   string      // Send's message id
	by    contract.By // who settles: a claimant (Complete, Fire) or an operator (Resolve)

	itemKind string
	payload  []byte
	key      string // Enqueue's dedupe key
	// maxBacklog is Enqueue's bound (store.InboxItem.MaxBacklog; 0: none).
	maxBacklog int
	status     string // Complete's and Resolve's receipt status

	// parts are a CompleteMany's completions (its valid ones, in order):
	// the request carries no delivery of its own, and its parts are decided
	// in its transaction exactly as Completes queued one after the other.
	parts []*deliveryReq

	res  deliveryResult
	done chan struct{}
}

func (r *deliveryReq) Context() context.Context { return r.ctx }

func (r *deliveryReq) Answered() <-chan struct{} { return r.done }

func (r *deliveryReq) Refuse(err error) { r.finish(err) }

func (r *deliveryReq) finish(err error) {
	if r.res.err == nil && err != nil {
		r.res.err = dbErr(r.op, r.world, err)
	}
	close(r.done)
}

func (s *backend) deliver(r *deliveryReq) (uint64, bool, error) {
	r.done = make(chan struct{})
	if err := s.deliveries.Do(r.world+r.hash, r); err != nil {
		return 0, false, dbErr(r.op, r.world, err)
	}
	if r.res.err != nil {
		return 0, false, r.res.err
	}
	if !r.res.dup {
		s.hint(store.TopicInbox(r.res.world))
	}
	return r.res.seq, r.res.dup, nil
}

// runDeliveries commits one batch of deliveries (see runAppends for the
// treatment of failures: a CompleteMany reruns as a whole, its parts still
// in one transaction).
func (s *backend) runDeliveries(batch []*deliveryReq) {
	live := batch
	if len(live) == 0 {
		return
	}
	s.stats.deliveryReqs.Add(uint64(len(live)))
	err := s.deliverAll(live)
	// A batch that committed unacknowledged by the standby is not run
	// again request by request: it was written (failover.go).
	if err != nil && len(live) > 1 && !errors.Is(err, errSyncRepCut) {
		for _, r := range live {
			r.finish(s.deliverAll([]*deliveryReq{r}))
		}
		return
	}
	for _, r := range live {
		r.finish(err)
	}
}

// deliverAll runs reqs, a CompleteMany's parts in its place, in one
// transaction, and sets every answer once it committed.
func (s *backend) deliverAll(reqs []*deliveryReq) error {
	flat := make([]*deliveryReq, 0, len(reqs))
	for _, r := range reqs {
		if r.parts != nil {
			flat = append(flat, r.parts...)
			continue
		}
		flat = append(flat, r)
	}
	res, err := s.deliverWithRetry(flat)
	if err != nil {
		return err
	}
	for i, r := range flat {
		r.res = res[i]
	}
	return nil
}

// enqueueOne is deliveryTx for a batch of one Enqueue (an idle store's
// usual batch) in one round trip: enqueue_one locks the world's row,
// probes the key and writes the item in one call, and answers what it
// read, on which contract.Ingress decides again.
func (s *backend) enqueueOne(ctx context.Context, r *deliveryReq) ([]deliveryResult, error) {
	p, err := s.beginTx(ctx)
	if err != nil {
		return nil, err
	}
	defer p.end()
	s.stats.deliveryTxs.Add(1)
	var found, dup, written bool
	var status string
	var seq int64
	b := &batch{}
	b.begin()
	b.queue(func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&found, &status, &seq, &dup, &written)
	}, enqueueOneSQL, r.world, r.itemKind, r.payload, r.key, s.off())
	b.commit()
	if err := b.send(ctx, p); err != nil {
		return nil, err
	}
	if err := p.commitErr(); err != nil {
		return nil, err
	}
	res := deliveryResult{world: r.world}
	res.err = contract.Ingress(r.op, r.world, found, store.WorldStatus(status))
	if (res.err == nil) != (written || dup) {
		return nil, errDisagree(r.op, r.world)
	}
	if res.err == nil {
		res.seq, res.dup = uint64(seq), dup
	}
	return []deliveryResult{res}, nil
}

type deliveryResult struct {
	seq   uint64
	dup   bool
	world string // the inbox's
	err   error
}

func (s *backend) deliverWithRetry(reqs []*deliveryReq) ([]deliveryResult, error) {
	var res []deliveryResult
	err := s.retry(context.Background(), "deliver", "", func() error {
		var err error
		res, err = s.deliveryTx(reqs)
		return err
	})
	return res, err
}

// errRetryBatch rolls a batch back to run it again: an effect or timer
// appeared between the batch's world locks and its own reads, so its
// world's row is not locked (a rare race with Publish or Schedule).
var errRetryBatch = errors.New("postgres: batch raced a new row; retrying")

type worldRow struct {
	status string
	seq    int64 // the last inbox seq, advanced as the batch assigns
	cursor int64 // the inbox cursor when locked
	dirty  bool
}

type inboxKey struct{ world, key string }

// queue returns the index in settled of the queue a Complete, Resolve or
// Fire settles an item of.
func (r *deliveryReq) queue() int {
	if r.kind == dFire {
		return qTimers
	}
	return qEffects
}

// The statements of a delivery batch. Their parameters: the worlds at
// stake ($1) then each queue's hashes to settle (lockWorldsSQL); the
// dedupe keys to probe ($1, $2) then each queue's hashes (probeKeysSQL);
// the inbox items ($1 … $5), the counters ($6, $7), each queue's settled
// items (settleArrays each), the fabric records and the clock (deliverSQL).
var (
	// The cursor is read with the lock; a drain that commits meanwhile
	// only makes the backlog read larger than it is, never smaller, and
	// enqueues, the only writes that grow it, wait on the lock.
	lockWorldsSQL = `SELECT x.world, x.status, x.inbox_seq,
			coalesce((SELECT s.inbox_cursor FROM streams s WHERE s.stream = x.world), 0)
		FROM worlds x WHERE x.world IN (
			SELECT unnest($1::text[])
			UNION ` + settledWorlds(2) + `)
		ORDER BY x.world FOR NO KEY UPDATE`
	// The store's own delivery keys are each queue's deliveryKey (which
	// mirrors store.ReceiptKey, store.TimerKey). Each key is probed on its own (LATERAL; LIMIT 1, which the unique
	// index makes a no-op, keeps the planner from flattening it): a join
	// of the keys with the whole inbox sorts the inbox's live keys every
	// batch.
	probeKeysSQL = `SELECT k.w, k.key, i.seq FROM (
				SELECT * FROM unnest($1::text[], $2::text[])
				UNION ALL ` + settledKeys(3) + `
			) AS k(w, key), LATERAL (
				SELECT i.seq FROM inbox i WHERE i.world = k.w AND i.dedupe_key = k.key AND i.key_live
				LIMIT 1
			) AS i`
	fabricParam = 8 + settleArrays*len(settled)
	nowParam    = fabricParam + 3
	deliverSQL  = deliverSQLAt("$" + strconv.Itoa(nowParam))
)

// deliverSQLAt returns the delivery statement with now as the SQL of its
// clock.
func deliverSQLAt(now string) string {
	return `WITH items AS (
				INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at_ns, key_live)
				SELECT u.w, u.s, u.k, u.p, NULLIF(u.key, ''), ` + now + `, u.key <> ''
				FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::text[]) AS u(w, s, k, p, key)),
			counters AS (
				UPDATE worlds x SET inbox_seq = u.s
				FROM unnest($6::text[], $7::bigint[]) AS u(w, s) WHERE x.world = u.w)` + settleCTEs(8, now) + `,
			fabric AS (
				INSERT INTO fabric_dedupe (dest, message_id, seq, delivered_at_ns)
				SELECT u.d, u.m, u.s, ` + now + ` FROM unnest($` + strconv.Itoa(fabricParam) + `::text[], $` +
		strconv.Itoa(fabricParam+1) + `::text[], $` + strconv.Itoa(fabricParam+2) + `::bigint[]) AS u(d, m, s))
			SELECT notify_topic('inbox:' || w) FROM unnest($6::text[]) AS w`
}

// deliverWrite is what deliverSQL writes: new inbox items, the worlds'
// inbox counters (in world order), each queue's settled items and the
// fabric records.
type deliverWrite struct {
	iw, ik, ikey []string                // new items: world, kind, dedupe key
	is           []int64                 // seq
	ip           [][]byte                // payload
	ww           []string                // counters: world, in world order
	wseq         []int64                 // the world's last seq
	sh, sst      [len(settled)][]string  // settled items: hash, receipt status
	sp           [len(settled)][][]byte  // receipt payload
	sseq         [len(settled)][]int64   // inbox seq
	srr          [len(settled)][]*string // the operator's reason (nil: a claimant settled)
	fd, fm       []string                // fabric records: destination, message id
	fseq         []int64                 // the delivery's seq
}

// item adds a new inbox item.
func (d *deliverWrite) item(world string, seq int64, kind string, payload []byte, key string) {
	d.iw, d.is, d.ik, d.ip, d.ikey = append(d.iw, world), append(d.is, seq), append(d.ik, kind), append(d.ip, payload), append(d.ikey, key)
}

// queue queues deliverSQL on b, at now, unless there is nothing to write.
// It notifies the watchers of every world whose counter moved.
func (d *deliverWrite) queue(b *batch, now int64) { d.queueSQL(b, deliverSQL, now) }

// queueSQL queues sql, deliverSQL or a variant of it, with d's arrays and
// then clock (its clock parameter, if it takes one), unless there is
// nothing to write.
func (d *deliverWrite) queueSQL(b *batch, sql string, clock ...any) {
	args := []any{d.iw, d.is, d.ik, d.ip, d.ikey, d.ww, d.wseq}
	write := len(d.ww) > 0
	for i := range settled {
		args = append(args, d.sh[i], d.sseq[i], d.sst[i], d.sp[i], d.srr[i])
		write = write || len(d.sh[i]) > 0
	}
	if write {
		b.queue(nil, sql, append(append(args, d.fd, d.fm, d.fseq), clock...)...)
	}
}

// deliveryTx runs reqs in one transaction of two round trips, like the
// append committer's checked path:
//
//  1. BEGIN; lock the row of every world at stake, in id order (a
//     Complete's or Fire's world is its effect's or timer's); lock the
//     effects and timers to complete; read the inbox dedupe keys and the
//     fabric records at stake, and the clock (after every lock wait, so a
//     timer is due by the clock of the transaction that fires it).
//  2. Go decides each request in order (contract.Ingress, ClaimCheck and
//     Due on the locked rows; duplicates within the batch and against the
//     store) and assigns inbox seqs from each world's counter; one statement writes the items, the counters, the effect
//     and timer states and the fabric records, and notifies each world's
//     watchers; COMMIT.
//
// The world row locks order inbox seqs: they commit in seq order, so a
// reader that saw seq n never later finds a new item below n.
func (s *backend) deliveryTx(reqs []*deliveryReq) ([]deliveryResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	// A bounded Enqueue takes the batch path, which reads the cursor under
	// the world's lock: enqueue_one knows no bound.
	if len(reqs) == 1 && reqs[0].kind == dEnqueue && reqs[0].maxBacklog == 0 {
		return s.enqueueOne(ctx, reqs[0])
	}
	var hashes [len(settled)][]string // each queue's items to settle
	var worldIDs, keyWorlds, keyKeys, sendDests, sendMsgs []string
	for _, r := range reqs {
		switch r.kind {
		case dComplete, dFire:
			i := r.queue()
			hashes[i] = append(hashes[i], r.hash)
		case dEnqueue:
			worldIDs = append(worldIDs, r.world)
			if r.key != "" {
				keyWorlds, keyKeys = append(keyWorlds, r.world), append(keyKeys, r.key)
			}
		case dSend:
			worldIDs = append(worldIDs, r.world)
			sendDests, sendMsgs = append(sendDests, r.world), append(sendMsgs, r.msg)
		}
	}
	settling := false
	hashArgs := make([]any, len(settled))
	for i := range hashes {
		sort.Strings(hashes[i])
		hashArgs[i] = hashes[i]
		settling = settling || len(hashes[i]) > 0
	}

	p, err := s.beginTx(ctx)
	if err != nil {
		return nil, err
	}
	defer p.end()
	s.stats.deliveryTxs.Add(1)
	off := s.off()

	// Round trip 1: locks and reads.
	worlds := map[string]*worldRow{}
	var rows [len(settled)]map[string]*queueRow
	keys := map[inboxKey]int64{}
	sent := map[inboxKey]int64{}
	var nowNS int64
	b := &batch{}
	b.begin()
	// Every statement below reads or writes rows by key, a few hundred at
	// a time under load. On a queue that grew faster than its statistics
	// the planner prices a scan of the whole effects (or inbox) table below
	// that many index probes, and a batch then costs time in the table's
	// size instead of its own: probing by key is never the wrong plan here.
	b.queue(nil, "SET LOCAL enable_seqscan = off")
	b.queue(func(br pgx.BatchResults) error {
		var w, status string
		var seq, cursor int64
		return scanEach(br, []any{&w, &status, &seq, &cursor}, func() {
			worlds[w] = &worldRow{status: status, seq: seq, cursor: cursor}
		})
	}, lockWorldsSQL, append([]any{worldIDs}, hashArgs...)...)
	for i, q := range settled {
		rows[i] = map[string]*queueRow{}
		if len(hashes[i]) > 0 {
			b.queue(func(br pgx.BatchResults) error { return scanQueueRow(br, rows[i]) }, q.lockSQL, hashes[i])
		}
	}
	if len(keyKeys) > 0 || settling {
		// The dedupe keys at stake, the settles' among them (probeKeysSQL).
		b.queue(func(br pgx.BatchResults) error {
			var k inboxKey
			var seq int64
			return scanEach(br, []any{&k.world, &k.key, &seq}, func() { keys[k] = seq })
		}, probeKeysSQL, append([]any{keyWorlds, keyKeys}, hashArgs...)...)
	}
	if len(sendMsgs) > 0 {
		b.queue(func(br pgx.BatchResults) error {
			var k inboxKey
			var seq int64
			return scanEach(br, []any{&k.world, &k.key, &seq}, func() { sent[k] = seq })
		}, `SELECT f.dest, f.message_id, f.seq FROM fabric_dedupe f
			JOIN unnest($1::text[], $2::text[]) AS k(d, m) ON f.dest = k.d AND f.message_id = k.m`, sendDests, sendMsgs)
	}
	// The clock, read after every lock wait.
	b.queue(func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&nowNS)
	}, `SELECT now_ns($1)`, off)
	if err := b.send(ctx, p); err != nil {
		return nil, err
	}
	now := fromNS(nowNS)

	// Decide every request, in order.
	res := make([]deliveryResult, len(reqs))
	var d deliverWrite
	// put assigns the next seq of w's inbox to a new item, unless key
	// (when set) is already there.
	put := func(w *worldRow, world, kind string, payload []byte, key string) (int64, bool) {
		if key != "" {
			if seq, ok := keys[inboxKey{world, key}]; ok {
				return seq, true
			}
		}
		w.seq++
		w.dirty = true
		d.item(world, w.seq, kind, payload, key)
		if key != "" {
			keys[inboxKey{world, key}] = w.seq
		}
		return w.seq, false
	}
	gate := func(r *deliveryReq, w *worldRow) error {
		if w == nil {
			return contract.Ingress(r.op, r.world, false, "")
		}
		return contract.Ingress(r.op, r.world, true, store.WorldStatus(w.status))
	}
	for i, r := range reqs {
		out := &res[i]
		switch r.kind {
		case dEnqueue:
			w := worlds[r.world]
			if out.err = gate(r, w); out.err != nil {
				continue
			}
			if r.maxBacklog != 0 {
				// A duplicate answers as one, whatever the backlog.
				_, dup := keys[inboxKey{r.world, r.key}]
				if n := store.Backlog(uint64(w.seq), uint64(w.cursor)); !(r.key != "" && dup) && store.Overloaded(n, r.maxBacklog) {
					out.err = store.Errorf(r.op, store.ErrOverloaded, r.world, "%d items undrained, bound %d", n, r.maxBacklog)
					continue
				}
			}
			seq, dup := put(w, r.world, r.itemKind, r.payload, r.key)
			out.seq, out.dup, out.world = uint64(seq), dup, r.world
		case dSend:
			w := worlds[r.world]
			seq, delivered := sent[inboxKey{r.world, r.msg}]
			var status store.WorldStatus
			if w != nil {
				status = store.WorldStatus(w.status)
			}
			already, err := contract.Send(r.op, r.world, delivered, w != nil, status)
			if out.err = err; err != nil {
				continue
			}
			if already {
				out.seq, out.dup, out.world = uint64(seq), true, r.world
				continue
			}
			out.world = r.world
			seq, _ = put(w, r.world, vocab.KindFabric, r.payload, "")
			sent[inboxKey{r.world, r.msg}] = seq
			d.fd, d.fm, d.fseq = append(d.fd, r.world), append(d.fm, r.msg), append(d.fseq, seq)
			out.seq = uint64(seq)
		case dComplete, dFire:
			i := r.queue()
			q, row := settled[i], rows[i][r.hash]
			var done bool
			if done, out.err = q.settle(r, row, now); out.err != nil {
				continue
			}
			if done {
				out.seq, out.dup, out.world = uint64(row.inboxSeq), true, row.world
				continue
			}
			w := worlds[row.world]
			if w == nil {
				return nil, errRetryBatch
			}
			// The delivery enters the inbox whatever the world's status: it
			// answers the world's own request.
			kind, payload, key := q.delivery(r.hash, row, r)
			seq, dup := put(w, row.world, kind, payload, key)
			row.state, row.inboxSeq = q.done, seq
			d.sh[i], d.sst[i], d.sp[i], d.sseq[i] = append(d.sh[i], r.hash), append(d.sst[i], r.status), append(d.sp[i], r.payload), append(d.sseq[i], seq)
			d.srr[i] = append(d.srr[i], r.by.OperatorReason())
			out.seq, out.dup, out.world = uint64(seq), dup, row.world
		}
	}
	// In world order: the counters' updates lock the rows already locked.
	for w, row := range worlds {
		if row.dirty {
			d.ww = append(d.ww, w)
		}
	}
	sort.Strings(d.ww)
	for _, w := range d.ww {
		d.wseq = append(d.wseq, worlds[w].seq)
	}
	// Round trip 2: write and commit.
	b = &batch{}
	d.queue(b, nowNS)
	b.commit()
	if err := b.send(ctx, p); err != nil {
		return nil, err
	}
	if err := p.commitErr(); err != nil {
		return nil, err
	}
	return res, nil
}
