package postgres

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// GetWatermark implements store.Watermarks (0 when never set).
func (s *backend) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	const op = "get_watermark"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var m int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT coalesce((SELECT mark FROM watermarks WHERE projector = $1 AND stream = $2), 0)`,
			projector, stream).Scan(&m)
	})
	return uint64(m), err
}

// CASWatermark implements store.Watermarks. A watermark never set is 0.
// The compare is the statement's WHERE (contract.Watermark's, in one round
// trip): no row written means the watermark was not at old.
func (s *backend) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	const op = "cas_watermark"
	if err := s.begin(op); err != nil {
		return err
	}
	o, nx := int64(old), int64(next)
	return s.retry(ctx, op, "", func() error {
		var sql string
		if o == 0 {
			sql = `INSERT INTO watermarks AS w (projector, stream, mark) VALUES ($1, $2, $4)
				ON CONFLICT (projector, stream) DO UPDATE SET mark = EXCLUDED.mark WHERE w.mark = $3`
		} else {
			sql = `UPDATE watermarks SET mark = $4 WHERE projector = $1 AND stream = $2 AND mark = $3`
		}
		tag, err := s.db.Exec(ctx, sql, projector, stream, o, nx)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.Errorf(op, store.ErrWatermarkConflict, "", "%s on %s is not at %d", projector, stream, old)
		}
		return nil
	})
}
