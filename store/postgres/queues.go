package postgres

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// ---- the inbox (Enqueue and DrainToJournal live with the committers) ----

// ReadInbox implements store.Inbox. A limit <= 0 means no limit.
func (s *Store) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	after := seqArg(afterSeq)
	var out []store.InboxItem
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.pool.Query(ctx, `SELECT seq, kind, payload, coalesce(dedupe_key, ''), enqueued_at_ns
			FROM inbox WHERE world = $1 AND seq > $2 ORDER BY seq LIMIT $3`, world, after, limitArg(limit))
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.InboxItem, error) {
			it := store.InboxItem{World: world}
			var seq, at int64
			err := row.Scan(&seq, &it.Kind, &it.Payload, &it.DedupeKey, &at)
			it.Seq, it.EnqueuedAt = uint64(seq), fromNS(at)
			return it, err
		})
		if err != nil || len(out) > 0 {
			return err
		}
		return s.worldExists(ctx, op, world)
	})
	return out, err
}

// worldExists fails with ErrWorldNotFound unless world exists.
func (s *Store) worldExists(ctx context.Context, op, world string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worlds WHERE world = $1)`, world).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	return nil
}

// Cursor implements store.Inbox.
func (s *Store) Cursor(ctx context.Context, world string) (uint64, error) {
	const op = "cursor"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var c int64
	err := s.retry(ctx, op, world, func() error {
		err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT inbox_cursor FROM streams WHERE stream = x.world), 0)
			FROM worlds x WHERE x.world = $1`, world).Scan(&c)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		return err
	})
	return uint64(c), err
}

// ---- effects ----

// checkFenced checks the plain arguments of a one-call fenced mutation.
func checkFenced(op, world string, epoch uint64) error {
	if err := store.CheckID(op, "world", world); err != nil {
		return err
	}
	return store.CheckInt(op, "epoch", epoch)
}

// Publish implements protocol C (see publish_effects).
func (s *Store) Publish(ctx context.Context, world string, epoch uint64, intents []store.Intent) (int, error) {
	const op = "publish"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	if err := checkFenced(op, world, epoch); err != nil {
		return 0, err
	}
	if err := store.CheckBatch(op, "intents", len(intents)); err != nil {
		return 0, err
	}
	n := len(intents)
	hashes, kinds, origins, policies := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	params := make([][]byte, n)
	for i, in := range intents {
		if err := store.CheckIntent(op, in); err != nil {
			return 0, err
		}
		hashes[i], kinds[i], origins[i], policies[i], params[i] = in.IntentHash, in.Kind, in.Origin, in.PolicyContextHash, in.Params
	}
	var queued int32
	err := s.retry(ctx, op, world, func() error {
		return s.pool.QueryRow(ctx, `SELECT publish_effects($1, $2, $3, $4, $5, $6, $7, $8)`,
			world, int64(epoch), hashes, kinds, params, origins, policies, s.off()).Scan(&queued)
	})
	if err != nil {
		return 0, err
	}
	if queued > 0 {
		s.hint(store.TopicEffects)
	}
	return int(queued), nil
}

func scanEffect(row pgx.CollectableRow) (store.EffectItem, error) {
	var it store.EffectItem
	var seq, enq int64
	var exp *int64
	var attempts, retries int32
	var state string
	err := row.Scan(&it.IntentHash, &it.World, &seq, &it.Kind, &it.Params, &it.Origin, &it.PolicyContextHash,
		&enq, &attempts, &it.ClaimedBy, &exp, &retries, &state)
	it.Seq, it.EnqueuedAt, it.Attempt, it.Retries, it.State = uint64(seq), fromNS(enq), int(attempts), int(retries), store.EffectState(state)
	if exp != nil {
		it.ClaimExpires = fromNS(*exp)
	}
	return it, err
}

