package plane_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// TestPassivatedWorldWakesOnInput: an idle world's process stops after
// IdleAfter while the host keeps its lease; the next input starts a fresh
// process that restores it (from the state its predecessor parked, which
// is the store's under the same holding) and applies the input.
func TestPassivatedWorldWakesOnInput(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 2, Name: "passivation"}, func(env *lab.Env) error {
		st := newStore(env)
		var events []plane.HostEvent
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) { events = append(events, ev) }
		for i := range 3 {
			if err := createAssigned(env.Ctx, st, fmt.Sprint("p", i), "A"); err != nil {
				return err
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		if err := testrig.WaitLab(env, "three leases", 5*time.Second, func() (bool, error) {
			held, _ := h.Worlds()
			return len(held) == 3, nil
		}); err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 5, Key: "a"}, "a"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p0 active", time.Second, func() (bool, error) {
			_, active := h.Worlds()
			return active == 1, nil
		}); err != nil {
			return err
		}
		// Idle past IdleAfter: the process stops, the lease stays.
		if err := sleep(env, 2*cfg.IdleAfter); err != nil {
			return err
		}
		held, active := h.Worlds()
		if len(held) != 3 || active != 0 {
			return fmt.Errorf("after idling: %d held, %d active; want 3 and 0", len(held), active)
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 7, Key: "b"}, "b"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p0 applied the wake input", time.Second, func() (bool, error) {
			s, ok := h.State("p0")
			if !ok {
				return false, nil
			}
			v, err := value(s, "p0")
			return v.N == 12, err
		}); err != nil {
			return err
		}
		var passivated, restored int
		for _, ev := range events {
			switch {
			case ev.Kind == plane.EvPassivate && ev.World == "p0":
				passivated++
			case ev.Kind == plane.EvRestored && ev.World == "p0":
				restored++
			}
		}
		if passivated != 1 || restored != 2 {
			return fmt.Errorf("p0 passivated %d times and restored %d; want 1 and 2", passivated, restored)
		}
		// The held lease survived passivation: the same epoch throughout.
		if epoch, ok := h.Lease("p0"); !ok || epoch != 1 {
			return fmt.Errorf("p0 lease epoch %d held %v, want epoch 1", epoch, ok)
		}
		_, err = parity(env.Ctx, st, "p0")
		return err
	})
}

// TestCallAcrossProcessesOnForkedAndSeededWorlds: a forked or seeded
// world's journal starts above its genesis snapshot, and with a snapshot
// every step the active baseline has already passed the call by the time
// its reply can be read. The remote client re-derives the reply from the
// highest snapshot below the call, the fork's or the seed's, not from an
// empty initial state (which gave a wrong reply hash: "reply no longer
// derivable").
func TestCallAcrossProcessesOnForkedAndSeededWorlds(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 4, Name: "remote-call-fork"}, func(env *lab.Env) error {
		st, h, remote, err := remoteRig(env, "src", 1)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		for i := range 3 {
			if _, err := remote.Send(env.Ctx, "src", Add{By: 2, Key: fmt.Sprint(i)}, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		if n, err := plane.CallAs[int64](env.Ctx, remote, "src", Get{}); err != nil || n != 6 {
			return fmt.Errorf("src Get = %d, %v; want 6", n, err)
		}
		ops, err := plane.NewOps(st, kernels())
		if err != nil {
			return err
		}
		if _, err := ops.WorldFork(env.Ctx, "src", 0, "fork"); err != nil {
			return err
		}
		srcState, ok := h.State("src")
		if !ok {
			return fmt.Errorf("src is not running on A")
		}
		if _, err := ops.WorldCreateFromSeed(env.Ctx, universe, "seeded", world.Snapshot{Height: 0, State: srcState.State}); err != nil {
			return err
		}
		for _, id := range []string{"fork", "seeded"} {
			if err := createAssigned(env.Ctx, st, id, "A"); err != nil {
				return err
			}
			if _, err := remote.Send(env.Ctx, id, Add{By: 10, Key: "k"}, "k"); err != nil {
				return err
			}
			for _, want := range []int64{16, 16} { // twice: the second call's baseline is a later snapshot
				n, err := plane.CallAs[int64](env.Ctx, remote, id, Get{})
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				if n != want {
					return fmt.Errorf("%s Get = %d, want %d", id, n, want)
				}
			}
		}
		return nil
	})
}

