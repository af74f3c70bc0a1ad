package memstore

import (
	"context"

	"github.com/orrery-run/orrery/store/internal/contract"
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
	if err := contract.Watermark(op, projector, streamID, s.st.watermarks[k], old); err != nil {
		return err
	}
	s.st.watermarks[k] = next
	return nil
}
