package workflow

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// Queue declares a named queue of runs, as DBOS's queues: a run started on
// it (OnQueue) is recorded RunQueued and waits until a worker admits it,
// and admission is one store transaction that counts the queue's limits
// across the cluster, so no two workers can both take the last slot. A
// zero limit is no limit.
//
// An admitted run holds its slot until it ends: the commit that records
// its end (or a cancellation, or an operator's archive) frees the slot in
// the same transaction. A run whose worker dies keeps its slot while
// another worker takes it over, so a takeover never exceeds the limit.
type Queue struct {
	Name string
	// Concurrency bounds the queue's running runs across the cluster
	// (each partition's, when Partitioned).
	Concurrency int
	// WorkerConcurrency bounds the queue's runs one worker admitted that
	// are still running.
	WorkerConcurrency int
	// Rate bounds the admissions per period, by the store's clock (each
	// partition's, when Partitioned).
	Rate Rate
	// Partitioned gives each partition key (WithPartition) limits of its
	// own.
	Partitioned bool
}

// Rate is at most Limit admissions per Period.
type Rate struct {
	Limit  int
	Period time.Duration
}

func (q Queue) spec() store.QueueSpec {
	return store.QueueSpec{Name: q.Name, Concurrency: q.Concurrency, WorkerConcurrency: q.WorkerConcurrency,
		RateLimit: q.Rate.Limit, RatePeriod: q.Rate.Period, Partitioned: q.Partitioned}
}

// QueueFromSpec is the Queue a store's declaration describes.
func QueueFromSpec(s store.QueueSpec) Queue {
	return Queue{Name: s.Name, Concurrency: s.Concurrency, WorkerConcurrency: s.WorkerConcurrency,
		Rate: Rate{Limit: s.RateLimit, Period: s.RatePeriod}, Partitioned: s.Partitioned}
}

// AddQueues declares queues on the definitions, before any worker or
// client uses them: workers declare them in the store when they start, and
// a client declares one when it first starts a run on it. ErrInvalid for a
// queue declared twice or with an invalid limit.
func (w *Workflows) AddQueues(qs ...Queue) error {
	for _, q := range qs {
		if err := store.CheckID("register", "queue", q.Name); err != nil {
			return errorf("register", ErrInvalid, "", err)
		}
		if q.Concurrency < 0 || q.WorkerConcurrency < 0 || q.Rate.Limit < 0 || (q.Rate.Limit > 0) != (q.Rate.Period > 0) {
			return errorf("register", ErrInvalid, "", detail("queue "+q.Name+": limits must not be negative, and a rate needs both a limit and a period"))
		}
		if slices.ContainsFunc(w.queues, func(x Queue) bool { return x.Name == q.Name }) {
			return errorf("register", ErrInvalid, "", detail("queue "+q.Name+" declared twice"))
		}
		w.queues = append(w.queues, q)
	}
	slices.SortFunc(w.queues, func(a, b Queue) int { return compareStrings(a.Name, b.Name) })
	return nil
}

// Queues lists the declared queues, by name.
func (w *Workflows) Queues() []Queue {
	if w == nil {
		return nil
	}
	return slices.Clone(w.queues)
}

func (w *Workflows) queue(name string) (Queue, bool) {
	if w == nil {
		return Queue{}, false
	}
	i := slices.IndexFunc(w.queues, func(q Queue) bool { return q.Name == name })
	if i < 0 {
		return Queue{}, false
	}
	return w.queues[i], true
}

// StartOption adjusts a start: its version (WithVersion, by name only)
// and its queue.
type StartOption func(*startOptions)

type startOptions struct {
	version   uint64
	queue     string
	priority  int
	partition string
	// tick: the start is a schedule's tick, whose run id is in the
	// schedules' namespace (store.ScheduleRunPrefix).
	tick bool
	// timeout: WithRunTimeout.
	timeout time.Duration
	// attrs: WithAttributes.
	attrs map[string]string
}