// TestRemoteReplyPastACompactedJournalIsUnavailable: when compaction has
// removed the records between the highest snapshot below a call and the
// call, its reply cannot be re-derived: the client says so with
// ErrReplyUnavailable, wrapping the store's CompactedError, instead of
// stepping the call on the wrong state. Compacted only up to that
// snapshot, the reply is still derived.
func TestRemoteReplyPastACompactedJournalIsUnavailable(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "remote-call-compacted"}, func(env *lab.Env) error {
		st, h, remote, err := remoteRig(env, "c", 0)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		send := func(n int, key string) error {
			for i := range n {
				if _, err := remote.Send(env.Ctx, "c", Add{By: 2, Key: fmt.Sprint(key, i)}, fmt.Sprint(key, i)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := send(6, "a"); err != nil {
			return err
		}
		// A snapshot below the call (a cycle crosses a multiple of
		// SnapshotEvery), with records between it and the call.
		if err := testrig.WaitLab(env, "the first inputs journaled", 5*time.Second, func() (bool, error) {
			s, ok := h.State("c")
			return ok && s.Height == 6, nil
		}); err != nil {
			return err
		}
		if err := send(2, "m"); err != nil {
			return err
		}
		first, err := remote.CallWithID(env.Ctx, "c", "fixed-id", Get{})
		if err != nil {
			return err
		}
		if err := send(12, "b"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "every input journaled", 5*time.Second, func() (bool, error) {
			s, ok := h.State("c")
			return ok && s.Height == 21, nil
		}); err != nil {
			return err
		}
		journal, err := journalOf(env.Ctx, st, "c")
		if err != nil {
			return err
		}
		var call uint64
		for _, e := range journal {
			if id, _, err := world.RecordCallID(e); err == nil && id == "fixed-id" {
				call = e.RunSeq
			}
		}
		// The baseline below the call: a snapshot, or the initial state.
		below, _, err := st.SnapshotBelow(env.Ctx, "c", call)
		if err != nil || below.Height == 0 || below.Height+1 >= call {
			return fmt.Errorf("the call at %d has its baseline at %d (%v): the test needs a record between them", call, below.Height, err)
		}
		active, _, err := st.ActiveSnapshot(env.Ctx, "c")
		if err != nil || active.Height < call {
			return fmt.Errorf("active snapshot at %d, below the call at %d (%v)", active.Height, call, err)
		}
		// Before compaction the same call id gets the first reply again.
		again, err := remote.CallWithID(env.Ctx, "c", "fixed-id", Get{})
		if err != nil || string(again) != string(first) {
			return fmt.Errorf("the repeated call: %x, %v; want %x", again, err, first)
		}
		epoch, _ := h.Lease("c")
		// Compacted up to the snapshot below the call, the reply is still
		// derivable: the client reads from the floor, not from 0.
		if _, err := st.Compact(env.Ctx, "c", epoch, active.Height-below.Height); err != nil {
			return err
		}
		if again, err := remote.CallWithID(env.Ctx, "c", "fixed-id", Get{}); err != nil || string(again) != string(first) {
			return fmt.Errorf("the repeated call, compacted up to its baseline: %x, %v; want %x", again, err, first)
		}
		if _, err := st.Compact(env.Ctx, "c", epoch, active.Height-(call-1)); err != nil {
			return err
		}
		_, err = remote.CallWithID(env.Ctx, "c", "fixed-id", Get{})
		var ce *store.CompactedError
		if !errors.Is(err, plane.ErrReplyUnavailable) || !errors.As(err, &ce) || ce.Stream != "c" || ce.Floor != call-1 {
			return fmt.Errorf("the call after compaction: %v; want ErrReplyUnavailable wrapping the store's CompactedError at floor %d", err, call-1)
		}
		return nil
	})
}

// TestCallAcrossProcesses: a client that shares no Replies hub with the
// host (as a client in another process) gets the reply by re-deriving it
// from the journal record, equal to what the handler returned.
func TestCallAcrossProcesses(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 3, Name: "remote-call"}, func(env *lab.Env) error {
		_, h, remote, err := remoteRig(env, "r", 0)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		for i := range 9 { // past SnapshotEvery: the reply is re-derived across a snapshot
			if _, err := remote.Send(env.Ctx, "r", Add{By: 2, Key: fmt.Sprint(i)}, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		n, err := plane.CallAs[int64](env.Ctx, remote, "r", Get{})
		if err != nil {
			return err
		}
		if n != 18 {
			return fmt.Errorf("remote Get = %d, want 18", n)
		}
		// The same call id again: the inbox holds it once, the reply is
		// the first one's, even after more input changed the state.
		if _, err := remote.Send(env.Ctx, "r", Add{By: 1, Key: "x"}, "x"); err != nil {
			return err
		}
		first, err := remote.CallWithID(env.Ctx, "r", "fixed-id", Get{})
		if err != nil {
			return err
		}
		if _, err := remote.Send(env.Ctx, "r", Add{By: 1, Key: "y"}, "y"); err != nil {
			return err
		}
		again, err := remote.CallWithID(env.Ctx, "r", "fixed-id", Get{})
		if err != nil {
			return err
		}
		if string(first) != string(again) {
			return fmt.Errorf("a repeated call id got another reply")
		}
		return nil
	})
}

// remoteRig starts host A over a fresh store with world id assigned to it
// (SnapshotEvery as given, 0 for hostConfig's), and a client that shares
// no Replies hub with it, as a client in another process: it gets every
// reply by re-deriving it from the journal.
func remoteRig(env *lab.Env, id string, snapshotEvery uint64) (*memstore.Store, *plane.Host, *plane.Client, error) {
	st := newStore(env)
	if err := createAssigned(env.Ctx, st, id, "A"); err != nil {
		return nil, nil, nil, err
	}
	cfg := hostConfig("A", st, plane.NewReplies())
	if snapshotEvery > 0 {
		cfg.SnapshotEvery = snapshotEvery
	}
	h, err := plane.StartHost(env.Ctx, env.Root, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	remote, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
	if err != nil {
		h.Stop(env.Ctx)
		return nil, nil, nil, err
	}
	return st, h, remote, nil
}

// Two processes started alike (the same executor seed: the old production
// default) must not hand out the same call ids: a call's reply is found by
// its id, so a repeated id answers a new call with an old call's reply.
func TestCallIDsOfTwoProcessesWithOneSeedDiffer(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	a, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: actor.NewExecutor(1)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: actor.NewExecutor(1)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 32 {
		for _, c := range []*plane.Client{a, b} {
			id := c.NewCallID()
			if seen[id] {
				t.Fatalf("call id %s handed out twice by two clients seeded alike", id)
			}
			seen[id] = true
		}
	}
}

// An event keyed "call:X" can neither pass for call X nor block it: the
// store keeps that namespace for calls, and refuses the event as invalid
// ingress; the call runs and answers whatever came before it.
func TestEventKeysCannotTakeACallsDedupeKey(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "call-namespace"}, func(env *lab.Env) error {
		_, h, remote, err := remoteRig(env, "r", 0)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if _, err := remote.CallWithID(env.Ctx, "r", "X", Get{}); err != nil {
			return err
		}
		if _, err := remote.Send(env.Ctx, "r", Add{By: 5, Key: "a"}, plane.CallKey("X")); !errors.Is(err, plane.ErrInvalidIngress) {
			return fmt.Errorf("event keyed like call X after it: %v, want ErrInvalidIngress", err)
		}
		if _, err := remote.Send(env.Ctx, "r", Add{By: 3, Key: "b"}, plane.CallKey("Y")); !errors.Is(err, plane.ErrInvalidIngress) {
			return fmt.Errorf("event keyed like call Y before it: %v, want ErrInvalidIngress", err)
		}
		if _, err := remote.Send(env.Ctx, "r", Add{By: 2, Key: "c"}, "Y"); err != nil {
			return err
		}
		n, err := plane.CallAs[int64](env.Ctx, remote, "r", Get{})
		if err != nil {
			return err
		}
		if n != 2 {
			return fmt.Errorf("Get = %d, want 2 (only the event with its own key applied)", n)
		}
		b, err := remote.CallWithID(env.Ctx, "r", "Y", Get{})
		if err != nil {
			return fmt.Errorf("call Y after events: %w", err)
		}
		var y int64
		if err := world.Decode(b, &y); err != nil || y != 2 {
			return fmt.Errorf("call Y = %d (%v), want 2", y, err)
		}
		return nil
	})
}