// Claim implements protocol D's claim by kind (queue.go).
func (s *Store) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration) ([]store.EffectItem, error) {
	const op = "claim"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	for _, err := range []error{store.CheckID(op, "worker", worker), store.CheckKinds(op, kinds),
		store.CheckBatch(op, "n", n), store.CheckTTL(op, "claimTTL", claimTTL)} {
		if err != nil {
			return nil, err
		}
	}
	if n == 0 {
		return []store.EffectItem{}, nil
	}
	out, err := claim(s, ctx, op, effectsQueue, worker, n, claimTTL, scanEffect, kinds)
	if err != nil {
		return nil, err
	}
	// RETURNING has no order: queue order is seq order.
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// withdrawSQL withdraws pending effects: the (world, hash) pairs $1, $2,
// and every pending one of the worlds $3, at the clock with offset $4. The
// rows are locked in intent-hash order, as a delivery locks them, after
// the world, lease and stream rows of the transaction's other writes (the
// schema's lock order); a row a claim or a delivery took meanwhile is
// re-checked once its lock is released and skipped unless still pending.
const withdrawSQL = `WITH c AS (
		SELECT e.intent_hash FROM effects e
		WHERE e.state = 'pending' AND (e.world = ANY($3::text[])
			OR (e.world, e.intent_hash) IN (SELECT u.w, u.h FROM unnest($1::text[], $2::text[]) AS u(w, h)))
		ORDER BY e.intent_hash FOR UPDATE OF e)
	UPDATE effects x SET state = 'withdrawn', claim_expires_ns = NULL, completed_at_ns = now_ns($4)
	FROM c WHERE x.intent_hash = c.intent_hash AND x.state = 'pending'
	RETURNING x.world`

// queueWithdrawals queues withdrawSQL on b; withdrawn, if set, is called
// with the world of each effect withdrawn.
func queueWithdrawals(b *batch, ws, hs, all []string, off int64, withdrawn func(world string)) {
	if ws == nil {
		ws, hs = []string{}, []string{}
	}
	if all == nil {
		all = []string{}
	}
	b.queue(func(br pgx.BatchResults) error {
		var w string
		return scanEach(br, []any{&w}, func() {
			if withdrawn != nil {
				withdrawn(w)
			}
		})
	}, withdrawSQL, ws, hs, all, off)
}

// ReapEffects implements the effect reaper (queue.go).
func (s *Store) ReapEffects(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_effects", effectsQueue)
}

const effectStatusCols = `world, kind, state, attempts, retries, retry_reason, receipt_status, receipt_payload, inbox_seq, completed_at_ns,
	resolve_reason`

func scanEffectStatus(hash string, row pgx.Row) (store.EffectStatus, error) {
	st := store.EffectStatus{IntentHash: hash}
	var state string
	var attempts, retries int32
	var rstatus, resolveReason *string
	var rpayload []byte
	var seq, done *int64
	if err := row.Scan(&st.World, &st.Kind, &state, &attempts, &retries, &st.RetryReason, &rstatus, &rpayload, &seq, &done,
		&resolveReason); err != nil {
		return st, err
	}
	if resolveReason != nil {
		st.Resolved, st.ResolveReason = true, *resolveReason
	}
	st.State, st.Attempts, st.Retries = store.EffectState(state), int(attempts), int(retries)
	if rstatus != nil {
		st.Receipt = &store.Receipt{Status: store.ReceiptStatus(*rstatus), Payload: rpayload}
	}
	if seq != nil {
		st.InboxSeq = uint64(*seq)
	}
	if done != nil {
		st.CompletedAt = fromNS(*done)
	}
	return st, nil
}

// EffectStatus implements store.Effects.
func (s *Store) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return store.EffectStatus{}, err
	}
	var st store.EffectStatus
	err := s.retry(ctx, op, "", func() error {
		var err error
		st, err = scanEffectStatus(intentHash, s.pool.QueryRow(ctx, `SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = $1`, intentHash))
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
		}
		return err
	})
	return st, err
}

