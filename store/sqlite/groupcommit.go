package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/store/internal/groupcommit"
)

// Group commit.
//
// Every mutation is a request: a function of a write transaction (wtx) that
// either succeeds, fails with a typed store outcome (ErrHeadMismatch,
// ErrFenced, …), or fails because the database did. Callers queue requests
// on the group committer (store/internal/groupcommit, one lane); its
// goroutine, the only user of the write connection, takes the first
// request, everything else already queued (up to maxBatch), and runs them
// in one BEGIN IMMEDIATE … COMMIT:
//
//	BEGIN IMMEDIATE
//	  SAVEPOINT g; request 1; RELEASE g            (success)
//	  SAVEPOINT g; request 2; ROLLBACK TO g; RELEASE g   (typed failure: only its own writes undone)
//	  …
//	COMMIT                                        (one fsync under synchronous=FULL)
//
// and only then fires the Watch hints of the requests that succeeded and
// answers each caller. While one
// group is committing, the next one queues up, so the group size follows the
// load: one request alone commits at once, N concurrent writers share one
// fsync.
//
// A database failure inside a request (I/O error, full disk, busy) may have
// rolled back the whole transaction behind SQLite's back, so it is never
// treated like a typed failure: the committer rolls the transaction back,
// answers that request with the error, and runs the rest of the group again
// in a fresh transaction. Requests are pure functions of the database state,
// so running one again is the same as running it once.

// A caller may abandon its request (context done, store closed) only while
// it is still queued; once the committer has taken it, the caller waits for
// the answer, so a write that returns a context error was never started and
// one that started always reports its real outcome (groupcommit).
type request struct {
	groupcommit.Ticket
	s      *backend
	ctx    context.Context
	op     string
	world  string
	fn     func(t *wtx) error
	done   chan struct{}
	err    error // the answer, set before done is closed
	topics []string
}

func (r *request) Context() context.Context  { return r.ctx }
func (r *request) Answered() <-chan struct{} { return r.done }

// Refuse answers a request the committer will not run.
func (r *request) Refuse(err error) {
	if errors.Is(err, groupcommit.ErrClosed) {
		err = closedErr(r.op)
	} else {
		err = ctxErr(r.op, err)
	}
	r.s.answer(r, err)
}

// write runs fn as one request of a group commit and returns its outcome.
func (s *backend) write(ctx context.Context, op, world string, fn func(t *wtx) error) error {
	if s.closed.Load() {
		return closedErr(op)
	}
	if err := ctx.Err(); err != nil {
		return ctxErr(op, err)
	}
	r := &request{s: s, ctx: ctx, op: op, world: world, fn: fn, done: make(chan struct{})}
	if err := s.commits.Do("", r); err != nil {
		if errors.Is(err, groupcommit.ErrClosed) {
			return closedErr(op)
		}
		return ctxErr(op, err)
	}
	return r.err
}

// wtx is one request's view of the group's write transaction.
type wtx struct {
	c      *committer
	now    time.Time // the store clock, read once per request
	nowNS  int64
	topics []string
	heads  map[string]int64 // stream heads this request moved
}

// head returns the stream's journal head as this request sees it: its own
// moves, then the group's, then the committer's cache of committed heads,
// then the database.
func (t *wtx) head(stream string) (int64, error) {
	if h, ok := t.heads[stream]; ok {
		return h, nil
	}
	if h, ok := t.c.staged[stream]; ok {
		return h, nil
	}
	if h, ok := t.c.heads[stream]; ok {
		return h, nil
	}
	var h int64
	if _, err := t.queryRow(headQuery, []any{stream}, &h); err != nil {
		return 0, err
	}
	return h, nil
}

// setHead records that this request moved the stream's head to h.
func (t *wtx) setHead(stream string, h int64) {
	if t.heads == nil {
		t.heads = make(map[string]int64)
	}
	t.heads[stream] = h
}

func (t *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := t.c.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(t.c.ctx, args...)
}

func (t *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := t.c.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(t.c.ctx, args...)
}

// row runs a query expected to return one row (sql.ErrNoRows at Scan if
// none).
func (t *wtx) row(query string, args ...any) (*sql.Row, error) {
	st, err := t.c.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(t.c.ctx, args...), nil
}

