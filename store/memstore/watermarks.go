package memstore

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

type watermarkKey struct{ projector, stream string }

// GetWatermark implements store.Watermarks (0 when never set).
func (s *backend) GetWatermark(ctx context.Context, projector, streamID string) (uint64, error) {
	if err := s.begin(ctx, "get_watermark"); err != nil {
		return 0, err
	}
	defer s.end()
	return s.st.watermarks[watermarkKey{projector, streamID}], nil
}

// CASWatermark implements store.Watermarks.
func (s *backend) CASWatermark(ctx context.Context, projector, streamID string, old, next uint64) error {
	const op = "cas_watermark"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	k := watermarkKey{projector, streamID}
	if cur := s.st.watermarks[k]; cur != old {
		return store.Errorf(op, store.ErrWatermarkConflict, "", "%s on %s is at %d, expected %d", projector, streamID, cur, old)
	}
	s.st.watermarks[k] = next
	return nil
}