// TestPassivatedWorldWakesWithoutReadingTheStore: a world passivated under
// a lease its host still holds wakes from the state and cursor its process
// parked: the wake reads neither snapshot nor journal nor world record
// (the store's truth is the same, since no one else commits at the
// holding's epoch), and the world goes on from where it stood, in parity
// with its journal.
func TestPassivatedWorldWakesWithoutReadingTheStore(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "parked-wake"}, func(env *lab.Env) error {
		base := newStore(env)
		var counting atomic.Bool
		var mu sync.Mutex
		reads := map[string]int{}
		st := base.Restart(memstore.WithHook(func(op string) error {
			if counting.Load() {
				mu.Lock()
				reads[op]++
				mu.Unlock()
			}
			return nil
		}))
		passivated := 0
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvPassivate {
				passivated++
			}
		}
		if err := createAssigned(env.Ctx, base, "p", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: env.Lab})
		// More steps than a snapshot covers (SnapshotEvery 4): a restore
		// from the store would read the journal past the snapshot.
		for i := range 6 {
			if _, err := c.Send(env.Ctx, "p", Add{By: 1, Key: fmt.Sprint("a", i)}, fmt.Sprint("a", i)); err != nil {
				return err
			}
		}
		if err := testrig.WaitLab(env, "p passivated", 10*time.Second, func() (bool, error) { return passivated == 1, nil }); err != nil {
			return err
		}
		counting.Store(true)
		if _, err := c.Send(env.Ctx, "p", Add{By: 10, Key: "b"}, "b"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p applied the wake input", time.Second, func() (bool, error) {
			s, ok := h.State("p")
			if !ok {
				return false, nil
			}
			v, err := value(s, "p")
			return v.N == 16, err
		}); err != nil {
			return err
		}
		counting.Store(false)
		mu.Lock()
		for _, op := range []string{"read", "active_snapshot", "snapshot_below", "get_world", "cursor"} {
			if reads[op] != 0 {
				mu.Unlock()
				return fmt.Errorf("the wake called %s %d times: %v", op, reads[op], reads)
			}
		}
		mu.Unlock()
		if epoch, ok := h.Lease("p"); !ok || epoch != 1 {
			return fmt.Errorf("p lease epoch %d held %v, want epoch 1 throughout", epoch, ok)
		}
		_, err = parity(env.Ctx, base, "p")
		return err
	})
}

