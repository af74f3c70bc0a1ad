package contract

import (
	"cmp"
	"slices"
	"time"

	"github.com/orrery-run/orrery/store"
)

// QueueCandidate is a waiting run an admission may take: its entry and
// whether its world is active (a paused run waits and is skipped).
type QueueCandidate struct {
	store.QueuedRun
	Active bool
}

// Admit decides which of a queue's waiting runs an admission for worker
// carrying carries (store.CanAdmit) takes, at most max, from what the backend read in its transaction: the
// queue's spec, every admitted entry (running), every waiting one
// (waiting) and the admission times within the rate window, per partition
// (recent; only read when the spec has a rate). It answers the chosen
// entries in (Priority, Seq) order with Worker and AdmittedAt set. Every
// backend calls it, so the limits are counted one way.
func Admit(spec store.QueueSpec, running []store.QueuedRun, waiting []QueueCandidate, recent map[string]int,
	worker string, carries []string, max int, now time.Time) []store.QueuedRun {
	part := func(p string) string {
		if spec.Partitioned {
			return p
		}
		return ""
	}
	inUse := map[string]int{}
	mine := 0
	for _, r := range running {
		inUse[part(r.Partition)]++
		if r.Worker == worker {
			mine++
		}
	}
	rate := map[string]int{}
	for p, n := range recent {
		rate[part(p)] += n
	}
	waiting = slices.Clone(waiting)
	slices.SortFunc(waiting, func(a, b QueueCandidate) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Seq, b.Seq))
	})
	var out []store.QueuedRun
	for _, c := range waiting {
		if len(out) >= max || spec.WorkerConcurrency > 0 && mine >= spec.WorkerConcurrency {
			break
		}
		if !c.Active || !store.CanAdmit(c.QueuedRun, carries) {
			continue // another worker's to admit: it neither takes a slot nor blocks those behind it
		}
		p := part(c.Partition)
		if spec.Concurrency > 0 && inUse[p] >= spec.Concurrency ||
			spec.RateLimit > 0 && rate[p] >= spec.RateLimit {
			continue // this partition (the whole queue, unpartitioned) is full
		}
		inUse[p]++
		rate[p]++
		mine++
		r := c.QueuedRun
		r.Worker, r.AdmittedAt = worker, now
		out = append(out, r)
	}
	return out
}

// RateWindowStart is the earliest admission time a queue's rate window
// still counts at now.
func RateWindowStart(spec store.QueueSpec, now time.Time) time.Time {
	return now.Add(-spec.RatePeriod)
}
