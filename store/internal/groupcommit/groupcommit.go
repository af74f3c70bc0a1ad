// Package groupcommit is the group commit both SQL backends share: callers
// queue requests; a goroutine takes whatever is queued (up to a maximum) and
// hands it to the backend as one batch, which commits once for all of them
// and answers each caller. Under load a batch grows while the previous one
// commits; alone, a request commits at once.
//
// What is shared (this package):
//
//   - the queues: n lanes, each with its own goroutine and a bounded
//     queue; a request goes to the lane its key hashes to (FNV-1a), so
//     requests for one key meet in one batch and different keys may commit
//     in parallel when there is more than one lane;
//   - cutting a batch: the first request, then whatever else is queued up to
//     Max, after letting it fill (Spins, Linger: see Config);
//   - abandonment: a caller may give up (its context ends, the committer
//     closes) only while its request is still queued. Once the lane has
//     taken it the caller waits for its answer, so a request that returns a
//     context error was never started and one that started always reports
//     its real outcome. A request whose context ended before the batch was
//     cut is refused (Request.Refuse) instead of run;
//   - closing: Close stops the lanes once the batch in progress is
//     answered; what is still queued, or queued later, is refused with
//     ErrClosed.
//
// What each backend adds (its Config.Run and its request type):
//
//   - store/sqlite: one lane (its only write connection), Spins to let the
//     writers just answered queue again; a batch is one BEGIN IMMEDIATE …
//     COMMIT with a SAVEPOINT per request, the rest of the batch run again
//     after a failure of the database, the cache of journal heads and its
//     invalidation by PRAGMA data_version;
//   - store/postgres: lanes keyed by stream (appends) or world (deliveries),
//     Linger to reach the size of the lane's last batch, and the planning of
//     a batch into pipelined transactions (see append.go, deliver.go).
package groupcommit

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/store"
)

// ErrClosed refuses the requests a closed committer will not run.
var ErrClosed = store.ErrClosed

// Request states: queued until the lane takes it (taken) or its caller gives
// up (abandoned), whichever comes first.
const (
	queued int32 = iota
	taken
	abandoned
)

// Ticket is the committer's state of one request; a request type embeds it.
// Its zero value is a request not yet queued.
type Ticket struct {
	state atomic.Int32
}

func (t *Ticket) ticket() *Ticket { return t }

// Request is what a committer batches. Answered is closed once the request
// has its answer (set by Config.Run, or by Refuse).
type Request interface {
	ticket() *Ticket
	// Context is the caller's context: a request whose context ended
	// before its batch was cut is refused with the context's error.
	Context() context.Context
	Answered() <-chan struct{}
	// Refuse answers a request that will never run: err is its context's
	// error or ErrClosed.
	Refuse(err error)
}

// Config describes a committer.
type Config[R Request] struct {
	Lanes int // goroutines, each with its own queue (at least 1)
	Max   int // the most requests a batch takes (at least 1)
	Queue int // each lane's queue capacity

	// Spins bounds how often a lane yields (runtime.Gosched) after taking a
	// batch's first request, while the queue keeps growing: writers that
	// are already runnable (typically the callers the last batch just
	// answered) then queue their next request before the batch is cut.
	// Yielding costs nothing when nobody else is runnable.
	Spins int
	// Linger bounds how long a lane waits, while the batch is smaller than
	// its last one, for the rest of it: callers answered by the previous
	// batch come back a moment later, and a batch cut before they do
	// commits half a group, the two halves then alternating for good.
	Linger time.Duration

	// Run runs one batch (on its lane's goroutine, so one lane's batches
	// never overlap) and answers every request of it.
	Run func(batch []R)
}

// Committer is a group committer; see the package documentation.
type Committer[R Request] struct {
	cfg   Config[R]
	lanes []*lane[R]
	quit  chan struct{} // closed by Close: stop taking requests
	done  chan struct{} // closed once every lane's goroutine has returned
	wg    sync.WaitGroup
	once  sync.Once
}

type lane[R Request] struct {
	in   chan R
	last int // the size of the lane's last batch (its goroutine's own)
}

