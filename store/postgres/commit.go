package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-run/orrery/store"
)

// request is what a committer batches: a caller's context, and a channel
// closed when its answer is ready.
type request interface {
	context() context.Context
	finish(err error) // sets the error (if the answer has none) and signals
}

// liveRequests answers the requests whose context already ended (they are
// never sent) and returns the others, in order.
func liveRequests[R request](batch []R) []R {
	live := make([]R, 0, len(batch))
	for _, r := range batch {
		if err := r.context().Err(); err != nil {
			r.finish(err)
			continue
		}
		live = append(live, r)
	}
	return live
}

// committer is group commit: callers queue requests; a goroutine takes
// whatever is queued (up to max) and hands it to run as one batch, which
// commits once for all of them. Under load a batch grows while the
// previous one commits; alone, a request commits at once.
//
// There are n lanes, each with its own goroutine, and a request goes to
// the lane its key hashes to. Requests that contend for one row (appends
// to one stream) thus meet in one batch, rather than in two of which the
// second waits for the first's row lock; requests for different rows
// commit in parallel when there is more than one lane.
//
// A lane has one batch in flight. Pipelining a second one (sent while the
// first commits, waiting for its row locks inside the database) was
// measured slower where the WAL flush dominates: the batches halve and
// the flushes double.
type committer[R request] struct {
	lanes []*lane[R]
	quit  chan struct{} // closed by close: stop taking requests
	done  chan struct{} // closed when every goroutine has returned
	max   int
	run   func(batch []R)
	wg    sync.WaitGroup
}

type lane[R request] struct {
	in   chan R
	last int // the size of the lane's last batch (its goroutine's own)
}

func newCommitter[R request](n, max int, run func(batch []R)) *committer[R] {
	c := &committer[R]{
		lanes: make([]*lane[R], n),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
		max:   max,
		run:   run,
	}
	c.wg.Add(n)
	for i := range c.lanes {
		l := &lane[R]{in: make(chan R, 4*max)}
		c.lanes[i] = l
		go c.loop(l)
	}
	go func() {
		c.wg.Wait()
		close(c.done)
	}()
	return c
}

func (c *committer[R]) loop(l *lane[R]) {
	defer c.wg.Done()
	batch := make([]R, 0, c.max)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-c.quit:
			c.drainClosed(l)
			return
		case r := <-l.in:
			batch = append(batch[:0], r)
		}
		c.fill(l, &batch, linger)
		l.last = len(batch)
		c.run(batch)
		clear(batch)
	}
}

// lingerFor bounds how long a committer waits for a batch to reach the
// size of the one before it.
const lingerFor = 200 * time.Microsecond

// fill takes what is queued into batch. Callers answered by the previous
// batch come back a moment later (they return, build their next request,
// queue it); a batch cut before they do commits half a group, and the two
// halves then alternate for good. So while the batch is smaller than the
// lane's last one, fill lingers a little for the rest.
func (c *committer[R]) fill(l *lane[R], batch *[]R, linger *time.Timer) {
	want := min(l.last, c.max)
	lingering := false
	defer func() {
		if lingering && !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
	}()
	for len(*batch) < c.max {
		select {
		case r := <-l.in:
			*batch = append(*batch, r)
			continue
		default:
		}
		if len(*batch) >= want {
			return
		}
		if !lingering {
			lingering = true
			linger.Reset(lingerFor)
		}
		select {
		case r := <-l.in:
			*batch = append(*batch, r)
		case <-linger.C:
			lingering = false
			return
		case <-c.quit:
			return
		}
	}
}

// drainClosed fails what is still queued on l once the store closes.
func (c *committer[R]) drainClosed(l *lane[R]) {
	for {
		select {
		case r := <-l.in:
			r.finish(errClosed)
		default:
			return
		}
	}
}

// errClosed answers requests the store closed on; callers map it to a
// *store.Error with their op.
var errClosed = store.ErrClosed

const rollbackTimeout = 5 * time.Second

// lane picks key's lane (FNV-1a).
func (c *committer[R]) lane(key string) *lane[R] {
	if len(c.lanes) == 1 {
		return c.lanes[0]
	}
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return c.lanes[h%uint32(len(c.lanes))]
}

// do queues r on key's lane and waits for its answer. A caller whose
// context ends first gets the context's error; its request may still
// commit (as with any database call whose answer is lost), which an
// idempotent retry absorbs.
func (c *committer[R]) do(key string, r R, wait <-chan struct{}) error {
	ctx := r.context()
	select {
	case c.lane(key).in <- r:
	case <-c.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		// Every goroutine has returned; r was answered or never will be.
		select {
		case <-wait:
			return nil
		default:
			return errClosed
		}
	}
}

func (c *committer[R]) close() {
	close(c.quit)
	<-c.done
	for _, l := range c.lanes {
		c.drainClosed(l)
	}
}

// ---- transactions on one connection ----

// pipeline is an explicit transaction on one pooled connection whose
// statements are sent in batches (one round trip each).
type pipeline struct {
	conn *pgxpool.Conn
}

// beginTx acquires a connection for one transaction; end releases it,
// rolling back unless the transaction committed.
func (s *Store) beginTx(ctx context.Context) (*pipeline, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeline{conn: conn}, nil
}

func (p *pipeline) end() {
	p.abort()
	p.conn.Release()
}

// committed reports whether the connection is back outside a transaction
// after a COMMIT that returned no error.
func (p *pipeline) committed() bool { return p.conn.Conn().PgConn().TxStatus() == 'I' }

// send sends b and returns its results; the caller reads them in order and
// closes them.
func (p *pipeline) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
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
func (s *Store) oneTrip(ctx context.Context, op, world string, build func(b *batch)) error {
	return s.retry(ctx, op, world, func() error {
		p, err := s.beginTx(ctx)
		if err != nil {
			return err
		}
		defer p.end()
		b := &batch{}
		b.queue(nil, "BEGIN")
		build(b)
		b.queue(nil, "COMMIT")
		if err := b.send(ctx, p); err != nil {
			return err
		}
		if !p.committed() {
			return errUnreachable
		}
		return nil
	})
}

// twoTrips runs a transaction that reads under lock in one round trip and
// writes in a second: read queues the reads (after BEGIN); write, called
// once they are in, queues the writes (COMMIT follows) or returns the
// decision's error, which rolls back.
func (s *Store) twoTrips(ctx context.Context, op, world string, read func(b *batch), write func(b *batch) error) error {
	return s.retry(ctx, op, world, func() error {
		p, err := s.beginTx(ctx)
		if err != nil {
			return err
		}
		defer p.end()
		b := &batch{}
		b.queue(nil, "BEGIN")
		read(b)
		if err := b.send(ctx, p); err != nil {
			return err
		}
		b = &batch{}
		if err := write(b); err != nil {
			return err
		}
		b.queue(nil, "COMMIT")
		if err := b.send(ctx, p); err != nil {
			return err
		}
		if !p.committed() {
			return errUnreachable
		}
		return nil
	})
}
