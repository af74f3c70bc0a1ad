package plane_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// TestHostReportsEachRenewalRoundTrip: every batch renewal is one
// EvRenewed with no world, N the leases renewed (all the host holds) and
// Dur the RenewLeases call's duration on the executor's clock (here a
// store that answers it in 40ms of virtual time).
func TestHostReportsEachRenewalRoundTrip(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 21, Name: "obs-renewed"}, func(env *lab.Env) error {
		st := newStore(env, memstore.WithHook(func(op string) error {
			if op == "renew_leases" {
				return sleep(env, 40*time.Millisecond)
			}
			return nil
		}))
		for i := range 3 {
			if err := createAssigned(env.Ctx, st, fmt.Sprint("r", i), "A"); err != nil {
				return err
			}
		}
		var renewed []plane.HostEvent
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvRenewed {
				renewed = append(renewed, ev)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		// LeaseTTL 2s, margin 2s/3: a renewal every 1.33s or so.
		if err := sleep(env, 5*time.Second); err != nil {
			return err
		}
		if len(renewed) < 2 {
			return fmt.Errorf("%d renewals in 5s of a 2s lease", len(renewed))
		}
		for _, ev := range renewed {
			if ev.World != "" || ev.N != 3 || ev.Dur != 40*time.Millisecond || ev.Err != nil {
				return fmt.Errorf("renewal event %+v, want no world, N 3, Dur 40ms, no error", ev)
			}
		}
		return nil
	})
}

// TestCommitReportsInboxToJournalLag: two items wait in a world's inbox
// (enqueued 300ms apart, before any host runs), a host starts and
// journals both in one cycle whose commit the store answers in 50ms. The
// EvCommit's Dur is the virtual time from the OLDER item's enqueue to the
// commit's completion, and N the cycle's steps.
func TestCommitReportsInboxToJournalLag(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 22, Name: "obs-lag"}, func(env *lab.Env) error {
		st := newStore(env, memstore.WithHook(func(op string) error {
			if op == "commit" {
				return sleep(env, 50*time.Millisecond)
			}
			return nil
		}))
		if err := createAssigned(env.Ctx, st, "g", "A"); err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		first := env.Lab.Now()
		if _, err := c.Send(env.Ctx, "g", Add{By: 1, Key: "a"}, "a"); err != nil {
			return err
		}
		if err := sleep(env, 300*time.Millisecond); err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "g", Add{By: 1, Key: "b"}, "b"); err != nil {
			return err
		}
		if err := sleep(env, 700*time.Millisecond); err != nil {
			return err
		}
		var commits []plane.HostEvent
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvCommit {
				commits = append(commits, ev)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := drained(env, st, "g"); err != nil {
			return err
		}
		if len(commits) != 1 {
			return fmt.Errorf("%d commits, want one cycle for the backlog", len(commits))
		}
		ev := commits[0]
		if ev.N != 2 || ev.Height != 2 {
			return fmt.Errorf("commit N %d at height %d, want 2 steps to height 2", ev.N, ev.Height)
		}
		// At is stamped right after the commit returned, in the same
		// virtual instant; the first item waited a second before any host
		// ran, then the store's 50ms commit.
		if want := ev.At.Sub(first); ev.Dur != want {
			return fmt.Errorf("commit lag %v, want %v (commit at %v, oldest enqueue at %v)", ev.Dur, want, ev.At, first)
		}
		if ev.Dur < time.Second+50*time.Millisecond {
			return fmt.Errorf("commit lag %v is less than the wait plus the commit", ev.Dur)
		}
		return nil
	})
}

// alteredKernels is the test world with one handler changed under the same
// name and version: Add adds twice its amount. Replaying a journal the
// original wrote diverges on the first Add's state.
func alteredKernels() plane.Kernels {
	d := world.New[counter]("test.counter", 1)
	world.On(d, func(c *world.Ctx, s *counter, a Add) error {
		s.N += 2 * a.By
		s.Seen = append(s.Seen, a.Key)
		return nil
	})
	return plane.Kernels{universe: d.Kernel()}
}