// TestStaleParkedStateIsNotRestored: a parked state is the store's only
// while nothing committed after it; one that is older than what the
// holding committed since (a passivating predecessor's, landing after its
// successor committed) is refused, and the wake restores from the store:
// no restore, and no State, goes below a height the host committed.
func TestStaleParkedStateIsNotRestored(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "stale-parked"}, func(env *lab.Env) error {
		st := newStore(env)
		cfg := hostConfig("A", st, nil)
		var h *plane.Host
		var floor uint64 // the height below which nothing may be restored
		var bad []string
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.World != "p0" || ev.Kind != plane.EvRestored {
				return
			}
			if ev.Height < floor {
				bad = append(bad, fmt.Sprintf("restored at %d, committed %d", ev.Height, floor))
			}
			if s, ok := h.State("p0"); ok && s.Height < floor {
				bad = append(bad, fmt.Sprintf("State at %d, committed %d", s.Height, floor))
			}
		}
		if err := createAssigned(env.Ctx, st, "p0", "A"); err != nil {
			return err
		}
		var err error
		if h, err = plane.StartHost(env.Ctx, env.Root, cfg); err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		parkedAt := func(height uint64) (world.Snapshot, uint64, error) {
			var snap world.Snapshot
			var cursor uint64
			err := testrig.WaitLab(env, fmt.Sprint("p0 parked at ", height), 5*time.Second, func() (bool, error) {
				var ok bool
				snap, cursor, ok = plane.Parked(h, "p0")
				return ok && snap.Height == height, nil
			})
			return snap, cursor, err
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 5, Key: "a"}, "a"); err != nil {
			return err
		}
		stale, staleCursor, err := parkedAt(1)
		if err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 7, Key: "b"}, "b"); err != nil {
			return err
		}
		if _, _, err := parkedAt(2); err != nil {
			return err
		}
		floor = 2
		plane.Park(h, "p0", stale, staleCursor)
		if _, err := c.Send(env.Ctx, "p0", Add{By: 1, Key: "c"}, "c"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p0 applied the wake input", 5*time.Second, func() (bool, error) {
			s, ok := h.State("p0")
			return ok && s.Height >= 3, nil
		}); err != nil {
			return err
		}
		if len(bad) > 0 {
			return fmt.Errorf("a stale parked state was restored: %v", bad)
		}
		s, _ := h.State("p0")
		if v, err := value(s, "p0"); err != nil || v.N != 13 || s.Height != 3 {
			return fmt.Errorf("p0 at %d with N=%d (%v), want 3 and 13", s.Height, v.N, err)
		}
		_, err = parity(env.Ctx, st, "p0")
		return err
	})
}

