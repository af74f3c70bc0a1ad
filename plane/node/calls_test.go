package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// heldCommits is a store whose commits of one world, once armed, land and
// then hold their answer until released: the journal and the cursor have
// moved, the host has not heard back. It counts that world's journal
// reads.
type heldCommits struct {
	store.Store
	world     string
	armed     atomic.Bool
	committed chan struct{}
	release   chan struct{}
	reads     atomic.Int64
}

func (s *heldCommits) Commit(ctx context.Context, w string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	res, err := s.Store.Commit(ctx, w, epoch, b)
	if w == s.world && err == nil && s.armed.CompareAndSwap(true, false) {
		s.committed <- struct{}{}
		<-s.release
	}
	return res, err
}

func (s *heldCommits) Read(ctx context.Context, stream string, after uint64, limit int) ([]store.Record, error) {
	if stream == s.world {
		s.reads.Add(1)
	}
	return s.Store.Read(ctx, stream, after, limit)
}

// TestACallOnAHostedWorldWaitsForItsHostNotTheJournal: a call to a world
// this node's host runs is answered by the host, which hands the reply
// over right after the commit that recorded it. Between the two the
// cursor has passed the call; the caller must not re-derive the reply
// from the journal meanwhile (a journal read and a replay per waiting
// call, which under overload took the host's cores: admitted calls fell
// twentyfold at three times the load). Here the commit's answer is held
// for half a second of virtual time; the caller reads no journal, and
// gets its reply once the host has it.
func TestACallOnAHostedWorldWaitsForItsHostNotTheJournal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memstore.New()
		defer mem.Close()
		st := &heldCommits{Store: mem, world: "w00", committed: make(chan struct{}), release: make(chan struct{})}
		create(t, ctx, st, []string{"w00"})
		n := start(t, ctx, st, "a")
		holders(t, ctx, st, []string{"w00"}, "a")
		if _, err := n.Client().Send(ctx, "w00", Add{By: 42}, "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client().Call(ctx, "w00", Get{}); err != nil { // the world runs
			t.Fatal(err)
		}
		st.armed.Store(true)
		got := make(chan error, 1)
		var reply int64
		go func() {
			b, err := n.Client().Call(ctx, "w00", Get{})
			if err == nil {
				err = world.Decode(b, &reply)
			}
			got <- err
		}()
		<-st.committed
		before := st.reads.Load()
		time.Sleep(500 * time.Millisecond) // the caller's polls run meanwhile, on the bubble's clock
		synctest.Wait()
		if n := st.reads.Load() - before; n != 0 {
			t.Errorf("the caller read the journal %d times while the host held the reply", n)
		}
		select {
		case err := <-got:
			t.Fatalf("the call returned (%v) before the host had its reply", err)
		default:
		}
		close(st.release)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if reply != 42 {
			t.Fatalf("reply %d, want 42", reply)
		}
	})
}

