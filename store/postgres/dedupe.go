package postgres

import "context"

// SweepDedupe implements store.Dedupe (see sweep_dedupe).
func (s *backend) SweepDedupe(ctx context.Context) (int, error) {
	const op = "sweep_dedupe"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var n int32
	err := s.retry(ctx, op, "", func() error {
		// A withdrawn effect delivered nothing, so its record goes once the
		// retention has passed since the withdrawal.
		return s.db.QueryRow(ctx, `WITH w AS (
				DELETE FROM effects WHERE state = 'withdrawn' AND completed_at_ns <= now_ns($2) - $1 RETURNING 1)
			SELECT sweep_dedupe($1, $2) + (SELECT count(*) FROM w)::integer`, int64(s.cfg.retention), s.off()).Scan(&n)
	})
	return int(n), err
}