// New starts a committer's lanes; Close stops them.
func New[R Request](cfg Config[R]) *Committer[R] {
	cfg.Lanes, cfg.Max = max(cfg.Lanes, 1), max(cfg.Max, 1)
	c := &Committer[R]{
		cfg:   cfg,
		lanes: make([]*lane[R], cfg.Lanes),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	c.wg.Add(cfg.Lanes)
	for i := range c.lanes {
		l := &lane[R]{in: make(chan R, cfg.Queue)}
		c.lanes[i] = l
		go c.loop(l)
	}
	go func() {
		c.wg.Wait()
		close(c.done)
	}()
	return c
}

// Queue returns lane i's queue, for tests and metrics (its length is what
// waits there).
func (c *Committer[R]) Queue(i int) <-chan R { return c.lanes[i].in }

// Do queues r on key's lane and waits for its answer. It returns nil once r
// is answered (by Run, or refused: r holds its outcome), or, if the caller
// gave up while r was still queued (so r never runs), its context's error
// or ErrClosed.
func (c *Committer[R]) Do(key string, r R) error {
	ctx, t := r.Context(), r.ticket()
	select {
	case c.lane(key).in <- r:
	case <-c.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.Answered():
		return nil
	case <-ctx.Done():
		if t.state.CompareAndSwap(queued, abandoned) {
			return ctx.Err()
		}
	case <-c.done:
		if t.state.CompareAndSwap(queued, abandoned) {
			return ErrClosed
		}
	}
	<-r.Answered()
	return nil
}

// Close stops taking requests, waits for the batches in progress to be
// answered and refuses what is still queued with ErrClosed. It is
// idempotent.
func (c *Committer[R]) Close() {
	c.once.Do(func() {
		close(c.quit)
		<-c.done
		for _, l := range c.lanes {
			refuseQueued(l)
		}
	})
}

// lane picks key's lane (FNV-1a).
func (c *Committer[R]) lane(key string) *lane[R] {
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

func (c *Committer[R]) loop(l *lane[R]) {
	defer c.wg.Done()
	batch := make([]R, 0, c.cfg.Max)
	var linger *time.Timer
	if c.cfg.Linger > 0 {
		linger = time.NewTimer(time.Hour)
		linger.Stop()
	}
	for {
		// Close wins over queued work: what is still queued once it is
		// called is refused (only the batch in progress runs).
		select {
		case <-c.quit:
			refuseQueued(l)
			return
		default:
		}
		select {
		case r := <-l.in:
			batch = append(batch[:0], r)
		case <-c.quit:
			refuseQueued(l)
			return
		}
		c.fill(l, &batch, linger)
		l.last = len(batch)
		live := batch[:0]
		for _, r := range batch {
			t := r.ticket()
			if err := r.Context().Err(); err != nil {
				if t.state.CompareAndSwap(queued, taken) {
					r.Refuse(err)
				}
				continue
			}
			if t.state.CompareAndSwap(queued, taken) {
				live = append(live, r)
			}
		}
		if len(live) > 0 {
			c.cfg.Run(live)
		}
		clear(batch[:cap(batch)])
	}
}

// fill takes what is queued into batch, up to Max, after the yields and the
// lingering Config allows.
func (c *Committer[R]) fill(l *lane[R], batch *[]R, linger *time.Timer) {
	for spins := 0; spins < c.cfg.Spins; spins++ {
		n := len(l.in)
		runtime.Gosched()
		if len(l.in) == n {
			break
		}
	}
	want := min(l.last, c.cfg.Max)
	lingering := false
	defer func() {
		if lingering && !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
	}()
	for len(*batch) < c.cfg.Max {
		select {
		case r := <-l.in:
			*batch = append(*batch, r)
			continue
		default:
		}
		if linger == nil || len(*batch) >= want {
			return
		}
		if !lingering {
			lingering = true
			linger.Reset(c.cfg.Linger)
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

// refuseQueued refuses what is queued on l that its caller has not
// abandoned.
func refuseQueued[R Request](l *lane[R]) {
	for {
		select {
		case r := <-l.in:
			if r.ticket().state.CompareAndSwap(queued, taken) {
				r.Refuse(ErrClosed)
			}
		default:
			return
		}
	}
}
