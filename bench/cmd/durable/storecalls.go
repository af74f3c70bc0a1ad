package main

// storeCalls (-wf-calls) counts and times the store calls of the workflow
// variant by method, and prints them as comment lines at exit: where a
// run's time goes (how many calls a run costs, which of them wait).

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/orrery-run/orrery/store"
)

type storeCalls struct {
	store.Store
	mu sync.Mutex
	n  map[string]int
	d  map[string]time.Duration
}

func newStoreCalls(s store.Store) *storeCalls {
	return &storeCalls{Store: s, n: map[string]int{}, d: map[string]time.Duration{}}
}
func (p *storeCalls) rec(m string, t time.Time) {
	p.mu.Lock()
	p.n[m]++
	p.d[m] += time.Since(t)
	p.mu.Unlock()
}
func (p *storeCalls) dump() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for k := range p.n {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Printf("# %s store calls: %-15s %7d, mean %v\n", lib, k, p.n[k], (p.d[k] / time.Duration(p.n[k])).Round(time.Microsecond))
	}
}
func (p *storeCalls) Append(ctx context.Context, s string, e []store.Record, o store.AppendOptions) ([]store.Appended, error) {
	defer p.rec("Append", time.Now())
	return p.Store.Append(ctx, s, e, o)
}
func (p *storeCalls) Read(ctx context.Context, s string, a uint64, l int) ([]store.Record, error) {
	defer p.rec("Read", time.Now())
	return p.Store.Read(ctx, s, a, l)
}
func (p *storeCalls) Head(ctx context.Context, s string) (uint64, error) {
	defer p.rec("Head", time.Now())
	return p.Store.Head(ctx, s)
}
func (p *storeCalls) Acquire(ctx context.Context, w, k string, t time.Duration, o ...store.AcquireOption) (store.Lease, error) {
	defer p.rec("Acquire", time.Now())
	return p.Store.Acquire(ctx, w, k, t, o...)
}
func (p *storeCalls) RenewLeases(ctx context.Context, w string, r []store.LeaseRef, t time.Duration) ([]store.LeaseResult, error) {
	defer p.rec("RenewLeases", time.Now())
	return p.Store.RenewLeases(ctx, w, r, t)
}
func (p *storeCalls) Release(ctx context.Context, w, k string, e uint64) error {
	defer p.rec("Release", time.Now())
	return p.Store.Release(ctx, w, k, e)
}
func (p *storeCalls) GetLease(ctx context.Context, w string) (store.Lease, bool, error) {
	defer p.rec("GetLease", time.Now())
	return p.Store.GetLease(ctx, w)
}
func (p *storeCalls) Assign(ctx context.Context, w string, a store.Assignment, f *store.Fence) error {
	defer p.rec("Assign", time.Now())
	return p.Store.Assign(ctx, w, a, f)
}
func (p *storeCalls) Enqueue(ctx context.Context, w string, it store.InboxItem) (uint64, bool, error) {
	defer p.rec("Enqueue", time.Now())
	return p.Store.Enqueue(ctx, w, it)
}
func (p *storeCalls) ReadInbox(ctx context.Context, w string, a uint64, l int) ([]store.InboxItem, error) {
	defer p.rec("ReadInbox", time.Now())
	return p.Store.ReadInbox(ctx, w, a, l)
}
func (p *storeCalls) Cursor(ctx context.Context, w string) (uint64, error) {
	defer p.rec("Cursor", time.Now())
	return p.Store.Cursor(ctx, w)
}
func (p *storeCalls) CreateWorld(ctx context.Context, u, w string, s *store.Snapshot) (store.World, error) {
	defer p.rec("CreateWorld", time.Now())
	return p.Store.CreateWorld(ctx, u, w, s)
}
func (p *storeCalls) GetWorld(ctx context.Context, w string) (store.World, error) {
	defer p.rec("GetWorld", time.Now())
	return p.Store.GetWorld(ctx, w)
}
func (p *storeCalls) ListWorlds(ctx context.Context, u string, s store.WorldStatus) ([]store.World, error) {
	defer p.rec("ListWorlds", time.Now())
	return p.Store.ListWorlds(ctx, u, s)
}
func (p *storeCalls) SetWorldStatus(ctx context.Context, w string, s store.WorldStatus, r string) (store.World, error) {
	defer p.rec("SetWorldStatus", time.Now())
	return p.Store.SetWorldStatus(ctx, w, s, r)
}
func (p *storeCalls) Now(ctx context.Context) (time.Time, error) {
	defer p.rec("Now", time.Now())
	return p.Store.Now(ctx)
}
func (p *storeCalls) Spawn(ctx context.Context, s store.SpawnSpec) (store.Spawned, error) {
	defer p.rec("Spawn", time.Now())
	return p.Store.Spawn(ctx, s)
}
func (p *storeCalls) Commit(ctx context.Context, w string, e uint64, b store.CommitBatch) (store.CommitResult, error) {
	defer p.rec("Commit", time.Now())
	return p.Store.Commit(ctx, w, e, b)
}
