package postgres

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
)

// ---- the inbox (Enqueue and DrainToJournal live with the committers) ----

// ReadInbox implements store.Inbox. A limit <= 0 means no limit.
func (s *Store) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	after, err := i64(op, world, "afterSeq", afterSeq)
	if err != nil {
		return nil, err
	}
	var out []store.InboxItem
	err = s.retry(ctx, op, world, func() error {
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

// Publish implements protocol C (see publish_effects).
func (s *Store) Publish(ctx context.Context, world string, epoch uint64, intents []store.Intent) (int, error) {
	const op = "publish"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	n := len(intents)
	hashes, kinds, origins, policies := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	params := make([][]byte, n)
	for i, in := range intents {
		if in.IntentHash == "" || in.Kind == "" {
			return 0, store.Errorf(op, store.ErrInvalid, world, "intent %q of kind %q", in.IntentHash, in.Kind)
		}
		if !validText(in.IntentHash) || !validText(in.Kind) || !validText(in.Origin) || !validText(in.PolicyContextHash) {
			return 0, store.Errorf(op, store.ErrInvalid, world, "intent %q: fields must be valid UTF-8 text", in.IntentHash)
		}
		hashes[i], kinds[i], origins[i], policies[i], params[i] = in.IntentHash, in.Kind, in.Origin, in.PolicyContextHash, in.Params
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil {
		return 0, err
	}
	var queued int32
	err = s.retry(ctx, op, world, func() error {
		return s.pool.QueryRow(ctx, `SELECT publish_effects($1, $2, $3, $4, $5, $6, $7, $8)`,
			world, e, hashes, kinds, params, origins, policies, s.off()).Scan(&queued)
	})
	if err != nil {
		return 0, err
	}
	if queued > 0 {
		s.hub.signal(store.TopicEffects)
	}
	return int(queued), nil
}

// Claim implements protocol D's claim (see claim_effects).
func (s *Store) Claim(ctx context.Context, worker string, n int, claimTTL time.Duration) ([]store.EffectItem, error) {
	const op = "claim"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if worker == "" || claimTTL <= 0 || !validText(worker) {
		return nil, store.Errorf(op, store.ErrInvalid, "", "worker %q, ttl %v", worker, claimTTL)
	}
	if n <= 0 {
		return nil, nil
	}
	var out []store.EffectItem
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.pool.Query(ctx, `SELECT * FROM claim_effects($1, $2, $3, $4)`, worker, int32(min(n, 1<<30)), int64(claimTTL), s.off())
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.EffectItem, error) {
			var it store.EffectItem
			var seq, enq, exp int64
			var attempts int32
			err := row.Scan(&it.IntentHash, &it.World, &seq, &it.Kind, &it.Params, &it.Origin, &it.PolicyContextHash,
				&enq, &attempts, &it.ClaimedBy, &exp)
			it.Seq, it.EnqueuedAt, it.Attempt, it.ClaimExpires = uint64(seq), fromNS(enq), int(attempts), fromNS(exp)
			return it, err
		})
		return err
	})
	// RETURNING has no order: queue order is seq order.
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, err
}

// ReapEffects implements the effect reaper (see reap_effects).
func (s *Store) ReapEffects(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_effects", `SELECT reap_effects($1)`, store.TopicEffects)
}

func (s *Store) reap(ctx context.Context, op, sql, topic string) (int, error) {
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var n int32
	err := s.retry(ctx, op, "", func() error {
		return s.pool.QueryRow(ctx, sql, s.off()).Scan(&n)
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.hub.signal(topic)
	}
	return int(n), nil
}

// EffectStatus implements store.Effects.
func (s *Store) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	var st store.EffectStatus
	err := s.retry(ctx, op, "", func() error {
		var state string
		var attempts int32
		var rstatus *string
		var rpayload []byte
		var seq, done *int64
		err := s.pool.QueryRow(ctx, `SELECT world, state, attempts, receipt_status, receipt_payload, inbox_seq, completed_at_ns
			FROM effects WHERE intent_hash = $1`, intentHash).Scan(&st.World, &state, &attempts, &rstatus, &rpayload, &seq, &done)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
		}
		if err != nil {
			return err
		}
		st.IntentHash, st.State, st.Attempts = intentHash, store.EffectState(state), int(attempts)
		if rstatus != nil {
			st.Receipt = &store.Receipt{Status: store.ReceiptStatus(*rstatus), Payload: rpayload}
		}
		if seq != nil {
			st.InboxSeq = uint64(*seq)
		}
		if done != nil {
			st.CompletedAt = fromNS(*done)
		}
		return nil
	})
	return st, err
}

// ---- timers ----

// Schedule implements protocol E's first step (see schedule_timer).
func (s *Store) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if intentHash == "" || !validText(intentHash) {
		return store.Errorf(op, store.ErrInvalid, world, "empty or invalid intent hash")
	}
	if err := checkTime(op, world, "deliverAt", deliverAt); err != nil {
		return err
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil {
		return err
	}
	err = s.retry(ctx, op, world, func() error {
		_, err := s.pool.Exec(ctx, `SELECT schedule_timer($1, $2, $3, $4, $5, $6)`,
			world, e, intentHash, toNS(deliverAt), payload, s.off())
		return err
	})
	if err == nil {
		s.hub.signal(store.TopicTimers)
	}
	return err
}

// CancelTimer implements store.Timers (see cancel_timer).
func (s *Store) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil {
		return err
	}
	err = s.retry(ctx, op, world, func() error {
		_, err := s.pool.Exec(ctx, `SELECT cancel_timer($1, $2, $3, $4)`, world, e, intentHash, s.off())
		return err
	})
	if err == nil {
		s.hub.signal(store.TopicTimers)
	}
	return err
}

// ClaimDue implements protocol E's claim (see claim_timers).
func (s *Store) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]store.TimerItem, error) {
	const op = "claim_due"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if worker == "" || ttl <= 0 || !validText(worker) {
		return nil, store.Errorf(op, store.ErrInvalid, "", "worker %q, ttl %v", worker, ttl)
	}
	if n <= 0 {
		return nil, nil
	}
	var out []store.TimerItem
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.pool.Query(ctx, `SELECT * FROM claim_timers($1, $2, $3, $4)`, worker, int32(min(n, 1<<30)), int64(ttl), s.off())
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TimerItem, error) {
			var it store.TimerItem
			var at, exp int64
			var attempts int32
			err := row.Scan(&it.World, &it.IntentHash, &at, &it.Payload, &attempts, &it.ClaimedBy, &exp)
			it.DeliverAt, it.Attempt, it.ClaimExpires = fromNS(at), int(attempts), fromNS(exp)
			return it, err
		})
		return err
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.DeliverAt.Equal(b.DeliverAt) {
			return a.DeliverAt.Before(b.DeliverAt)
		}
		return a.IntentHash < b.IntentHash
	})
	return out, err
}

// ReapTimers implements the timer reaper (see reap_timers).
func (s *Store) ReapTimers(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_timers", `SELECT reap_timers($1)`, store.TopicTimers)
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
		return s.pool.QueryRow(ctx, `SELECT sweep_dedupe($1, $2)`, int64(s.cfg.retention), s.off()).Scan(&n)
	})
	return int(n), err
}