// queryRow scans one row into dest; found is false when there is none.
func (t *wtx) queryRow(query string, args []any, dest ...any) (found bool, err error) {
	st, err := t.c.stmt(query)
	if err != nil {
		return false, err
	}
	err = st.QueryRowContext(t.c.ctx, args...).Scan(dest...)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

// notify queues a Watch hint, fired only if the request commits.
func (t *wtx) notify(topic string) {
	for _, x := range t.topics {
		if x == topic {
			return
		}
	}
	t.topics = append(t.topics, topic)
}

type committer struct {
	s     *backend
	ctx   context.Context // never cancelled: a caller's context must not abort a shared transaction
	stmts map[string]*sql.Stmt

	// The journal head of a stream is derived data (the highest runSeq in
	// events, or the streams row a seed, fork or compaction wrote), so an
	// append writes nothing but its events. The committer, the only writer,
	// caches the heads it knows: heads as committed, staged as moved by the
	// requests of the group in progress (dropped if it rolls back).
	heads  map[string]int64
	staged map[string]int64
	// dataVersion is SQLite's PRAGMA data_version as of the last group. It
	// changes only when another connection commits: another process (or
	// another Store) writing the same file. The cache is then dropped, so
	// the store stays correct, if slower, with other writers.
	dataVersion int64
	seenVersion bool
}

// maxCachedHeads bounds the head cache; past it the cache starts over.
const maxCachedHeads = 1 << 16

func newCommitter(s *backend) *committer {
	return &committer{
		s: s, ctx: context.Background(), stmts: make(map[string]*sql.Stmt),
		heads: make(map[string]int64), staged: make(map[string]int64),
	}
}

// stmt returns query prepared on the write connection, preparing it once.
func (c *committer) stmt(query string) (*sql.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.s.conn.PrepareContext(c.ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

// closeStmts closes the write connection's prepared statements, once the
// committer has stopped.
func (c *committer) closeStmts() {
	for _, st := range c.stmts {
		st.Close()
	}
	clear(c.stmts)
}

// answer sets r's outcome and wakes its caller.
func (s *backend) answer(r *request, err error) {
	s.stats.requests.Add(1)
	r.err = err
	close(r.done)
}

// maxSpins bounds how often the committer yields to let a group fill
// (groupcommit.Config.Spins).
const maxSpins = 8

// maxPoison bounds how often one group is retried after database failures
// before the rest of it fails too (a full disk would fail every request).
const maxPoison = 3

// commitGroup runs one group (the groupcommit batch, every request taken)
// in one transaction and answers each request.
func (c *committer) commitGroup(live []*request) {
	results := make([]error, len(live))
	for poisonings := 0; ; poisonings++ {
		if _, err := c.s.conn.ExecContext(c.ctx, "BEGIN IMMEDIATE"); err != nil {
			for _, r := range live {
				c.s.answer(r, dbErr(r.op, r.world, err))
			}
			return
		}
		if err := c.checkDataVersion(); err != nil {
			c.s.conn.ExecContext(c.ctx, "ROLLBACK")
			for _, r := range live {
				c.s.answer(r, dbErr(r.op, r.world, err))
			}
			return
		}
		bad, badErr := -1, error(nil)
		for i, r := range live {
			err, poisoned := c.runOne(r)
			if poisoned {
				bad, badErr = i, err
				break
			}
			results[i] = err
		}
		if bad >= 0 {
			clear(c.staged)
			c.s.conn.ExecContext(c.ctx, "ROLLBACK")
			c.s.answer(live[bad], dbErr(live[bad].op, live[bad].world, badErr))
			live = append(live[:bad], live[bad+1:]...)
			results = results[:len(live)]
			if len(live) == 0 {
				return
			}
			if poisonings+1 >= maxPoison {
				for _, r := range live {
					c.s.answer(r, dbErr(r.op, r.world, badErr))
				}
				return
			}
			continue
		}
		if _, err := c.s.conn.ExecContext(c.ctx, "COMMIT"); err != nil {
			clear(c.staged)
			c.s.conn.ExecContext(c.ctx, "ROLLBACK")
			for _, r := range live {
				c.s.answer(r, dbErr(r.op, r.world, fmt.Errorf("commit: %w", err)))
			}
			return
		}
		if len(c.heads)+len(c.staged) > maxCachedHeads {
			clear(c.heads)
		}
		for k, v := range c.staged {
			c.heads[k] = v
		}
		clear(c.staged)
		c.s.stats.transactions.Add(1)
		for n := uint64(len(live)); ; {
			m := c.s.stats.maxGroup.Load()
			if n <= m || c.s.stats.maxGroup.CompareAndSwap(m, n) {
				break
			}
		}
		// Hints go out before the answers, so a caller that returns from a
		// write finds its hint already sent.
		var topics []string
		for i, r := range live {
			if results[i] == nil {
				topics = append(topics, r.topics...)
			}
		}
		c.s.hub.Notify(topics...)
		for i, r := range live {
			c.s.answer(r, results[i])
		}
		c.s.pokeCheckpointer()
		return
	}
}

// checkDataVersion drops the head cache if another connection committed
// since the last group.
func (c *committer) checkDataVersion() error {
	st, err := c.stmt("PRAGMA data_version")
	if err != nil {
		return err
	}
	var v int64
	if err := st.QueryRowContext(c.ctx).Scan(&v); err != nil {
		return err
	}
	if c.seenVersion && v != c.dataVersion {
		clear(c.heads)
		c.s.stats.cacheResets.Add(1)
	}
	c.dataVersion, c.seenVersion = v, true
	return nil
}

// runOne runs r inside its savepoint. poisoned reports a failure of the
// database (or a panic), after which the transaction must be rolled back;
// otherwise err is r's own outcome and the transaction is intact.
func (c *committer) runOne(r *request) (err error, poisoned bool) {
	if _, err := c.exec("SAVEPOINT g"); err != nil {
		return err, true
	}
	now := c.s.cfg.clock().Round(0)
	t := &wtx{c: c, now: now, nowNS: now.UnixNano()}
	err = c.call(r, t)
	if err == nil {
		if _, err := c.exec("RELEASE g"); err != nil {
			return err, true
		}
		r.topics = t.topics
		for k, v := range t.heads {
			c.staged[k] = v
		}
		return nil, false
	}
	if !isOutcome(err) {
		return err, true
	}
	if _, rerr := c.exec("ROLLBACK TO g"); rerr != nil {
		return rerr, true
	}
	if _, rerr := c.exec("RELEASE g"); rerr != nil {
		return rerr, true
	}
	r.topics = nil
	return err, false
}

// call runs the request's function, turning a panic into a failure so that
// a bug in one request never takes the committer (and every caller) down.
func (c *committer) call(r *request, t *wtx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in %s: %v", r.op, p)
		}
	}()
	return r.fn(t)
}

func (c *committer) exec(query string) (sql.Result, error) {
	st, err := c.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(c.ctx)
}