// TestAFreshCallToAFullWorldIsRefusedWithoutTheStore: once the store has
// refused a world's input for its inbox bound, a call under an id drawn
// for it (which cannot be a duplicate) is refused at once for a moment,
// without a store round trip; the refusal is ErrOverloaded with a
// Retry-After and is counted. A retried call (its own id) still asks the
// store, whose answer for accepted work is the work. After the moment, a
// fresh call asks the store again.
func TestAFreshCallToAFullWorldIsRefusedWithoutTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memstore.New()
		defer mem.Close()
		st := &countedEnqueues{Store: mem}
		create(t, ctx, st, []string{"w00"})
		n, err := node.Start(ctx, node.Config{Worker: "a", Store: st, Kernels: kernels(), LeaseTTL: ttl, ClaimTTL: 5 * time.Second,
			Limits: plane.Limits{MaxInbox: 2}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Stop(context.Background()) })
		// A paused world drains nothing: two inputs fill it.
		if _, err := mem.SetWorldStatus(ctx, "w00", store.WorldPaused, "test"); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a", "b"} {
			if _, err := n.Client().Send(ctx, "w00", Add{By: 1}, k); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := n.Client().Send(ctx, "w00", Add{By: 1}, "c"); !errors.Is(err, plane.ErrOverloaded) {
			t.Fatalf("third input: %v, want ErrOverloaded", err)
		}
		asked := st.n.Load()
		_, err = n.Client().Call(ctx, "w00", Get{})
		if !errors.Is(err, plane.ErrOverloaded) || plane.RetryAfter(err) <= 0 {
			t.Fatalf("fresh call to the full world: %v, want ErrOverloaded with a Retry-After", err)
		}
		if d := st.n.Load() - asked; d != 0 {
			t.Fatalf("the fresh call asked the store %d times", d)
		}
		// A duplicate of accepted work goes to the store and is answered.
		if a, err := n.Client().Send(ctx, "w00", Add{By: 1}, "a"); err != nil || !a.Duplicate {
			t.Fatalf("retry of accepted input: %+v, %v; want its duplicate", a, err)
		}
		time.Sleep(2 * time.Millisecond) // past the moment the refusal is remembered
		asked = st.n.Load()
		if _, err := n.Client().Call(ctx, "w00", Get{}); !errors.Is(err, plane.ErrOverloaded) {
			t.Fatalf("fresh call later: %v, want ErrOverloaded from the store", err)
		}
		if d := st.n.Load() - asked; d != 1 {
			t.Fatalf("the fresh call after the moment asked the store %d times, want 1", d)
		}
		if r := n.Admission().Refused()[plane.RefusedInbox]; r != 3 {
			t.Fatalf("refusals counted %d, want 3", r)
		}
	})
}

// countedEnqueues counts the store's enqueues.
type countedEnqueues struct {
	store.Store
	n atomic.Int64
}

func (s *countedEnqueues) Enqueue(ctx context.Context, w string, it store.InboxItem) (uint64, bool, error) {
	s.n.Add(1)
	return s.Store.Enqueue(ctx, w, it)
}

// TestARetriedCallIsAnsweredFromTheJournal: a call retried under its id
// after it completed (a client whose first wait timed out, as the API
// tells it to do) is a duplicate whose reply was handed to nobody; it is
// answered from the journal at once, not after the polls' slowest pace
// (a retry with a deadline under a second would otherwise never get it).
// And two waits on one call id in one process each get the reply.
func TestARetriedCallIsAnsweredFromTheJournal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		defer st.Close()
		create(t, ctx, st, []string{"w00"})
		n := start(t, ctx, st, "a")
		holders(t, ctx, st, []string{"w00"}, "a")
		if _, err := n.Client().Send(ctx, "w00", Add{By: 7}, "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client().CallWithID(ctx, "w00", "id-1", Get{}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		b, err := n.Client().CallWithID(cctx, "w00", "id-1", Get{})
		cancel()
		var got int64
		if err == nil {
			err = world.Decode(b, &got)
		}
		if err != nil || got != 7 {
			t.Fatalf("retry of a completed call: %d, %v (after %v); want 7", got, err, time.Since(began))
		}

		// Two waits on one new call id: the world is paused, so both
		// wait; resumed, both get the one reply the host hands over.
		if _, err := st.SetWorldStatus(ctx, "w00", store.WorldPaused, "test"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		type answer struct {
			v   int64
			err error
			at  time.Duration
		}
		answers := make(chan answer, 2)
		began = time.Now()
		wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer wcancel()
		for range 2 {
			go func() {
				b, err := n.Client().CallWithID(wctx, "w00", "id-2", Get{})
				var v int64
				if err == nil {
					err = world.Decode(b, &v)
				}
				answers <- answer{v, err, time.Since(began)}
			}()
		}
		synctest.Wait()
		if _, err := st.SetWorldStatus(ctx, "w00", store.WorldActive, "test"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			a := <-answers
			if a.err != nil || a.v != 7 {
				t.Fatalf("one of two waits on one call id: %d, %v after %v", a.v, a.err, a.at)
			}
		}
	})
}
