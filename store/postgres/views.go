package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// ListEffects implements store.Views (on effects_open_by_world).
func (s *backend) ListEffects(ctx context.Context, world string, afterSeq uint64, limit int) ([]vocab.EffectItem, error) {
	const op = "list_effects"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	out := []vocab.EffectItem{}
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.db.Query(ctx, `SELECT intent_hash, world, seq, kind, params, origin, policy_context_hash,
				enqueued_at_ns, attempts, claimed_by, claim_expires_ns, retries, state, retry_policy, failures, retry_at_ns, hold_reason, held_at_ns
			FROM effects WHERE world = $1 AND state IN ('pending', 'inflight', 'held') AND seq > $2 ORDER BY seq LIMIT $3`, world, seqArg(afterSeq), int64(limit))
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
func (s *backend) ListTimers(ctx context.Context, world string, limit int) ([]store.TimerItem, error) {
	const op = "list_timers"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	out := []store.TimerItem{}
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.db.Query(ctx, `SELECT world, intent_hash, deliver_at_ns, payload, attempts, claimed_by, claim_expires_ns, state
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
func (s *backend) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	const op = "queue_depths"
	if err := s.begin(op); err != nil {
		return store.QueueDepths{}, err
	}
	var d store.QueueDepths
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM effects WHERE state = 'pending'),
				(SELECT count(*) FROM effects WHERE state = 'inflight'),
				(SELECT count(*) FROM effects WHERE state = 'held'),
				(SELECT count(*) FROM timers WHERE state = 'due'),
				(SELECT count(*) FROM timers WHERE state = 'inflight'),
				(SELECT coalesce(sum(x.inbox_seq - coalesce(s.inbox_cursor, 0)), 0)::bigint
				 FROM worlds x LEFT JOIN streams s ON s.stream = x.world)`).
			Scan(&d.EffectsPending, &d.EffectsInflight, &d.EffectsHeld, &d.TimersScheduled, &d.TimersClaimed, &d.InboxBacklog)
	})
	return d, err
}

// PendingEffects implements store.Views over effects_pending_by_kind.
func (s *backend) PendingEffects(ctx context.Context) (map[string]int64, error) {
	const op = "pending_effects"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	var out map[string]int64
	err := s.retry(ctx, op, "", func() error {
		out = map[string]int64{}
		rows, _ := s.db.Query(ctx, `SELECT kind, count(*) FROM effects WHERE state = 'pending' GROUP BY kind`)
		var k string
		var n int64
		_, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
		return err
	})
	return out, err
}

// QueryEffects implements store.Views: one keyset page in seq order over
// effects_by_seq, effects_by_world or effects_by_kind (migration 18).
func (s *backend) QueryEffects(ctx context.Context, f store.EffectFilter) ([]vocab.EffectItem, error) {
	const op = "query_effects"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	where, args := []string{"seq > $1"}, []any{seqArg(f.AfterSeq)}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.World != "" {
		add("world = $%d", f.World)
	}
	if f.Kind != "" {
		add("kind = $%d", f.Kind)
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		add("state = ANY($%d)", states)
	}
	args = append(args, int64(f.Limit))
	q := `SELECT intent_hash, world, seq, kind, params, origin, policy_context_hash,
			enqueued_at_ns, attempts, claimed_by, claim_expires_ns, retries, state, retry_policy, failures, retry_at_ns, hold_reason, held_at_ns
		FROM effects WHERE ` + strings.Join(where, " AND ") + fmt.Sprintf(` ORDER BY seq LIMIT $%d`, len(args))
	out := []vocab.EffectItem{}
	err := s.retry(ctx, op, f.World, func() error {
		rows, _ := s.db.Query(ctx, q, args...)
		var err error
		out, err = pgx.CollectRows(rows, scanEffect)
		return err
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []vocab.EffectItem{}
	}
	return out, nil
}

// timerTableStates maps the contract's timer states to the table's.
var timerTableStates = map[store.TimerState]string{
	store.TimerScheduled: "due", store.TimerClaimed: "inflight", store.TimerDelivered: "delivered",
}

// QueryTimers implements store.Views: one keyset page in (deliver_at_ns,
// intent_hash) order over timers_by_due or timers_by_world (migration 18).
func (s *backend) QueryTimers(ctx context.Context, f store.TimerFilter) ([]store.TimerItem, error) {
	const op = "query_timers"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	where, args := []string{"true"}, []any{}
	if !f.After.IsZero() {
		args = append(args, clampNS(f.After.DeliverAt), f.After.IntentHash)
		where = append(where, fmt.Sprintf("(deliver_at_ns, intent_hash) > ($%d, $%d)", len(args)-1, len(args)))
	}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.World != "" {
		add("world = $%d", f.World)
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = timerTableStates[st]
		}
		add("state = ANY($%d)", states)
	}
	args = append(args, int64(f.Limit))
	q := `SELECT world, intent_hash, deliver_at_ns, payload, attempts, claimed_by, claim_expires_ns, state
		FROM timers WHERE ` + strings.Join(where, " AND ") + fmt.Sprintf(` ORDER BY deliver_at_ns, intent_hash LIMIT $%d`, len(args))
	out := []store.TimerItem{}
	err := s.retry(ctx, op, f.World, func() error {
		rows, _ := s.db.Query(ctx, q, args...)
		var err error
		out, err = pgx.CollectRows(rows, scanTimer)
		return err
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []store.TimerItem{}
	}
	return out, nil
}