// deafStore drops every inbox watch: a hint for a world's input never
// reaches its host, as when a notification is lost with the listener's
// connection.
type deafStore struct{ store.Store }

func (d deafStore) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	var rest []string
	for _, t := range topics {
		if _, inbox := store.InboxTopicWorld(t); !inbox {
			rest = append(rest, t)
		}
	}
	if len(rest) == 0 {
		return func() {}, nil
	}
	return d.Store.Watch(ctx, w, rest...)
}

// TestAPassiveWorldWhoseHintIsLostWakesAtTheNextRescan: input for a held,
// passivated world whose hint never arrives is applied by the host's next
// rescan of its worlds (which sees the backlog), not left waiting for ever.
func TestAPassiveWorldWhoseHintIsLostWakesAtTheNextRescan(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 3, Name: "lost-hint"}, func(env *lab.Env) error {
		st := newStore(env)
		var mu sync.Mutex
		var woke int
		cfg := hostConfig("A", deafStore{st}, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvBacklogWake && ev.World == "p0" {
				mu.Lock()
				woke++
				mu.Unlock()
			}
		}
		if err := createAssigned(env.Ctx, st, "p0", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "the lease", 5*time.Second, func() (bool, error) {
			held, active := h.Worlds()
			return len(held) == 1 && active == 0, nil
		}); err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		if _, err := c.Send(env.Ctx, "p0", Add{By: 5, Key: "a"}, "a"); err != nil {
			return err
		}
		// Within two rescans (SyncEvery is half the lease TTL).
		if err := testrig.WaitLab(env, "p0 applied the input", 2*cfg.LeaseTTL, func() (bool, error) {
			s, ok := h.State("p0")
			if !ok {
				return false, nil
			}
			v, err := value(s, "p0")
			return v.N == 5, err
		}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if woke == 0 {
			return errors.New("applied, but no backlog wake reported: was the hint lost at all?")
		}
		return nil
	})
}

// TestAnActiveWorldWhoseHintIsLostAppliesItsInputAtTheNextRescan: input
// for a held world whose process is alive (not passivated) and whose hint
// never arrives (a lost notification; another process's ingress on one
// SQLite file) is applied by the host's next rescan, not left waiting until
// the process passivates. IdleAfter is an hour, so passivation cannot be
// what rescues it.
func TestAnActiveWorldWhoseHintIsLostAppliesItsInputAtTheNextRescan(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "lost-hint-active"}, func(env *lab.Env) error {
		st := newStore(env)
		cfg := hostConfig("A", deafStore{st}, nil)
		cfg.IdleAfter = time.Hour
		if err := createAssigned(env.Ctx, st, "p0", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		applied := func(n int64) func() (bool, error) {
			return func() (bool, error) {
				s, ok := h.State("p0")
				if !ok {
					return false, nil
				}
				v, err := value(s, "p0")
				return v.N == n, err
			}
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 5, Key: "a"}, "a"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p0 applied the first input", 2*cfg.LeaseTTL, applied(5)); err != nil {
			return err
		}
		if _, active := h.Worlds(); active != 1 {
			return fmt.Errorf("%d active worlds after the first input, want p0's process alive", active)
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 2, Key: "b"}, "b"); err != nil {
			return err
		}
		// Within two rescans (SyncEvery is half the lease TTL).
		if err := testrig.WaitLab(env, "p0 applied the second input", 2*cfg.LeaseTTL, applied(7)); err != nil {
			return err
		}
		if _, active := h.Worlds(); active != 1 {
			return fmt.Errorf("%d active worlds, want p0's process still alive (it was not passivation that woke it)", active)
		}
		_, err = parity(env.Ctx, st, "p0")
		return err
	})
}