// RetryEffect implements store.Effects: the effect's row is read under
// lock, contract.Retryable decides, and the row goes back to pending in
// the same transaction (its receipt fields cleared: the next completion
// delivers a new receipt, under the new retry count's key; its claim
// cleared: the attempt that ended cannot pass as the retry's).
func (s *Store) RetryEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	const op = "retry_effect"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return store.EffectStatus{}, err
	}
	if err := store.CheckReason(op, reason); err != nil {
		return store.EffectStatus{}, err
	}
	var st store.EffectStatus
	var wstatus string
	err := s.twoTrips(ctx, op, "", func(b *batch) {
		b.queue(func(br pgx.BatchResults) error {
			var err error
			st, err = scanEffectStatus(intentHash, br.QueryRow())
			if err == pgx.ErrNoRows {
				return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
			}
			return err
		}, `SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = $1 FOR UPDATE`, intentHash)
		// Read, not locked: an archive that commits after this read has
		// withdrawn nothing of a done effect, and the claim's guard keeps
		// the retry from being handed out.
		b.queue(func(br pgx.BatchResults) error {
			wstatus = ""
			return scanEach(br, []any{&wstatus}, func() {})
		}, `SELECT w.status FROM worlds w JOIN effects e ON e.world = w.world WHERE e.intent_hash = $1`, intentHash)
	}, func(b *batch) error {
		var rs store.ReceiptStatus
		if st.Receipt != nil {
			rs = st.Receipt.Status
		}
		if err := contract.Retryable(op, intentHash, st.State, rs); err != nil {
			return err
		}
		if store.WorldStatus(wstatus) == store.WorldArchived {
			return store.Errorf(op, store.ErrWorldArchived, st.World, "intent %s", intentHash)
		}
		b.queue(func(br pgx.BatchResults) error {
			var err error
			st, err = scanEffectStatus(intentHash, br.QueryRow())
			return err
		}, `UPDATE effects SET state = 'pending', retries = retries + 1, retry_reason = $2,
				receipt_status = NULL, receipt_payload = NULL, resolve_reason = NULL, inbox_seq = NULL, completed_at_ns = NULL,
				claimed_by = '', claim_expires_ns = NULL
			WHERE intent_hash = $1
			RETURNING `+effectStatusCols, intentHash, reason)
		b.queue(nil, `SELECT notify_topic('effects')`)
		return nil
	})
	if err != nil {
		return store.EffectStatus{}, err
	}
	s.hint(store.TopicEffects)
	return st, nil
}

// ReleaseEffect implements store.Effects: the row is locked, decided by
// contract.ReleaseEffect, and put back to pending as a reap of that one
// item would. Like a claim or a reap, a release lost in a crash is simply
// not a release (the claim expires), so it does not wait for the WAL.
func (s *Store) ReleaseEffect(ctx context.Context, intentHash string, c store.Claim) error {
	const op = "release_effect"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return err
	}
	if err := store.CheckClaim(op, c); err != nil {
		return err
	}
	var (
		found, noop, withdraw bool
		state, status         string
		row                   contract.ClaimRow
	)
	off := s.off()
	err := s.twoTrips(ctx, op, "", func(b *batch) {
		b.queue(nil, "SET LOCAL synchronous_commit = off")
		b.queue(func(br pgx.BatchResults) error {
			var att int32
			err := br.QueryRow().Scan(&state, &att, &row.ClaimedBy, &status)
			if err == pgx.ErrNoRows {
				found = false
				return nil
			}
			found, row.Attempt = err == nil, int(att)
			return err
		}, `SELECT e.state, e.attempts, e.claimed_by, coalesce(w.status, '')
			FROM effects e LEFT JOIN worlds w ON w.world = e.world
			WHERE e.intent_hash = $1 FOR UPDATE OF e`, intentHash)
	}, func(b *batch) error {
		var err error
		if noop, err = contract.ReleaseEffect(op, intentHash, found, store.EffectState(state), row, c); err != nil || noop {
			return err
		}
		if withdraw = contract.ReleaseTo(store.WorldStatus(status)) == store.EffectWithdrawn; withdraw {
			b.queue(nil, `UPDATE effects SET state = 'withdrawn', claim_expires_ns = NULL, completed_at_ns = now_ns($2)
				WHERE intent_hash = $1`, intentHash, off)
			return nil
		}
		b.queue(nil, `UPDATE effects SET state = 'pending', claim_expires_ns = NULL WHERE intent_hash = $1`, intentHash)
		b.queue(nil, `SELECT notify_topic('effects')`)
		return nil
	})
	if err != nil {
		return err
	}
	if !noop && !withdraw {
		s.hint(store.TopicEffects)
	}
	return nil
}