// TestDivergentJournalIsObserved: a world journaled by one definition is
// restored by a host whose definition changed a handler without a new
// version. The restore fails with a *world.DivergenceError: the host
// reports EvDiverged with it, then the crash it always reported (the
// supervisor keeps retrying), and nothing is committed.
func TestDivergentJournalIsObserved(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 23, Name: "obs-diverged"}, func(env *lab.Env) error {
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "d", "A"); err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		a, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, nil))
		if err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "d", Add{By: 1, Key: "a"}, "a"); err != nil {
			return err
		}
		if err := drained(env, st, "d"); err != nil {
			return err
		}
		if err := a.Drain(env.Ctx); err != nil {
			return err
		}
		if err := a.Stop(env.Ctx); err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "d", Add{By: 1, Key: "b"}, "b"); err != nil {
			return err
		}
		if err := st.Assign(env.Ctx, "d", store.Assignment{DesiredWorker: "B"}, nil); err != nil {
			return err
		}
		var events []plane.HostEvent
		cfg := hostConfig("B", st, nil)
		cfg.Kernels = alteredKernels()
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.World == "d" {
				events = append(events, ev)
			}
		}
		b, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer b.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "a divergence", 5*time.Second, func() (bool, error) {
			return slices.ContainsFunc(events, func(ev plane.HostEvent) bool { return ev.Kind == plane.EvDiverged }), nil
		}); err != nil {
			return err
		}
		i := slices.IndexFunc(events, func(ev plane.HostEvent) bool { return ev.Kind == plane.EvDiverged })
		ev := events[i]
		var div *world.DivergenceError
		if !errors.As(ev.Err, &div) || div.Height != 1 || div.Reason != world.ReasonState {
			return fmt.Errorf("EvDiverged carries %v, want the state divergence at height 1", ev.Err)
		}
		if epoch, _ := b.Lease("d"); ev.Epoch != epoch {
			return fmt.Errorf("EvDiverged at epoch %d, the host holds %d", ev.Epoch, epoch)
		}
		if i+1 >= len(events) || events[i+1].Kind != plane.EvCrash || !errors.Is(events[i+1].Err, world.ErrDivergence) {
			return fmt.Errorf("EvDiverged is not followed by the restore's crash: %v", kinds(events[i:]))
		}
		if slices.ContainsFunc(events, func(ev plane.HostEvent) bool { return ev.Kind == plane.EvCommit }) {
			return fmt.Errorf("a world whose journal diverges committed: %v", kinds(events))
		}
		return nil
	})
}

func kinds(evs []plane.HostEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

// logRecord is one line a recordingHandler saw.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recordingHandler keeps every record at or above its level.
type recordingHandler struct {
	level slog.Level
	mu    *sync.Mutex
	recs  *[]logRecord
}

func newRecording(level slog.Level) (*slog.Logger, func() []logRecord) {
	h := &recordingHandler{level: level, mu: &sync.Mutex{}, recs: &[]logRecord{}}
	return slog.New(h), func() []logRecord {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Clone(*h.recs)
	}
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// TestHostLogsLifecycleNotSteps: with a Debug logger, a host logs the
// acquisition at Info, the passivation and the wake at Debug, the fencing
// of a paused world at Warn with its reason, each with the world, epoch
// and worker; and at Info and above it logs nothing per step or commit,
// however many there were.
func TestHostLogsLifecycleNotSteps(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 24, Name: "obs-logs"}, func(env *lab.Env) error {
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "l", "A"); err != nil {
			return err
		}
		log, records := newRecording(slog.LevelDebug)
		cfg := hostConfig("A", st, nil)
		cfg.Logger = log
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		for i := range 20 {
			if _, err := c.Send(env.Ctx, "l", Add{By: 1, Key: fmt.Sprint(i)}, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		if err := drained(env, st, "l"); err != nil {
			return err
		}
		if err := sleep(env, 2*cfg.IdleAfter); err != nil { // passivates
			return err
		}
		if _, err := c.Send(env.Ctx, "l", Add{By: 1, Key: "wake"}, "wake"); err != nil {
			return err
		}
		if err := drained(env, st, "l"); err != nil {
			return err
		}
		if _, err := st.SetWorldStatus(env.Ctx, "l", store.WorldPaused, "maintenance"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "the lease dropped", 5*time.Second, func() (bool, error) {
			_, ok := h.Lease("l")
			return !ok, nil
		}); err != nil {
			return err
		}
		recs := records()
		find := func(level slog.Level, msg string) (logRecord, error) {
			for _, r := range recs {
				if r.level == level && r.msg == msg {
					return r, nil
				}
			}
			return logRecord{}, fmt.Errorf("no %v line %q in %v", level, msg, recs)
		}
		for _, want := range []struct {
			level slog.Level
			msg   string
		}{
			{slog.LevelInfo, "host: lease acquired"},
			{slog.LevelDebug, "host: world passivated"},
			{slog.LevelDebug, "host: world woken"},
			{slog.LevelWarn, "host: world fenced"},
		} {
			r, err := find(want.level, want.msg)
			if err != nil {
				return err
			}
			if r.attrs["world"] != "l" || r.attrs["epoch"] != "1" || r.attrs["worker"] != "A" {
				return fmt.Errorf("%q has attributes %v, want world l, epoch 1, worker A", want.msg, r.attrs)
			}
		}
		if r, _ := find(slog.LevelWarn, "host: world fenced"); r.attrs["reason"] == "" {
			return fmt.Errorf("the fenced line has no reason: %v", r.attrs)
		}
		info := 0
		for _, r := range recs {
			if r.level >= slog.LevelInfo {
				info++
			}
		}
		// Acquired and fenced; nothing for the 21 steps and their commits.
		if info != 2 {
			return fmt.Errorf("%d lines at Info or above, want 2: %v", info, recs)
		}
		return nil
	})
}
