package sqlite

import (
	"context"

	"github.com/orrery-run/orrery/store/internal/contract"
)

// GetWatermark reads a projector's watermark on stream (0 if never set).
func (s *backend) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	const op = "get_watermark"
	if err := s.read(ctx, op); err != nil {
		return 0, err
	}
	var v int64
	if _, err := s.queryRow(ctx, `SELECT value FROM watermarks WHERE projector = ? AND stream = ?`, []any{projector, stream}, &v); err != nil {
		return 0, dbErr(op, "", err)
	}
	return uint64(v), nil
}

// CASWatermark sets the watermark to next if it is old (an unset watermark
// is 0; contract.Watermark).
func (s *backend) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	const op = "cas_watermark"
	return s.write(ctx, op, "", func(t *wtx) error {
		var cur int64
		if _, err := t.queryRow(`SELECT value FROM watermarks WHERE projector = ? AND stream = ?`, []any{projector, stream}, &cur); err != nil {
			return err
		}
		if err := contract.Watermark(op, projector, stream, uint64(cur), old); err != nil {
			return err
		}
		_, err := t.exec(`INSERT INTO watermarks (projector, stream, value) VALUES (?, ?, ?)
			ON CONFLICT (projector, stream) DO UPDATE SET value = excluded.value`, projector, stream, int64(next))
		return err
	})
}