// ---- timers ----

// Schedule implements protocol E's first step (see schedule_timer).
func (s *Store) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := checkFenced(op, world, epoch); err != nil {
		return err
	}
	if err := store.CheckTimerSet(op, store.TimerSet{IntentHash: intentHash, DeliverAt: deliverAt, Payload: payload}); err != nil {
		return err
	}
	err := s.retry(ctx, op, world, func() error {
		_, err := s.pool.Exec(ctx, `SELECT schedule_timer($1, $2, $3, $4, $5, $6)`,
			world, int64(epoch), intentHash, toNS(deliverAt), payload, s.off())
		return err
	})
	if err == nil {
		s.hint(store.TopicTimers)
	}
	return err
}

// CancelTimer implements store.Timers (see cancel_timer).
func (s *Store) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := checkFenced(op, world, epoch); err != nil {
		return err
	}
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return err
	}
	err := s.retry(ctx, op, world, func() error {
		_, err := s.pool.Exec(ctx, `SELECT cancel_timer($1, $2, $3, $4)`, world, int64(epoch), intentHash, s.off())
		return err
	})
	if err == nil {
		s.hint(store.TopicTimers)
	}
	return err
}

// timerStates maps the timers table's states to the contract's.
var timerStates = map[string]store.TimerState{
	"due": store.TimerScheduled, "inflight": store.TimerClaimed, "delivered": store.TimerDelivered,
}

func scanTimer(row pgx.CollectableRow) (store.TimerItem, error) {
	var it store.TimerItem
	var at int64
	var exp *int64
	var attempts int32
	var state string
	err := row.Scan(&it.World, &it.IntentHash, &at, &it.Payload, &attempts, &it.ClaimedBy, &exp, &state)
	it.DeliverAt, it.Attempt, it.State = fromNS(at), int(attempts), timerStates[state]
	if exp != nil {
		it.ClaimExpires = fromNS(*exp)
	}
	return it, err
}

// ClaimDue implements protocol E's claim (queue.go).
func (s *Store) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]store.TimerItem, error) {
	const op = "claim_due"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	for _, err := range []error{store.CheckID(op, "worker", worker), store.CheckBatch(op, "n", n), store.CheckTTL(op, "ttl", ttl)} {
		if err != nil {
			return nil, err
		}
	}
	if n == 0 {
		return []store.TimerItem{}, nil
	}
	out, err := claim(s, ctx, op, timersQueue, worker, n, ttl, scanTimer)
	if err != nil {
		return nil, err
	}
	sortTimers(out)
	return out, nil
}

func sortTimers(ts []store.TimerItem) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if !a.DeliverAt.Equal(b.DeliverAt) {
			return a.DeliverAt.Before(b.DeliverAt)
		}
		return a.IntentHash < b.IntentHash
	})
}

// ReapTimers implements the timer reaper (queue.go).
func (s *Store) ReapTimers(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_timers", timersQueue)
}

// NextDue implements store.Timers: the head of timers_due.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	const op = "next_due"
	if err := s.begin(ctx, op); err != nil {
		return time.Time{}, false, err
	}
	var at *int64
	err := s.retry(ctx, op, "", func() error {
		return s.pool.QueryRow(ctx, `SELECT min(deliver_at_ns) FROM timers WHERE state = 'due'`).Scan(&at)
	})
	if err != nil || at == nil {
		return time.Time{}, false, err
	}
	return fromNS(*at), true, nil
}

