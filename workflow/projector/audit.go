package projector

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// AuditSource is what Audit reads: every store.Store is one.
type AuditSource interface {
	ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]store.Record, error)
	Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]store.Record, error)
}

// auditPage is how many events one read of Audit returns.
const auditPage = 1000

// Audit returns the events of stream written in the window from <= persistedAt
// < to, in runSeq order.
//
// A window selects by persistedAt because that is the one time the append
// authority vouches for: it is its own clock at the write, while emittedAt
// is whatever the producer's clock said. The order stays runSeq's, though:
// persistedAt need not rise with runSeq (a clock that steps back, two
// transactions that commit in the other order than their clock readings),
// so the window's events are not necessarily a contiguous run of the
// stream, and the first and last events returned are not necessarily the
// earliest and latest written. An empty window (to not after from) selects
// nothing.
func Audit(ctx context.Context, st AuditSource, stream string, from, to time.Time) ([]event.Envelope, error) {
	return audit(ctx, st, stream, from, to, auditPage)
}

func audit(ctx context.Context, st AuditSource, stream string, from, to time.Time, page int) ([]event.Envelope, error) {
	if !to.After(from) {
		return nil, ctx.Err()
	}
	// The store's window read is indexed but cannot be resumed: it returns
	// the first page of the window, and nothing says where a second page
	// would start, since persistedAt does not follow runSeq. A full first
	// page therefore continues with runSeq pages after its last event,
	// keeping those inside the window.
	out, err := st.ReadWindow(ctx, stream, from, to, page)
	if err != nil {
		return nil, fmt.Errorf("projector: audit of %s: %w", stream, err)
	}
	if len(out) < page {
		return out, nil
	}
	after := out[len(out)-1].RunSeq
	for {
		evs, err := st.Read(ctx, stream, after, page)
		if err != nil {
			return nil, fmt.Errorf("projector: audit of %s: %w", stream, err)
		}
		for _, e := range evs {
			if e.RunSeq <= after {
				return nil, fmt.Errorf("%w: %s@%d after %d", ErrOutOfOrder, stream, e.RunSeq, after)
			}
			after = e.RunSeq
			if !e.PersistedAt.Before(from) && e.PersistedAt.Before(to) {
				out = append(out, e)
			}
		}
		if len(evs) < page {
			return slices.Clip(out), nil
		}
	}
}
