package postgres

import (
	"context"
	"math"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Times travel as int64 Unix nanoseconds (valid from 1678 to 2262), the
// zero time as math.MinInt64, so that it round-trips and sorts first.

func toNS(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

func fromNS(ns int64) time.Time {
	if ns == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// clampNS converts a bound of a time range, clamping it to what the
// encoding holds.
func clampNS(t time.Time) int64 {
	switch {
	case t.IsZero():
		return math.MinInt64
	case t.Before(minTime):
		return math.MinInt64 + 1
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// seqArg passes a read's afterSeq: no seq passes math.MaxInt64, so a
// larger one reads nothing (as on every backend) instead of overflowing.
func seqArg(after uint64) int64 { return int64(min(after, math.MaxInt64)) }

// limitArg turns a limit (<= 0: none) into SQL's LIMIT argument.
func limitArg(limit int) *int64 {
	if limit <= 0 {
		return nil
	}
	n := int64(limit)
	return &n
}

// worldExists fails with ErrWorldNotFound unless world exists.
func (s *backend) worldExists(ctx context.Context, op, world string) error {
	var ok bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worlds WHERE world = $1)`, world).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	return nil
}
