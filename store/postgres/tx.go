package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-run/orrery/store/internal/groupcommit"
)

// The append and delivery committers are store/internal/groupcommit's, one
// lane per WithCommitters, a request going to the lane its stream (appends)
// or world (deliveries) hashes to. Requests that contend for one row
// (appends to one stream) thus meet in one batch, rather than in two of
// which the second waits for the first's row lock; requests for different
// rows commit in parallel when there is more than one lane.
//
// A lane has one batch in flight. Pipelining a second one (sent while the
// first commits, waiting for its row locks inside the database) was
// measured slower where the WAL flush dominates: the batches halve and
// the flushes double. While a batch is smaller than its lane's last one,
// the lane lingers (lingerFor) for the callers the last batch answered.

// newCommitter starts a committer of n lanes whose batches run.
func newCommitter[R groupcommit.Request](n, max int, run func(batch []R)) *groupcommit.Committer[R] {
	return groupcommit.New(groupcommit.Config[R]{Lanes: n, Max: max, Queue: 4 * max, Linger: lingerFor, Run: run})
}

// lingerFor bounds how long a committer waits for a batch to reach the
// size of the one before it.
const lingerFor = 200 * time.Microsecond

const rollbackTimeout = 5 * time.Second

// ---- transactions on one connection ----

// pipeline is an explicit transaction on one pooled connection whose
// statements are sent in batches (one round trip each).
type pipeline struct {
	conn  *pgxpool.Conn
	trips *atomic.Uint64 // the store's count of batches sent (Stats.RoundTrips)
}

// beginTx acquires a connection for one transaction; end releases it,
// rolling back unless the transaction committed.
func (s *backend) beginTx(ctx context.Context) (*pipeline, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeline{conn: conn, trips: &s.stats.roundTrips}, nil
}

func (p *pipeline) end() {
	p.abort()
	p.conn.Release()
}

// commitErr tells, after a COMMIT that returned no error, whether the
// transaction is acknowledged: the connection must be back outside a
// transaction (else errUnreachable), and the commit must not have been cut
// short of its synchronous replication (else errSyncRepCut: it committed
// here, a standby may lack it; see failover.go).
func (p *pipeline) commitErr() error {
	if p.conn.Conn().PgConn().TxStatus() != 'I' {
		return errUnreachable
	}
	if wasCut(p.conn.Conn()) {
		return errSyncRepCut
	}
	return nil
}

// send sends b and returns its results; the caller reads them in order and
// closes them.
func (p *pipeline) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	p.trips.Add(1)
	return p.conn.SendBatch(ctx, b)
}

// abort rolls back whatever transaction the connection is in, so that it
// goes back to the pool clean; if that fails, the connection is destroyed
// instead.
func (p *pipeline) abort() {
	pc := p.conn.Conn().PgConn()
	if pc.IsClosed() || pc.TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if _, err := p.conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = p.conn.Conn().Close(ctx)
	}
}

// batch is a pipelined batch of statements, each with the reader of its
// result (nil: only its error matters).
type batch struct {
	b     pgx.Batch
	reads []func(pgx.BatchResults) error
}

func (t *batch) queue(read func(pgx.BatchResults) error, sql string, args ...any) {
	t.b.Queue(sql, args...)
	t.reads = append(t.reads, read)
}

// deferHintsSQL, right after BEGIN, makes the transaction's notify_topic
// calls record their topics instead of notifying; flushHintsSQL, right
// after COMMIT in the same round trip, sends them in a transaction of
// its own. A hinting transaction thus commits without the cluster-wide
// lock that PostgreSQL holds from a notifying transaction's commit until
// its WAL flush (see 0014_hints_after_commit.sql).
const (
	deferHintsSQL = `SET LOCAL orrery.defer_hints = 'on'`
	flushHintsSQL = `SELECT flush_hints()`
)

// begin queues BEGIN and the deferral of the transaction's hints.
func (t *batch) begin() {
	t.queue(nil, "BEGIN")
	t.queue(nil, deferHintsSQL)
}

// commit queues COMMIT and the sending of the transaction's hints.
func (t *batch) commit() {
	t.queue(nil, "COMMIT")
	t.queue(nil, flushHintsSQL)
}

// send sends t on p (one round trip) and reads every result in order.
func (t *batch) send(ctx context.Context, p *pipeline) error {
	br := p.send(ctx, &t.b)
	err := func() error {
		for _, read := range t.reads {
			if read == nil {
				if _, err := br.Exec(); err != nil {
					return err
				}
				continue
			}
			if err := read(br); err != nil {
				return err
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// scanEach reads the next result's rows into dest, calling fn after each.
func scanEach(br pgx.BatchResults, dest []any, fn func()) error {
	rows, _ := br.Query()
	_, err := pgx.ForEachRow(rows, dest, func() error {
		fn()
		return nil
	})
	return err
}

// oneTrip runs the statements build queues as one transaction in one
// round trip (BEGIN … COMMIT pipelined), again after a transient
// conflict. A reader that returns an error rolls the transaction back.
func (s *backend) oneTrip(ctx context.Context, op, world string, build func(b *batch)) error {
	return s.retry(ctx, op, world, func() error {
		p, err := s.beginTx(ctx)
		if err != nil {
			return err
		}
		defer p.end()
		b := &batch{}
		b.begin()
		build(b)
		b.commit()
		if err := b.send(ctx, p); err != nil {
			return err
		}
		return p.commitErr()
	})
}

// twoTrips runs a transaction that reads under lock in one round trip and
// writes in a second: read queues the reads (after BEGIN); write, called
// once they are in, queues the writes (COMMIT follows) or returns the
// decision's error, which rolls back.
func (s *backend) twoTrips(ctx context.Context, op, world string, read func(b *batch), write func(b *batch) error) error {
	return s.retry(ctx, op, world, func() error {
		p, err := s.beginTx(ctx)
		if err != nil {
			return err
		}
		defer p.end()
		b := &batch{}
		b.begin()
		read(b)
		if err := b.send(ctx, p); err != nil {
			return err
		}
		b = &batch{}
		if err := write(b); err != nil {
			return err
		}
		b.commit()
		if err := b.send(ctx, p); err != nil {
			return err
		}
		return p.commitErr()
	})
}