// ---- read-only views ----

// ListEffects implements store.Views (on effects_open_by_world).
func (s *Store) ListEffects(ctx context.Context, world string, afterSeq uint64, limit int) ([]store.EffectItem, error) {
	const op = "list_effects"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	for _, err := range []error{store.CheckID(op, "world", world), store.CheckBatch(op, "limit", limit)} {
		if err != nil {
			return nil, err
		}
	}
	out := []store.EffectItem{}
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.pool.Query(ctx, `SELECT intent_hash, world, seq, kind, params, origin, policy_context_hash,
				enqueued_at_ns, attempts, claimed_by, claim_expires_ns, retries, state
			FROM effects WHERE world = $1 AND state IN ('pending', 'inflight') AND seq > $2 ORDER BY seq LIMIT $3`, world, seqArg(afterSeq), int64(limit))
		var err error
		out, err = pgx.CollectRows(rows, scanEffect)
		if err != nil || len(out) > 0 {
			return err
		}
		return s.worldExists(ctx, op, world)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListTimers implements store.Views (on timers_open_by_world).
func (s *Store) ListTimers(ctx context.Context, world string, limit int) ([]store.TimerItem, error) {
	const op = "list_timers"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	for _, err := range []error{store.CheckID(op, "world", world), store.CheckBatch(op, "limit", limit)} {
		if err != nil {
			return nil, err
		}
	}
	out := []store.TimerItem{}
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.pool.Query(ctx, `SELECT world, intent_hash, deliver_at_ns, payload, attempts, claimed_by, claim_expires_ns, state
			FROM timers WHERE world = $1 AND state <> 'delivered' ORDER BY deliver_at_ns, intent_hash LIMIT $2`, world, int64(limit))
		var err error
		out, err = pgx.CollectRows(rows, scanTimer)
		if err != nil || len(out) > 0 {
			return err
		}
		return s.worldExists(ctx, op, world)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// QueueDepths implements store.Views: counts over the queues' partial
// indexes, and the inbox backlog from every world's counter and cursor.
func (s *Store) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	const op = "queue_depths"
	if err := s.begin(ctx, op); err != nil {
		return store.QueueDepths{}, err
	}
	var d store.QueueDepths
	err := s.retry(ctx, op, "", func() error {
		return s.pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM effects WHERE state = 'pending'),
				(SELECT count(*) FROM effects WHERE state = 'inflight'),
				(SELECT count(*) FROM timers WHERE state = 'due'),
				(SELECT count(*) FROM timers WHERE state = 'inflight'),
				(SELECT coalesce(sum(x.inbox_seq - coalesce(s.inbox_cursor, 0)), 0)::bigint
				 FROM worlds x LEFT JOIN streams s ON s.stream = x.world)`).
			Scan(&d.EffectsPending, &d.EffectsInflight, &d.TimersScheduled, &d.TimersClaimed, &d.InboxBacklog)
	})
	return d, err
}

// ---- dedupe retention ----

// SweepDedupe implements store.Dedupe (see sweep_dedupe).
func (s *Store) SweepDedupe(ctx context.Context) (int, error) {
	const op = "sweep_dedupe"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var n int32
	err := s.retry(ctx, op, "", func() error {
		// A withdrawn effect delivered nothing, so its record goes once the
		// retention has passed since the withdrawal.
		return s.pool.QueryRow(ctx, `WITH w AS (
				DELETE FROM effects WHERE state = 'withdrawn' AND completed_at_ns <= now_ns($2) - $1 RETURNING 1)
			SELECT sweep_dedupe($1, $2) + (SELECT count(*) FROM w)::integer`, int64(s.cfg.retention), s.off()).Scan(&n)
	})
	return int(n), err
}
