package sqlite

import (
	"context"
	"strings"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// QueueDepths reads the gauges in one read transaction. The queue counts
// walk their partial indexes; the inbox backlog is each world's last seq
// (a primary-key lookup) minus its cursor.
func (s *backend) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	const op = "queue_depths"
	if err := s.read(ctx, op); err != nil {
		return store.QueueDepths{}, err
	}
	var d store.QueueDepths
	if _, err := s.queryRow(ctx, `SELECT
		(SELECT COUNT(*) FROM effects WHERE state = 'pending'),
		(SELECT COUNT(*) FROM effects WHERE state = 'inflight'),
		(SELECT COUNT(*) FROM effects WHERE state = 'held'),
		(SELECT COUNT(*) FROM timers WHERE state = 'scheduled'),
		(SELECT COUNT(*) FROM timers WHERE state = 'claimed'),
		(SELECT COALESCE(SUM((SELECT COALESCE(MAX(seq), 0) FROM inbox i WHERE i.world = w.id) - w.inbox_cursor), 0) FROM worlds w)`,
		nil, &d.EffectsPending, &d.EffectsInflight, &d.EffectsHeld, &d.TimersScheduled, &d.TimersClaimed, &d.InboxBacklog); err != nil {
		return store.QueueDepths{}, dbErr(op, "", err)
	}
	return d, nil
}

// PendingEffects implements store.Views over effects_pending_by_kind.
func (s *backend) PendingEffects(ctx context.Context) (map[string]int64, error) {
	const op = "pending_effects"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT kind, COUNT(*) FROM effects INDEXED BY effects_pending_by_kind WHERE state = 'pending' GROUP BY kind`)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, dbErr(op, "", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, "", err)
	}
	return out, nil
}

// checkView checks that a view's world exists.
func (s *backend) checkView(ctx context.Context, op, world string) error {
	if err := s.read(ctx, op); err != nil {
		return err
	}
	var one int
	found, err := s.queryRow(ctx, `SELECT 1 FROM worlds WHERE id = ?`, []any{world}, &one)
	if err != nil {
		return dbErr(op, world, err)
	}
	if !found {
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	return nil
}

// ListEffects lists up to limit of world's pending, inflight and held effects
// after afterSeq, in queue order (effects_queued_by_world).
func (s *backend) ListEffects(ctx context.Context, world string, afterSeq uint64, limit int) ([]vocab.EffectItem, error) {
	const op = "list_effects"
	if err := s.checkView(ctx, op, world); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+effectItemCols+` FROM effects
		WHERE world = ? AND state IN ('pending', 'inflight', 'held') AND seq > ? ORDER BY seq LIMIT ?`, world, seqBound(afterSeq), limit)
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	defer rows.Close()
	var out []vocab.EffectItem
	for rows.Next() {
		it, err := scanEffectItem(rows)
		if err != nil {
			return nil, dbErr(op, world, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, world, err)
	}
	return out, nil
}

// ListTimers lists up to limit of world's scheduled and claimed timers in
// (deliverAt, intentHash) order (timers_queued_by_world).
func (s *backend) ListTimers(ctx context.Context, world string, limit int) ([]store.TimerItem, error) {
	const op = "list_timers"
	if err := s.checkView(ctx, op, world); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+timerCols+` FROM timers
		WHERE world = ? AND state IN ('scheduled', 'claimed') ORDER BY deliver_at, intent_hash LIMIT ?`, world, limit)
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	defer rows.Close()
	var out []store.TimerItem
	for rows.Next() {
		it, err := scanTimer(rows)
		if err != nil {
			return nil, dbErr(op, world, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, world, err)
	}
	return out, nil
}

// QueryEffects lists a page of effects across worlds in seq order; the
// filters that are set pick the index (effects_by_world, effects_by_kind,
// else the primary key).
func (s *backend) QueryEffects(ctx context.Context, f store.EffectFilter) ([]vocab.EffectItem, error) {
	const op = "query_effects"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	where, args := []string{"seq > ?"}, []any{seqBound(f.AfterSeq)}
	if f.World != "" {
		where, args = append(where, "world = ?"), append(args, f.World)
	}
	if f.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, f.Kind)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	rows, err := s.query(ctx, `SELECT `+effectItemCols+` FROM effects WHERE `+strings.Join(where, " AND ")+
		` ORDER BY seq LIMIT ?`, append(args, f.Limit)...)
	if err != nil {
		return nil, dbErr(op, f.World, err)
	}
	defer rows.Close()
	out := []vocab.EffectItem{}
	for rows.Next() {
		it, err := scanEffectItem(rows)
		if err != nil {
			return nil, dbErr(op, f.World, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, f.World, err)
	}
	return out, nil
}

// QueryTimers lists a page of timers across worlds in (deliver_at,
// intent_hash) order (timers_by_due, or timers_by_world for one world).
func (s *backend) QueryTimers(ctx context.Context, f store.TimerFilter) ([]store.TimerItem, error) {
	const op = "query_timers"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	where, args := []string{"1"}, []any{}
	if !f.After.IsZero() {
		at := boundNS(f.After.DeliverAt)
		where, args = append(where, "(deliver_at > ? OR (deliver_at = ? AND intent_hash > ?))"), append(args, at, at, f.After.IntentHash)
	}
	if f.World != "" {
		where, args = append(where, "world = ?"), append(args, f.World)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	rows, err := s.query(ctx, `SELECT `+timerCols+` FROM timers WHERE `+strings.Join(where, " AND ")+
		` ORDER BY deliver_at, intent_hash LIMIT ?`, append(args, f.Limit)...)
	if err != nil {
		return nil, dbErr(op, f.World, err)
	}
	defer rows.Close()
	out := []store.TimerItem{}
	for rows.Next() {
		it, err := scanTimer(rows)
		if err != nil {
			return nil, dbErr(op, f.World, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, f.World, err)
	}
	return out, nil
}
