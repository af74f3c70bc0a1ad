package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// queueState is the queues' part of the state: declarations, entries by
// run, and the admissions a rate window still counts.
type queueState struct {
	specs      map[string]store.QueueSpec
	entries    map[string]*store.QueuedRun // by run
	seq        uint64
	admissions map[string][]admission // by queue, in time order
}

type admission struct {
	partition string
	at        time.Time
}

func (st *state) queues() *queueState {
	if st.q == nil {
		st.q = &queueState{specs: map[string]store.QueueSpec{}, entries: map[string]*store.QueuedRun{},
			admissions: map[string][]admission{}}
	}
	return st.q
}

// leaveQueue removes world's queue entry (mu held): archiving a run frees
// its slot, or takes it out of the queue, in the archiving transaction.
func (st *state) leaveQueue(world string) {
	if st.q != nil {
		delete(st.q.entries, world)
	}
}

// PutQueue implements store.Queues.
func (s *backend) PutQueue(ctx context.Context, q store.QueueSpec) error {
	if err := s.begin(ctx, "put_queue"); err != nil {
		return err
	}
	defer s.end()
	s.st.queues().specs[q.Name] = q
	s.st.notify(store.TopicAssignments)
	return nil
}

// GetQueue implements store.Queues.
func (s *backend) GetQueue(ctx context.Context, name string) (store.QueueSpec, error) {
	const op = "get_queue"
	if err := s.begin(ctx, op); err != nil {
		return store.QueueSpec{}, err
	}
	defer s.end()
	q, ok := s.st.queues().specs[name]
	if !ok {
		return store.QueueSpec{}, store.Errorf(op, store.ErrNotFound, "", "no queue %q", name)
	}
	return q, nil
}

// ListQueues implements store.Queues.
func (s *backend) ListQueues(ctx context.Context) ([]store.QueueSpec, error) {
	if err := s.begin(ctx, "list_queues"); err != nil {
		return nil, err
	}
	defer s.end()
	var out []store.QueueSpec
	for _, q := range s.st.queues().specs {
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b store.QueueSpec) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// EnqueueRun implements store.Queues.
func (s *backend) EnqueueRun(ctx context.Context, r store.QueuedRun) (store.QueuedRun, bool, error) {
	const op = "enqueue_run"
	if err := s.begin(ctx, op); err != nil {
		return store.QueuedRun{}, false, err
	}
	defer s.end()
	q := s.st.queues()
	if e, ok := q.entries[r.Run]; ok {
		return *e, true, nil
	}
	if _, ok := q.specs[r.Queue]; !ok {
		return store.QueuedRun{}, false, store.Errorf(op, store.ErrNotFound, r.Run, "no queue %q", r.Queue)
	}
	w, ok := s.st.worlds[r.Run]
	switch {
	case !ok:
		return store.QueuedRun{}, false, store.Errorf(op, store.ErrWorldNotFound, r.Run, "")
	case w.rec.Status == store.WorldArchived:
		return store.QueuedRun{}, false, store.Errorf(op, store.ErrWorldArchived, r.Run, "")
	}
	q.seq++
	r.Seq, r.EnqueuedAt = q.seq, s.now()
	q.entries[r.Run] = &r
	s.st.notify(store.TopicAssignments)
	return r, false, nil
}

// AdmitRuns implements store.Queues.
func (s *backend) AdmitRuns(ctx context.Context, queue, worker string, max int, carries ...string) ([]store.QueuedRun, error) {
	const op = "admit_runs"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	q := s.st.queues()
	spec, ok := q.specs[queue]
	if !ok {
		return nil, store.Errorf(op, store.ErrNotFound, "", "no queue %q", queue)
	}
	now := s.now()
	var running []store.QueuedRun
	var waiting []contract.QueueCandidate
	for _, e := range q.entries {
		if e.Queue != queue {
			continue
		}
		if e.Admitted() {
			running = append(running, *e)
			continue
		}
		w := s.st.worlds[e.Run]
		waiting = append(waiting, contract.QueueCandidate{QueuedRun: *e, Active: w != nil && w.rec.Status == store.WorldActive})
	}
	recent := q.recent(queue, spec, now)
	got := contract.Admit(spec, running, waiting, recent, worker, carries, max, now)
	for _, r := range got {
		*q.entries[r.Run] = r
		if spec.RateLimit > 0 {
			q.admissions[queue] = append(q.admissions[queue], admission{partition: r.Partition, at: now})
		}
	}
	if len(got) > 0 {
		s.st.notify(store.TopicAssignments)
	}
	return got, nil
}

// recent prunes queue's admissions outside its rate window and counts
// those inside, per partition (mu held).
func (q *queueState) recent(queue string, spec store.QueueSpec, now time.Time) map[string]int {
	from := contract.RateWindowStart(spec, now)
	as := q.admissions[queue]
	i := 0
	for i < len(as) && !as[i].at.After(from) {
		i++
	}
	as = as[i:]
	if spec.RateLimit == 0 {
		as = nil
	}
	q.admissions[queue] = as
	out := map[string]int{}
	for _, a := range as {
		out[a.partition]++
	}
	return out
}

// ListQueuedRuns implements store.Queues.
func (s *backend) ListQueuedRuns(ctx context.Context, queue string) ([]store.QueuedRun, error) {
	if err := s.begin(ctx, "list_queued_runs"); err != nil {
		return nil, err
	}
	defer s.end()
	var out []store.QueuedRun
	for _, e := range s.st.queues().entries {
		if e.Queue == queue {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(a, b store.QueuedRun) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Seq, b.Seq))
	})
	return out, nil
}

// QueueRunOf implements store.Queues.
func (s *backend) QueueRunOf(ctx context.Context, run string) (store.QueuedRun, bool, error) {
	if err := s.begin(ctx, "queue_run_of"); err != nil {
		return store.QueuedRun{}, false, err
	}
	defer s.end()
	e, ok := s.st.queues().entries[run]
	if !ok {
		return store.QueuedRun{}, false, nil
	}
	return *e, true, nil
}

// RecentAdmissions implements store.Queues.
func (s *backend) RecentAdmissions(ctx context.Context, queue string) (int, error) {
	if err := s.begin(ctx, "recent_admissions"); err != nil {
		return 0, err
	}
	defer s.end()
	q := s.st.queues()
	spec, ok := q.specs[queue]
	if !ok {
		return 0, nil
	}
	n := 0
	for _, c := range q.recent(queue, spec, s.now()) {
		n += c
	}
	return n, nil
}
