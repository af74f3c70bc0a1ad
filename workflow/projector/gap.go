package projector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/orrery-run/orrery/store"
)

// ErrGap matches every *GapError: a projector's watermark is below its
// stream's compaction floor, so records it was never handed are gone.
var ErrGap = errors.New("projector: records below the stream's compaction floor are gone")

// Gap is a range of a stream's records a projector was never handed and
// can no longer read: compaction removed them (see store.Journal.Floor).
type Gap struct {
	Projector string
	Stream    string
	// From and To bound the unreadable range, both included: the runSeq
	// after the projector's watermark, and the stream's floor. runSeqs may
	// have gaps, so some of them may never have existed; which did is not
	// known any more.
	From, To uint64
	// Skipped: the runner moved the watermark to To (RunnerConfig.
	// SkipCompacted) and fed the projector on from there. Otherwise the
	// stream is stopped for the projector: every pass reports the gap
	// again, and nothing above it is applied, until an operator moves the
	// watermark (store.Watermarks.CASWatermark) or rebuilds the projection.
	Skipped bool
}

// GapError reports a Gap. It matches ErrGap, and store.ErrCompacted
// through the store's *store.CompactedError it wraps.
type GapError struct {
	Gap
	Err error // the store's answer
}

func (e *GapError) Error() string {
	what := "stopped"
	if e.Skipped {
		what = "skipped"
	}
	return fmt.Sprintf("projector %s: stream %s: runSeq %d..%d compacted before it was projected (%s)", e.Projector, e.Stream, e.From, e.To, what)
}

func (e *GapError) Unwrap() error { return e.Err }

// Is matches ErrGap.
func (e *GapError) Is(target error) bool { return target == ErrGap }

// Gaps returns the ranges the runner found unreadable: every (projector,
// stream) stopped below a floor now, and every range skipped since the
// runner was made, sorted by projector, stream and From. It is safe to call
// at any time.
func (r *Runner) Gaps() []Gap {
	r.gapMu.Lock()
	defer r.gapMu.Unlock()
	out := make([]Gap, 0, len(r.stopped)+len(r.skipped))
	for _, g := range r.stopped {
		out = append(out, g)
	}
	out = append(out, r.skipped...)
	slices.SortFunc(out, func(a, b Gap) int {
		return cmp.Or(cmp.Compare(a.Projector, b.Projector), cmp.Compare(a.Stream, b.Stream),
			cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return out
}

// belowFloor handles the bindings of stream s whose watermark the floor of
// ce passed: each stops, reporting its gap, or under SkipCompacted moves
// its watermark to the floor, knowingly. moved reports a watermark moved.
func (r *Runner) belowFloor(ctx context.Context, s string, cur []cursor, ce *store.CompactedError) (moved bool, errs []error) {
	for i := range r.binds {
		c, b := &cur[i], &r.binds[i]
		if !c.active || c.mark >= ce.Floor {
			continue
		}
		k := markKey{b.name, s}
		// The cached watermark may be stale (another runner moved it): a
		// gap is judged on the stored one.
		m, err := b.marks.GetWatermark(ctx, b.name, s)
		if err != nil {
			c.active = false
			delete(r.cache, k)
			errs = append(errs, err)
			continue
		}
		c.mark, r.cache[k] = m, m
		if m >= ce.Floor {
			continue
		}
		g := Gap{Projector: b.name, Stream: s, From: m + 1, To: ce.Floor}
		if !r.cfg.SkipCompacted {
			c.active = false
			delete(r.cache, k) // an operator may move it: read it afresh
			r.gapMu.Lock()
			prev, known := r.stopped[k]
			r.stopped[k] = g
			r.gapMu.Unlock()
			if !known || prev != g { // logged once, reported by every pass
				r.log.Error("projector: records below the watermark were compacted; the stream is stopped for the projector",
					"projector", g.Projector, "stream", s, "from", g.From, "to", g.To)
				r.reportGap(g)
			}
			errs = append(errs, &GapError{Gap: g, Err: ce})
			continue
		}
		if err := b.marks.CASWatermark(ctx, b.name, s, c.mark, ce.Floor); err != nil {
			c.active = false
			delete(r.cache, k)
			if !errors.Is(err, store.ErrWatermarkConflict) { // else another runner moved it
				errs = append(errs, err)
			}
			continue
		}
		g.Skipped = true
		c.mark = ce.Floor
		r.cache[k] = ce.Floor
		moved = true
		r.log.Warn("projector: skipped records compacted below the watermark",
			"projector", g.Projector, "stream", s, "from", g.From, "to", g.To)
		r.gapMu.Lock()
		delete(r.stopped, k)
		r.skipped = append(r.skipped, g)
		r.gapMu.Unlock()
		r.reportGap(g)
	}
	return moved, errs
}

// readable clears the stopped gap of every active binding of s: a read
// from its watermark succeeded, so nothing below it is gone any more (an
// operator moved it).
func (r *Runner) readable(s string, cur []cursor) {
	r.gapMu.Lock()
	defer r.gapMu.Unlock()
	if len(r.stopped) == 0 {
		return
	}
	for i := range r.binds {
		if cur[i].active {
			delete(r.stopped, markKey{r.binds[i].name, s})
		}
	}
}

func (r *Runner) reportGap(g Gap) {
	if r.cfg.OnGap != nil {
		r.cfg.OnGap(g)
	}
}
