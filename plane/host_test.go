package plane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// TestHostRunsWorldsAndAnswersCalls: a host acquires the leases of the
// worlds assigned to it, drains their inboxes through the kernel in
// committed cycles, answers calls in-process, and the journal replays to
// the same state byte for byte.
func TestHostRunsWorldsAndAnswersCalls(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 1, Name: "host-basic"}, func(env *lab.Env) error {
		st := newStore(env)
		replies := plane.NewReplies()
		for _, w := range []string{"w1", "w2"} {
			if err := createAssigned(env.Ctx, st, w, "A"); err != nil {
				return err
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, replies))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Replies: replies, Hosts: []*plane.Host{h}})
		if err != nil {
			return err
		}
		for i := range 10 {
			for _, w := range []string{"w1", "w2"} {
				if _, err := c.Send(env.Ctx, w, Add{By: int64(i), Key: fmt.Sprint(i)}, fmt.Sprint("k", i)); err != nil {
					return err
				}
			}
		}
		ack, err := c.Send(env.Ctx, "w1", Add{By: 100, Key: "dup"}, "k3")
		if err != nil || !ack.Duplicate {
			return fmt.Errorf("a repeated key was not deduplicated: %+v %v", ack, err)
		}
		n, err := plane.CallAs[int64](env.Ctx, c, "w1", Get{})
		if err != nil {
			return err
		}
		if n != 45 {
			return fmt.Errorf("Get = %d, want 45", n)
		}
		if _, err := c.Call(env.Ctx, "w2", Add{By: 1}); !errors.Is(err, plane.ErrCallFailed) || !errors.Is(err, world.ErrNoReply) {
			return fmt.Errorf("a call without a reply: %v", err)
		}
		for _, w := range []string{"w1", "w2"} {
			s, err := parity(env.Ctx, st, w)
			if err != nil {
				return err
			}
			got, err := c.State(env.Ctx, w)
			if err != nil {
				return err
			}
			if string(got.State) != string(s.State) || got.Height != s.Height {
				return fmt.Errorf("%s: State %d differs from the replay at %d", w, got.Height, s.Height)
			}
		}
		return nil
	})
}

// TestCycleBudgetsBoundEachCommit: with MaxTickStepsPerCycle 2, a backlog
// of seven items is committed in cycles of at most two steps each, one
// commit per cycle, and nothing is lost between them.
func TestCycleBudgetsBoundEachCommit(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 4, Name: "budgets"}, func(env *lab.Env) error {
		st := newStore(env)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		if err := createAssigned(env.Ctx, st, "b", "A"); err != nil {
			return err
		}
		for i := range 7 {
			if _, err := c.Send(env.Ctx, "b", Add{By: 1, Key: fmt.Sprint(i)}, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		var heights []uint64
		cfg := hostConfig("A", st, nil)
		cfg.MaxTickStepsPerCycle = 2
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvCommit {
				heights = append(heights, ev.Height)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := drained(env, st, "b"); err != nil {
			return err
		}
		if fmt.Sprint(heights) != "[2 4 6 7]" {
			return fmt.Errorf("commit heads %v, want [2 4 6 7]", heights)
		}
		_, err = parity(env.Ctx, st, "b")
		return err
	})
}

// TestHintStormCoalescesScans: forty worlds are assigned to a worker one
// every 10ms; each assignment raises a hint on a global topic. The host
// scans its worlds at most once per HintSyncGap (and once more for the
// hints that came during a pass), not once per hint, and still acquires
// every world.
func TestHintStormCoalescesScans(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 12, Name: "hint-storm"}, func(env *lab.Env) error {
		st := newStore(env)
		const n = 40
		for i := range n {
			if _, err := st.CreateWorld(env.Ctx, universe, fmt.Sprint("h", i), nil); err != nil {
				return err
			}
		}
		scans := 0
		cfg := hostConfig("A", st, nil)
		cfg.HintSyncGap = 100 * time.Millisecond
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvSynced {
				scans++
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := sleep(env, 10*time.Millisecond); err != nil {
			return err
		}
		scans = 0
		for i := range n {
			if err := st.Assign(env.Ctx, fmt.Sprint("h", i), store.Assignment{DesiredWorker: "A"}, nil); err != nil {
				return err
			}
			if err := sleep(env, 10*time.Millisecond); err != nil {
				return err
			}
		}
		if err := testrig.WaitLab(env, "every world held", 2*time.Second, func() (bool, error) {
			held, _ := h.Worlds()
			return len(held) == n, nil
		}); err != nil {
			return err
		}
		// 400ms of hints at one per 100ms, plus one pass for the last
		// hints and the backstop: far fewer than forty.
		if scans > 8 {
			return fmt.Errorf("%d scans for %d hints", scans, n)
		}
		return nil
	})
}

