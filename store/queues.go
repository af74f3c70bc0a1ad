package store

import (
	"context"
	"slices"
	"time"
)

// Queues are named admission queues for workflow runs, as DBOS's: a run
// started on a queue waits in it until an admitter (a worker with room)
// takes it, and admission is one transaction that counts the queue's
// limits, so no two admitters anywhere can both take the last slot.
//
// An admitted run holds its slot until its world is archived: the
// transaction that archives the world (a run's end commit, a
// cancellation, SetWorldStatus) removes its entry, so a slot is freed
// exactly when the run leaves, and a run whose worker died keeps its slot
// while another worker takes it over. A waiting run whose world is
// archived leaves the queue the same way; a paused one waits but is
// skipped by admission until it is active again.
type Queues interface {
	// PutQueue declares a queue or replaces its limits. The new limits
	// bind the next admission; runs admitted already keep their slots.
	PutQueue(ctx context.Context, q QueueSpec) error
	// GetQueue reads a queue's declaration. Unknown: ErrNotFound.
	GetQueue(ctx context.Context, name string) (QueueSpec, error)
	// ListQueues lists every declared queue, by name.
	ListQueues(ctx context.Context) ([]QueueSpec, error)
	// EnqueueRun puts run r.Run (an existing world, ErrWorldNotFound
	// otherwise; archived: ErrWorldArchived) in queue r.Queue (declared:
	// ErrNotFound otherwise) with r.Partition and r.Priority. The store
	// assigns Seq and EnqueuedAt. Idempotent by run: a run already in a
	// queue answers its entry as it is, with dup set.
	EnqueueRun(ctx context.Context, r QueuedRun) (entry QueuedRun, dup bool, err error)
	// AdmitRuns admits up to max waiting runs of queue for worker, in one
	// transaction, in (Priority, Seq) order, skipping runs whose world is
	// not active and runs of a partition at its limits, and stopping at
	// the queue's own: Concurrency (admitted runs at once, per partition
	// when Partitioned), WorkerConcurrency (admitted runs at once whose
	// Worker is worker) and RateLimit (admissions within the last
	// RatePeriod by the store's clock, per partition when Partitioned). It
	// answers the runs it admitted, with Worker and AdmittedAt set.
	// Unknown queue: ErrNotFound.
	//
	// carries is what the worker can run (capability strings, as a
	// worker advertises them): a waiting run whose Needs it lacks is
	// skipped, not stopped at, so it takes no slot and does not block the
	// runs behind it until a worker carrying it admits. No carries (an
	// older admitter's call) admits every run, as an entry with no Needs
	// is admitted by any worker.
	AdmitRuns(ctx context.Context, queue, worker string, max int, carries ...string) ([]QueuedRun, error)
	// ListQueuedRuns lists queue's entries, admitted and waiting, in
	// (Priority, Seq) order. An unknown queue lists nothing.
	ListQueuedRuns(ctx context.Context, queue string) ([]QueuedRun, error)
	// QueueRunOf reads run's entry; ok is false when it is in no queue.
	QueueRunOf(ctx context.Context, run string) (r QueuedRun, ok bool, err error)
	// RecentAdmissions counts queue's admissions within the last period
	// by the store's clock, as far as they are kept (a queue keeps them
	// for its RatePeriod).
	RecentAdmissions(ctx context.Context, queue string) (int, error)
}

// QueueSpec declares a queue's limits. A zero limit is no limit.
type QueueSpec struct {
	Name string
	// Concurrency bounds the queue's admitted runs at once across the
	// cluster (each partition's, when Partitioned).
	Concurrency int
	// WorkerConcurrency bounds the queue's admitted runs at once that one
	// worker admitted.
	WorkerConcurrency int
	// RateLimit admissions at most per RatePeriod (each partition's, when
	// Partitioned), by the store's clock. Both or neither are set.
	RateLimit  int
	RatePeriod time.Duration
	// Partitioned gives every partition key limits of its own.
	Partitioned bool
}

// QueuedRun is a run's entry in a queue.
type QueuedRun struct {
	Queue     string
	Run       string
	Partition string
	Priority  int    // lower first
	Seq       uint64 // the store's enqueue order: FIFO within a priority
	// EnqueuedAt is the store's time of EnqueueRun.
	EnqueuedAt time.Time
	// Worker admitted the run; empty while it waits.
	Worker     string
	AdmittedAt time.Time
	// Needs is what a worker must carry to admit the run: the capability
	// string of its workflow and version, "workflow:<name>@<version>"
	// recorded at EnqueueRun. Empty (an entry an
	// older binary enqueued, or one from before the store recorded it)
	// is admitted by any worker.
	Needs string
}

// CanAdmit reports whether a worker carrying carries may admit r: r needs
// nothing, the worker names nothing (it carries everything), or it
// carries r.Needs.
func CanAdmit(r QueuedRun, carries []string) bool {
	return r.Needs == "" || len(carries) == 0 || slices.Contains(carries, r.Needs)
}

// Admitted reports whether the run was admitted (it holds a slot).
func (r QueuedRun) Admitted() bool { return r.Worker != "" }

// MaxPriority bounds a queued run's priority either side of zero.
const MaxPriority = 1 << 30
