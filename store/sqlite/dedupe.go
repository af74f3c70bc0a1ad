package sqlite

import (
	"context"
	"math"
)

// SweepDedupe removes the dedupe records whose completion + retention is at
// or before the store clock, and returns how many:
//
//   - inbox dedupe keys, completed when their item is drained to the
//     journal (a key of an item still waiting in the inbox is pending);
//   - done effects (the hash may then be published again);
//   - delivered timers;
//   - fabric message ids, completed at delivery.
//
// Journal idempotency keys are not dedupe records of this kind: they are
// the append authority's and are never swept.
func (s *Store) SweepDedupe(ctx context.Context) (int, error) {
	const op = "sweep_dedupe"
	var total int
	err := s.write(ctx, op, "", func(t *wtx) error {
		total = 0
		cutoff := t.nowNS - int64(s.cfg.retention)
		if cutoff > t.nowNS { // the retention reaches past the int64 range
			cutoff = math.MinInt64
		}
		for _, q := range []string{
			`DELETE FROM inbox_dedupe WHERE completed_at IS NOT NULL AND completed_at <= ?`,
			`DELETE FROM effects WHERE state = 'done' AND completed_at <= ?`,
			`DELETE FROM timers WHERE state = 'delivered' AND completed_at <= ?`,
			`DELETE FROM fabric_dedupe WHERE completed_at <= ?`,
		} {
			res, err := t.exec(q, cutoff)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			total += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return total, nil
}