// TestSlowScanDoesNotStarveRenewals: a worker holds thirty worlds and its
// store answers each ListWorkerWorlds page slowly, so one pass over its
// worlds lasts twice the lease TTL. The controller renews between pages,
// so no lease is lost.
func TestSlowScanDoesNotStarveRenewals(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 13, Name: "slow-scan"}, func(env *lab.Env) error {
		base := newStore(env)
		const n = 30
		for i := range n {
			if err := createAssigned(env.Ctx, base, fmt.Sprint("s", i), "A"); err != nil {
				return err
			}
		}
		st := testrig.NewHandle(base, func(op string) error {
			if op == "list_worker_worlds" {
				return sleep(env, 300*time.Millisecond)
			}
			return nil
		})
		var lost []plane.HostEvent
		cfg := hostConfig("A", st, nil)
		cfg.LeaseTTL, cfg.ListPage = time.Second, 5 // a pass: 7 pages, 2.1s
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvFenced {
				lost = append(lost, ev)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := sleep(env, 6*time.Second); err != nil {
			return err
		}
		if len(lost) != 0 {
			return fmt.Errorf("%d leases lost during slow scans, the first %+v", len(lost), lost[0])
		}
		held, _ := h.Worlds()
		if len(held) != n {
			return fmt.Errorf("%d worlds held, want %d", len(held), n)
		}
		for _, w := range held {
			if epoch, _ := h.Lease(w); epoch != 1 {
				return fmt.Errorf("%s at epoch %d: it was lost and taken again", w, epoch)
			}
		}
		return nil
	})
}

// TestHostTakesOverAPageInOneStoreCall: a host taking over many worlds
// makes one AcquireLeases call per ListWorkerWorlds page, never a call per
// world: no Acquire, and no GetWorld, Cursor or ReadInbox of its own (the
// only such reads are the restores of the worlds that start). Only the
// worlds whose inbox has a backlog start a process, and each applies its
// input; the others stay passive.
// singleAcquires counts the single-world Acquire calls made through it
// (the store's own hook sees them as the AcquireLeases of one world that
// answers them).
type singleAcquires struct {
	store.Store
	n atomic.Int64
}

func (s *singleAcquires) Acquire(ctx context.Context, world, worker string, ttl time.Duration, opts ...store.AcquireOption) (store.Lease, error) {
	s.n.Add(1)
	return s.Store.Acquire(ctx, world, worker, ttl, opts...)
}

func TestHostTakesOverAPageInOneStoreCall(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 3, Name: "host-takeover-pages"}, func(env *lab.Env) error {
		var mu sync.Mutex
		ops := map[string]int{}
		st := newStore(env, memstore.WithHook(func(op string) error {
			mu.Lock()
			ops[op]++
			mu.Unlock()
			return nil
		}))
		const n, page = 60, 25
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		backlog := map[string]bool{}
		var ids []string
		for i := range n {
			id := fmt.Sprintf("a%02d", i)
			ids = append(ids, id)
			if err := createAssigned(env.Ctx, st, id, "A"); err != nil {
				return err
			}
			if i%5 == 2 {
				if _, err := c.Send(env.Ctx, id, Add{By: 3, Key: id}, id); err != nil {
					return err
				}
				backlog[id] = true
			}
		}
		mu.Lock()
		clear(ops)
		mu.Unlock()
		woke := map[string]int{}
		counted := &singleAcquires{Store: st}
		cfg := hostConfig("A", counted, nil)
		cfg.ListPage, cfg.IdleAfter = page, time.Minute
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvWake {
				woke[ev.World]++
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "every world held and every backlog applied", 10*time.Second, func() (bool, error) {
			held, _ := h.Worlds()
			if len(held) != n {
				return false, nil
			}
			for id := range backlog {
				s, ok := h.State(id)
				if !ok {
					return false, nil
				}
				if v, err := value(s, id); err != nil || v.N != 3 {
					return false, err
				}
			}
			return true, nil
		}); err != nil {
			return err
		}
		// Later passes find every world held: nothing more to acquire.
		if err := sleep(env, 3*cfg.LeaseTTL); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		pages := (n + page - 1) / page
		if ops["acquire_leases"] != pages || counted.n.Load() != 0 {
			return fmt.Errorf("%d worlds in pages of %d taken over with %d AcquireLeases and %d Acquire calls; want %d and 0 (%v)",
				n, page, ops["acquire_leases"], counted.n.Load(), pages, ops)
		}
		if ops["get_world"] != len(backlog) || ops["cursor"] != len(backlog) {
			return fmt.Errorf("%d GetWorld and %d Cursor calls; want one each per restored world, %d (%v)",
				ops["get_world"], ops["cursor"], len(backlog), ops)
		}
		if _, active := h.Worlds(); active != len(backlog) || len(woke) != len(backlog) {
			return fmt.Errorf("%d processes running, %d worlds started; want the %d with a backlog", active, len(woke), len(backlog))
		}
		for w, k := range woke {
			if !backlog[w] || k != 1 {
				return fmt.Errorf("%s started %d times (backlog %v)", w, k, backlog[w])
			}
		}
		for _, id := range ids {
			if epoch, ok := h.Lease(id); !ok || epoch != 1 {
				return fmt.Errorf("%s held %v at epoch %d, want epoch 1", id, ok, epoch)
			}
		}
		return nil
	})
}

