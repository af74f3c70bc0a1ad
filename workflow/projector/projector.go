package projector

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// Projector builds a read model from journal streams.
//
// Name identifies the projector's watermarks: it must be a valid store
// identifier, unique within a Runner, and stable across restarts (a
// durable projector renamed starts again from runSeq 0).
//
// Apply is handed the events of stream one at a time, in runSeq order,
// each at most once per watermark move (see Delivery). It must tolerate
// what any event says: an unknown type, a duplicate, a payload it cannot
// read. Those are no-ops, never errors. An error means the projector could
// not apply the event now (its database is down) and wants it again; the
// runner stops that stream for the projector until its next pass. A panic
// is recovered and treated as an error.
type Projector interface {
	Name() string
	Apply(ctx context.Context, stream string, e event.Envelope) error
}

// InMemory is implemented by projectors whose state lives in the process.
// A Runner keeps the watermarks of those that answer true in memory (see
// RunnerConfig.Memory), so that a new process rebuilds them from the start
// of every stream instead of resuming at a durable watermark past events
// it never saw.
type InMemory interface {
	InMemory() bool
}

// Delivery orders the watermark's move and the apply.
type Delivery uint8

const (
	// ClaimFirst moves the watermark over an event (the CAS is the claim)
	// before applying it. Two runners never apply one event twice. If the
	// apply fails, the runner moves the watermark back so the event is
	// delivered again; if another runner has already moved past it by
	// then, the event is lost for this projector (ErrEventLost). A runner
	// that dies between the claim and the apply loses that event too.
	ClaimFirst Delivery = iota
	// ApplyFirst applies the event, then moves the watermark. Nothing is
	// lost, but a runner that dies between the two, or a second runner that
	// applied the same event before losing the CAS, delivers it again: the
	// projector must make a repeat a no-op (the event has the same stream,
	// runSeq and idempotency key).
	ApplyFirst
)

func (d Delivery) String() string {
	switch d {
	case ClaimFirst:
		return "claim-first"
	case ApplyFirst:
		return "apply-first"
	}
	return fmt.Sprintf("delivery(%d)", uint8(d))
}

var (
	// ErrConfig: NewRunner was given a configuration it cannot run.
	ErrConfig = errors.New("projector: invalid runner configuration")
	// ErrApply matches every *ApplyError: a projector's Apply failed or
	// panicked.
	ErrApply = errors.New("projector: apply failed")
	// ErrEventLost: under ClaimFirst, an apply failed and the claim could
	// not be given back because another runner had moved the watermark
	// past it; the event will not be delivered to the projector again.
	ErrEventLost = errors.New("projector: event lost for the projector")
	// ErrOutOfOrder: the journal answered an event at or below one already
	// read from the stream. It is skipped, and reported, since it means the
	// store broke its own ordering.
	ErrOutOfOrder = errors.New("projector: journal returned events out of runSeq order")
)

// ApplyError is a failed or panicking Apply. It matches ErrApply, and
// ErrEventLost when Lost.
type ApplyError struct {
	Projector string
	Stream    string
	RunSeq    uint64
	Panicked  bool
	// Lost is true when the event will not be delivered to the projector
	// again (ClaimFirst, and the claim could not be given back).
	Lost bool
	Err  error
}

func (e *ApplyError) Error() string {
	what := "failed"
	if e.Panicked {
		what = "panicked"
	}
	msg := fmt.Sprintf("projector %s: apply of %s@%d %s: %v", e.Projector, e.Stream, e.RunSeq, what, e.Err)
	if e.Lost {
		msg += " (event lost: another runner moved past it)"
	}
	return msg
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Is matches ErrApply, and ErrEventLost when the event is lost.
func (e *ApplyError) Is(target error) bool {
	return target == ErrApply || (e.Lost && target == ErrEventLost)
}

// MemWatermarks is a store.Watermarks held in memory, with the store's
// semantics: a watermark never set is 0, and CASWatermark fails with a
// *store.Error matching store.ErrWatermarkConflict unless the watermark is
// at old. The zero value is ready; it is safe for concurrent use.
type MemWatermarks struct {
	mu sync.Mutex
	m  map[markKey]uint64
}

type markKey struct{ projector, stream string }

var _ store.Watermarks = (*MemWatermarks)(nil)

// NewMemWatermarks returns empty watermarks.
func NewMemWatermarks() *MemWatermarks { return &MemWatermarks{} }

// GetWatermark implements store.Watermarks.
func (w *MemWatermarks) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[markKey{projector, stream}], nil
}

// CASWatermark implements store.Watermarks.
func (w *MemWatermarks) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k := markKey{projector, stream}
	if cur := w.m[k]; cur != old {
		return store.Errorf("cas_watermark", store.ErrWatermarkConflict, "",
			"projector %s on %s: expected %d, watermark is %d", projector, stream, old, cur)
	}
	if w.m == nil {
		w.m = map[markKey]uint64{}
	}
	w.m[k] = next
	return nil
}
