package sqlite

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// QueueDepths reads the gauges in one read transaction. The queue counts
// walk their partial indexes; the inbox backlog is each world's last seq
// (a primary-key lookup) minus its cursor.
func (s *Store) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	const op = "queue_depths"
	if err := s.read(ctx, op); err != nil {
		return store.QueueDepths{}, err
	}
	var d store.QueueDepths
	if _, err := s.queryRow(ctx, `SELECT
		(SELECT COUNT(*) FROM effects WHERE state = 'pending'),
		(SELECT COUNT(*) FROM effects WHERE state = 'inflight'),
		(SELECT COUNT(*) FROM timers WHERE state = 'scheduled'),
		(SELECT COUNT(*) FROM timers WHERE state = 'claimed'),
		(SELECT COALESCE(SUM((SELECT COALESCE(MAX(seq), 0) FROM inbox i WHERE i.world = w.id) - w.inbox_cursor), 0) FROM worlds w)`,
		nil, &d.EffectsPending, &d.EffectsInflight, &d.TimersScheduled, &d.TimersClaimed, &d.InboxBacklog); err != nil {
		return store.QueueDepths{}, dbErr(op, "", err)
	}
	return d, nil
}

// checkView checks a view's world and limit (0 lists nothing, as in every
// backend) and that the world exists.
func (s *Store) checkView(ctx context.Context, op, world string, limit int) error {
	if err := s.read(ctx, op); err != nil {
		return err
	}
	if err := store.CheckID(op, "world", world); err != nil {
		return err
	}
	if err := store.CheckBatch(op, "limit", limit); err != nil {
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