// WithRunTimeout ends the run RunFailed ("run timed out") if it has not
// ended d after it was started: judged by a durable timer on the store's
// clock, due d after the start item's enqueue time, so neither a crash nor
// a worker whose clock is off moves it. The run's function is not asked
// (as a cancel would ask it): it is stopped, its children whose policy is
// ParentCloseCancel are asked to cancel, and its unclaimed effects are
// withdrawn with the end.
func WithRunTimeout(d time.Duration) StartOption { return func(o *startOptions) { o.timeout = d } }

// OnQueue starts the run on queue name: it waits, recorded RunQueued,
// until a worker admits it within the queue's limits.
func OnQueue(name string) StartOption { return func(o *startOptions) { o.queue = name } }

// WithPriority orders the run in its queue: lower first, FIFO within a
// priority (default 0).
func WithPriority(p int) StartOption { return func(o *startOptions) { o.priority = p } }

// WithPartition puts the run in partition key of a partitioned queue,
// whose limits bind each key apart.
func WithPartition(key string) StartOption { return func(o *startOptions) { o.partition = key } }

func resolveStart(opts []StartOption) (startOptions, error) {
	var o startOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.queue == "" && (o.priority != 0 || o.partition != "") {
		return o, errorf("start", ErrInvalid, "", detail("a priority or partition needs a queue (OnQueue)"))
	}
	if o.queue != "" {
		if err := store.CheckID("start", "queue", o.queue); err != nil {
			return o, errorf("start", ErrInvalid, "", err)
		}
	}
	if o.priority < -store.MaxPriority || o.priority > store.MaxPriority {
		return o, errorf("start", ErrInvalid, "", detail("priority out of range"))
	}
	if err := CheckAttributes(o.attrs); err != nil {
		return o, err
	}
	return o, nil
}

// queueEntry is run's queue entry as its start names it. It Needs the
// run's workflow at its version, so only a worker carrying that version
// admits it (a worker carrying other workflows skips it rather than take a
// slot it cannot use).
func queueEntry(run string, start startItem) store.QueuedRun {
	return store.QueuedRun{Queue: start.Queue, Run: run, Partition: start.Partition, Priority: start.Priority,
		Needs: Capability(start.Workflow, start.Version)}
}

// startQueued writes a queued run: its world, its start item and its
// RunQueued in one Spawn under a lease of the starter's, then its queue
// entry, then gives the lease back. A crash between the Spawn and the
// entry is repaired by the workers' scans (the start item names the
// queue), so a run is never lost outside its queue.
func startQueued(ctx context.Context, st store.Store, wf *Workflows, holder, inc string, spec store.SpawnSpec, start startItem, now time.Time) (created bool, err error) {
	const op = "start"
	runID := spec.World
	if q, ok := wf.queue(start.Queue); ok {
		if err := declareQueue(ctx, st, q); err != nil {
			return false, wrap(op, runID, err)
		}
	} else if _, err := st.GetQueue(ctx, start.Queue); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return false, errorf(op, ErrInvalid, runID, detail("no queue "+start.Queue+" is declared"))
		}
		return false, wrap(op, runID, err)
	}
	e := newEnvelope(runID, &start, event.RunQueued, "", 1, now, queuedPayload(&start))
	spec.Holder, spec.Incarnation, spec.TTL, spec.Events = holder, inc, 10*time.Second, []store.Record{e}
	sp, err := st.Spawn(ctx, spec)
	switch {
	case errors.Is(err, store.ErrWorldExists):
		return false, nil // a repeated start: the caller checks it is the same
	case err != nil:
		return false, wrap(op, runID, err)
	}
	if _, _, err := st.EnqueueRun(ctx, queueEntry(runID, start)); err != nil {
		return true, wrap(op, runID, err)
	}
	_ = st.Release(ctx, runID, holder, sp.Lease.Epoch) // else it expires: admission does not wait for it
	return true, nil
}

// declareQueue puts q's declaration in the store unless it is there as it
// is.
func declareQueue(ctx context.Context, st store.Store, q Queue) error {
	if cur, err := st.GetQueue(ctx, q.Name); err == nil && cur == q.spec() {
		return nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return st.PutQueue(ctx, q.spec())
}
