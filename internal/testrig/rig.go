package testrig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// SeedsEnv names the variable that makes a memstore run explore more lab
// seeds: ORRERY_SEEDS=N runs N seeds from the test's own.
const SeedsEnv = "ORRERY_SEEDS"

// Rig is one test's store and executor on one backend. On memstore the
// test runs under the lab, in virtual time; on SQLite and PostgreSQL under
// the production executor, where nothing waits for a clock: a test that
// needs a lease, a claim or a timer to come due moves the store's clock
// (Advance), and a test that needs the code under test to react waits for
// a condition with a bounded loop on the executor (WaitFor).
type Rig struct {
	T       *testing.T
	Backend string
	Ctx     context.Context
	Root    *actor.Scope
	Ex      actor.Executor
	// Store is the durable state as the test (and the operator) sees it;
	// no fault touches it.
	Store store.Store
	// Mem is Store on memstore (nil on the real backends): its Restart
	// gives a process a handle of its own over the same state.
	Mem *memstore.Store
	// Advance moves the store's clock by d: under the lab, virtual time
	// passes for everybody; on a real store only the store's clock jumps,
	// as if the processes had been frozen that long.
	Advance func(d time.Duration) error
	// Poll is one turn of a wait: virtual time under the lab, a short
	// park on the production executor otherwise.
	Poll  time.Duration
	Polls int // how many turns a wait of one virtual second may take
}

// Real reports whether the rig runs a real store (and real goroutines).
func (r *Rig) Real() bool { return r.Backend != Memstore }

// ForEachBackend runs body as a subtest per backend, with cfg for the lab
// on memstore (its Name defaults to the test's).
func ForEachBackend(t *testing.T, cfg lab.Config, body func(r *Rig) error) {
	for _, b := range Backends() {
		t.Run(b, func(t *testing.T) { RunOn(t, b, cfg, body) })
	}
}

// RunOn runs body on backend: under the lab with cfg on memstore (and
// with the next seeds too when ORRERY_SEEDS asks for more), else once
// under the production executor seeded with cfg.Seed. A body's error
// fails t.
func RunOn(t *testing.T, backend string, cfg lab.Config, body func(r *Rig) error) {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = t.Name()
	}
	if backend == Memstore {
		n, _ := strconv.Atoi(os.Getenv(SeedsEnv))
		first := cfg.Seed
		for s := first; s < first+uint64(max(n, 1)); s++ {
			cfg.Seed = s
			res := lab.Run(cfg, func(env *lab.Env) error {
				st := memstore.New(memstore.WithClock(env.Lab.Now))
				return body(&Rig{T: t, Backend: backend, Ctx: env.Ctx, Root: env.Root, Ex: env.Lab, Store: st, Mem: st,
					Advance: func(d time.Duration) error { return actor.Sleep(env.Ctx, env.Lab, d) },
					Poll:    10 * time.Millisecond, Polls: 100})
			})
			if res.Failure != nil {
				t.Fatalf("seed %d: %v", s, res.Failure)
			}
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clock := &Clock{}
	st := Open(t, ctx, backend, clock)
	ex := actor.NewExecutor(cfg.Seed)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	r := &Rig{T: t, Backend: backend, Ctx: ctx, Root: sys.Root(), Ex: ex, Store: st,
		Advance: func(d time.Duration) error { clock.Advance(d); return nil },
		Poll:    2 * time.Millisecond, Polls: 2500}
	err := body(r)
	if _, cerr := sys.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// WaitFor waits until cond holds, for at most limit of virtual time under
// the lab, or as many short parks on the production executor: a bounded
// loop on a condition, never a timing assertion.
func (r *Rig) WaitFor(what string, limit time.Duration, cond func() (bool, error)) error {
	turns := int(limit/time.Second+1) * r.Polls
	for i := 0; ; i++ {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if i >= turns {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		if err := actor.Sleep(r.Ctx, r.Ex, r.Poll); err != nil {
			return err
		}
	}
}

// WorkerStore is a process's own store handle: on memstore a fresh handle
// over the same state (so memstore's Crash kills that process's calls
// only), else the shared store.
func (r *Rig) WorkerStore() store.Store {
	if r.Mem != nil {
		return r.Mem.Restart()
	}
	return r.Store
}

// Background runs f as a process of the rig until the returned stop,
// which answers f's error with the scope's.
func (r *Rig) Background(name string, f func(ctx context.Context) error) (func() error, error) {
	sc, err := r.Root.Sub(name)
	if err != nil {
		return nil, err
	}
	var ferr error
	var mu sync.Mutex
	if _, err := sc.Go(name, func(ctx context.Context) error {
		err := f(ctx)
		mu.Lock()
		ferr = err
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	return func() error {
		_, err := sc.Close(r.Ctx)
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(err, ferr)
	}, nil
}