// TestHostGivesBackAWorldWithoutADefinition: a world assigned here whose
// universe has no kernel is known to be unrunnable only once its takeover
// returns its universe; the host gives its lease back at once, and never
// takes it again (each pass would otherwise bump its epoch and hint every
// host), while the other worlds of the page run.
func TestHostGivesBackAWorldWithoutADefinition(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 4, Name: "host-no-kernel"}, func(env *lab.Env) error {
		st := newStore(env)
		if _, err := st.CreateWorld(env.Ctx, "elsewhere", "x", nil); err != nil {
			return err
		}
		if err := st.Assign(env.Ctx, "x", store.Assignment{DesiredWorker: "A"}, nil); err != nil {
			return err
		}
		if err := createAssigned(env.Ctx, st, "y", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, nil))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		// Many passes (SyncEvery is LeaseTTL/2).
		if err := sleep(env, 10*time.Second); err != nil {
			return err
		}
		if held, _ := h.Worlds(); fmt.Sprint(held) != "[y]" {
			return fmt.Errorf("held %v, want [y]", held)
		}
		l, ok, err := st.GetLease(env.Ctx, "x")
		if err != nil || !ok || l.Holder != "" || l.Epoch != 1 {
			return fmt.Errorf("x's lease = %+v (%v, %v); want taken once and given back", l, ok, err)
		}
		return nil
	})
}

// TestDrainDuringATakeoverGivesBackWhatCameBack: a drain that begins while
// a page's AcquireLeases is in flight (the pass read the draining flag
// before the drain set it) releases the leases that call returns, at once:
// none stays held until its TTL, and none is reported acquired.
func TestDrainDuringATakeoverGivesBackWhatCameBack(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "drain-during-takeover"}, func(env *lab.Env) error {
		var inFlight atomic.Bool
		var once sync.Once
		st := newStore(env, memstore.WithHook(func(op string) error {
			if op != "acquire_leases" {
				return nil
			}
			first := false
			once.Do(func() { first = true })
			if !first {
				return nil
			}
			inFlight.Store(true)
			return sleep(env, 200*time.Millisecond) // the round trip, during which the drain begins
		}))
		ids := []string{"d0", "d1", "d2"}
		for _, id := range ids {
			if err := createAssigned(env.Ctx, st, id, "A"); err != nil {
				return err
			}
		}
		acquired := 0
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvAcquired {
				acquired++
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "the takeover's AcquireLeases in flight", time.Second, func() (bool, error) {
			return inFlight.Load(), nil
		}); err != nil {
			return err
		}
		if err := h.Drain(env.Ctx); err != nil {
			return err
		}
		if err := sleep(env, time.Second); err != nil { // well under the 2s TTL
			return err
		}
		if held, _ := h.Worlds(); len(held) != 0 || acquired != 0 {
			return fmt.Errorf("after the drain: holding %v, %d acquisitions reported", held, acquired)
		}
		for _, id := range ids {
			l, ok, err := st.GetLease(env.Ctx, id)
			if err != nil || !ok || l.Holder != "" {
				return fmt.Errorf("%s's lease = %+v (%v, %v); want taken by the in-flight call and released", id, l, ok, err)
			}
		}
		return nil
	})
}

// afterAcquire runs then once, right after the first AcquireLeases
// returns: between the takeover's read of the inboxes and the host's
// registration of what it took.
type afterAcquire struct {
	store.Store
	once sync.Once
	then func()
}

func (s *afterAcquire) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...store.AcquireOption) ([]store.AcquireResult, error) {
	res, err := s.Store.AcquireLeases(ctx, worker, worlds, ttl, opts...)
	s.once.Do(s.then)
	return res, err
}

