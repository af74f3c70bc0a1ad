package sqlite

import (
	"context"
	"database/sql"
	"math"
	"time"
)

// Times are int64 Unix nanoseconds, read back in UTC. Every time that is
// written either comes from the store clock or passed the front's time
// check (store/validate.go), whose range lies inside int64 nanoseconds, so
// it is stored exactly.

// nullNS stores the zero time (absent) as NULL.
func nullNS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// boundNS converts a query bound (ReadWindow's from and to), which is never
// stored: a bound outside int64 nanoseconds (the zero time among them) lies
// beyond every stored time, so the end of the range selects the same rows.
func boundNS(t time.Time) int64 {
	switch {
	case t.Before(minNS):
		return math.MinInt64
	case t.After(maxNS):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var (
	minNS = time.Unix(0, math.MinInt64)
	maxNS = time.Unix(0, math.MaxInt64)
)

func fromNS(v int64) time.Time { return time.Unix(0, v).UTC() }

func fromNullNS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromNS(v.Int64)
}

// seqBound converts a seq or runSeq query bound: stored ones are positive
// int64, so a bound past that range selects what MaxInt64 does.
func seqBound(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// sqlLimit maps a non-positive limit to SQLite's "no limit".
func sqlLimit(limit int) int64 {
	if limit <= 0 {
		return -1
	}
	return int64(limit)
}

// read checks that a read may start.
func (s *backend) read(ctx context.Context, op string) error {
	if s.closed.Load() {
		return closedErr(op)
	}
	if err := ctx.Err(); err != nil {
		return ctxErr(op, err)
	}
	return nil
}

// rstmt returns query prepared on the read pool (database/sql prepares it
// on each pooled connection as needed), preparing it once: SQLite's parse
// and plan cost more than a small read itself.
func (s *backend) rstmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.rmu.Lock()
	st := s.rstmts[query]
	s.rmu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := s.rdb.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if prev := s.rstmts[query]; prev != nil {
		st.Close()
		return prev, nil
	}
	s.rstmts[query] = st
	return st, nil
}

// query runs a read on the pool.
func (s *backend) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.rstmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// queryRow scans one row of a read into dest; found is false when there is
// none.
func (s *backend) queryRow(ctx context.Context, query string, args []any, dest ...any) (found bool, err error) {
	st, err := s.rstmt(ctx, query)
	if err != nil {
		return false, err
	}
	err = st.QueryRowContext(ctx, args...).Scan(dest...)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

func (s *backend) closeReadStmts() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for q, st := range s.rstmts {
		st.Close()
		delete(s.rstmts, q)
	}
}

// blob restores an empty (non-nil) byte slice, which the driver reads back
// as nil: queries select a blob column c as "c, c IS NOT NULL".
func blob(b []byte, present bool) []byte {
	if present && b == nil {
		return []byte{}
	}
	return b
}

// nilIfEmpty stores an empty blob as NULL, so that "none" reads back nil.
func nilIfEmpty(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