// TestHostStartsAWorldHintedDuringItsTakeover: an item enqueued after the
// takeover read the world's inbox (no backlog then) but before the host
// registered the lease still starts the world: the host watched the inbox
// before the read, and remembers the hint.
func TestHostStartsAWorldHintedDuringItsTakeover(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 6, Name: "hint-during-takeover"}, func(env *lab.Env) error {
		base := newStore(env)
		for _, id := range []string{"h0", "h1"} {
			if err := createAssigned(env.Ctx, base, id, "A"); err != nil {
				return err
			}
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: env.Lab})
		var sendErr error
		st := &afterAcquire{Store: base, then: func() {
			_, sendErr = c.Send(env.Ctx, "h1", Add{By: 4, Key: "late"}, "late")
		}}
		cfg := hostConfig("A", st, nil)
		cfg.IdleAfter = time.Minute
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "h1 applied the item enqueued during its takeover", 5*time.Second, func() (bool, error) {
			s, ok := h.State("h1")
			if !ok {
				return false, sendErr
			}
			v, err := value(s, "h1")
			return v.N == 4, err
		}); err != nil {
			return err
		}
		if _, active := h.Worlds(); active != 1 {
			return fmt.Errorf("%d processes, want h1's alone", active)
		}
		return nil
	})
}

// TestRenewalOfALeaseTakenLaterIsOnTime: the controller looks at its
// leases only when a renewal is due, and a lease taken in between moves
// that look forward when it is due first: here the host held nothing
// (next look a whole TTL away) when it took a world, whose renewal must
// come at its own expiry minus the margin, not at the planned look.
func TestRenewalOfALeaseTakenLaterIsOnTime(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 7, Name: "renew-after-takeover"}, func(env *lab.Env) error {
		st := newStore(env)
		var acquiredAt, renewedAt time.Time
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			switch {
			case ev.Kind == plane.EvAcquired && acquiredAt.IsZero():
				acquiredAt = ev.At
			case ev.Kind == plane.EvRenewed && ev.N > 0 && renewedAt.IsZero():
				renewedAt = ev.At
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := sleep(env, 300*time.Millisecond); err != nil {
			return err
		}
		if err := createAssigned(env.Ctx, st, "late", "A"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "the lease renewed", 2*cfg.LeaseTTL, func() (bool, error) { return !renewedAt.IsZero(), nil }); err != nil {
			return err
		}
		margin := cfg.LeaseTTL / 3 // RenewMargin's default
		if due := acquiredAt.Add(cfg.LeaseTTL - margin); renewedAt.After(due.Add(50 * time.Millisecond)) {
			return fmt.Errorf("acquired at %v, renewed at %v: after its due time %v", acquiredAt, renewedAt, due)
		}
		if epoch, ok := h.Lease("late"); !ok || epoch != 1 {
			return fmt.Errorf("late held %v at epoch %d, want epoch 1", ok, epoch)
		}
		return nil
	})
}

// TestAPassDropsTheLeasesItDidNotList: a world the worker's listing no
// longer shows (paused, which ends its lease, and unassigned) is dropped
// at the end of the next pass, while the worlds it listed stay held at
// their epochs.
func TestAPassDropsTheLeasesItDidNotList(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 8, Name: "pass-drops-unlisted"}, func(env *lab.Env) error {
		st := newStore(env)
		ids := []string{"p0", "p1", "p2", "p3"}
		for _, id := range ids {
			if err := createAssigned(env.Ctx, st, id, "A"); err != nil {
				return err
			}
		}
		var dropped []string
		cfg := hostConfig("A", st, nil)
		// Renewals a minute apart: the pass that the status change's
		// hint starts sees the loss first.
		cfg.ListPage, cfg.LeaseTTL = 2, time.Minute
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvFenced {
				dropped = append(dropped, ev.World+": "+ev.Err.Error())
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "every world held", 5*time.Second, func() (bool, error) {
			held, _ := h.Worlds()
			return len(held) == len(ids), nil
		}); err != nil {
			return err
		}
		if _, err := st.SetWorldStatus(env.Ctx, "p2", store.WorldPaused, "test"); err != nil {
			return err
		}
		if err := st.Unassign(env.Ctx, "p2", nil); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p2 dropped", 5*time.Second, func() (bool, error) {
			_, ok := h.Lease("p2")
			return !ok, nil
		}); err != nil {
			return err
		}
		if len(dropped) != 1 || !strings.HasPrefix(dropped[0], "p2: ") || !strings.Contains(dropped[0], "lease expired or revoked") {
			return fmt.Errorf("dropped %q, want p2 alone, by the end of a pass", dropped)
		}
		for _, id := range []string{"p0", "p1", "p3"} {
			if epoch, ok := h.Lease(id); !ok || epoch != 1 {
				return fmt.Errorf("%s held %v at epoch %d, want epoch 1", id, ok, epoch)
			}
		}
		return nil
	})
}
