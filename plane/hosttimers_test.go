package plane_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// The alarm world of these tests: it sets named timers, cancels them, and
// records which rang.
type (
	alarmState struct {
		Armed []armedAlarm
		Rang  []string
		Nudge int
	}
	armedAlarm struct{ Key, Hash string }
	SetAlarm   struct {
		Key     string
		AfterMs int64
	}
	Disarm struct{ Key string }
	Ring   struct{ Key string }
	Nudge  struct{}
)

const alarmUniverse = "alarms"

func alarmDef() *world.Def[alarmState] {
	d := world.New[alarmState]("test.alarms", 1)
	world.On(d, func(c *world.Ctx, s *alarmState, a SetAlarm) error {
		h := c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Ring{Key: a.Key})
		s.Armed = append(s.Armed, armedAlarm{Key: a.Key, Hash: h})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *alarmState, a Disarm) error {
		for i, x := range s.Armed {
			if x.Key == a.Key {
				c.CancelTimer(x.Hash)
				s.Armed = slices.Delete(s.Armed, i, i+1)
				return nil
			}
		}
		return fmt.Errorf("no alarm %q", a.Key)
	})
	world.On(d, func(c *world.Ctx, s *alarmState, r Ring) error {
		s.Rang = append(s.Rang, r.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *alarmState, _ Nudge) error {
		s.Nudge++
		return nil
	})
	return d
}

func alarmKernels() plane.Kernels { return plane.Kernels{alarmUniverse: alarmDef().Kernel()} }

// alarmRig is one test's alarm worlds on a rig: the events its hosts
// report, and helpers to read the worlds' durable state.
type alarmRig struct {
	*rig
	mu     sync.Mutex
	events []plane.HostEvent
}

func newAlarmRig(r *rig) *alarmRig { return &alarmRig{rig: r} }

func (a *alarmRig) observe(ev plane.HostEvent) {
	a.mu.Lock()
	a.events = append(a.events, ev)
	a.mu.Unlock()
}

// history lists every event the hosts reported, one per line, for a
// failure's message.
func (a *alarmRig) history() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, ev := range a.events {
		fmt.Fprintf(&b, "  %s %s %s epoch=%d height=%d n=%d dur=%v err=%v\n",
			ev.At.Format("15:04:05.000000"), ev.Kind, ev.World, ev.Epoch, ev.Height, ev.N, ev.Dur, ev.Err)
	}
	return b.String()
}

// explain, deferred by a scenario returning err, adds every event the
// hosts reported to a failure's message.
func (a *alarmRig) explain(err *error) {
	if *err != nil {
		*err = fmt.Errorf("%w\nthe hosts' events:\n%s", *err, a.history())
	}
}

// seen returns the events of kind (of world, if not empty) reported so far.
func (a *alarmRig) seen(kind, world string) []plane.HostEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []plane.HostEvent
	for _, ev := range a.events {
		if ev.Kind == kind && (world == "" || ev.World == world) {
			out = append(out, ev)
		}
	}
	return out
}

// timerFired returns the EvTimerFired events of world once there is one
// (a direct firing reports itself right after its commit returns, which a
// reader of the store may see first), or what there is after a while.
func (a *alarmRig) timerFired(world string) []plane.HostEvent {
	_ = a.WaitFor("EvTimerFired of "+world, 10*time.Second, func() (bool, error) {
		return len(a.seen(plane.EvTimerFired, world)) > 0, nil
	})
	return a.seen(plane.EvTimerFired, world)
}

// host starts a host of the alarm worlds for worker over st.
func (a *alarmRig) host(worker string, st store.Store, adjust func(*plane.HostConfig)) (*plane.Host, error) {
	cfg := a.hostConfig(worker, st, nil)
	cfg.Kernels, cfg.Observe = alarmKernels(), a.observe
	if adjust != nil {
		adjust(&cfg)
	}
	return plane.StartHost(a.Ctx, a.Root, cfg)
}

func (a *alarmRig) create(id, worker string) error {
	if _, err := a.Store.CreateWorld(a.Ctx, alarmUniverse, id, nil); err != nil {
		return err
	}
	return a.Store.Assign(a.Ctx, id, store.Assignment{DesiredWorker: worker, Reason: "test"}, nil)
}

func (a *alarmRig) client() *plane.Client {
	c, _ := plane.NewClient(plane.ClientConfig{Store: a.Store, Kernels: alarmKernels(), Executor: a.Ex})
	return c
}

// state restores world id from the store: its committed state.
func (a *alarmRig) state(id string) (alarmState, error) {
	inst, _, err := plane.Restore(a.Ctx, a.Store, alarmKernels(), id)
	if err != nil {
		return alarmState{}, err
	}
	w, err := world.Load(alarmDef(), id, inst.Snapshot())
	if err != nil {
		return alarmState{}, err
	}
	return w.Value()
}

// armed sends SetAlarm and returns the timer's due time once it is
// committed. The due time is the SetAlarm input's enqueue time (the
// handler's Now) plus after, read from the inbox: the timer itself may
// already have fired and left the queue by the time this looks (a loaded
// machine commits the arming late, and the firing right after it). While
// the timer is still queued its due time must be that one.
func (a *alarmRig) arm(c *plane.Client, id, key string, after time.Duration) (time.Time, error) {
	if _, err := c.Send(a.Ctx, id, SetAlarm{Key: key, AfterMs: after.Milliseconds()}, "set-"+key); err != nil {
		return time.Time{}, err
	}
	var due time.Time
	err := a.WaitFor(key+" armed", 10*time.Second, func() (bool, error) {
		s, err := a.state(id)
		if err != nil {
			return false, err
		}
		for _, x := range s.Armed {
			if x.Key != key {
				continue
			}
			items, err := a.Store.ReadInbox(a.Ctx, id, 0, 0)
			if err != nil {
				return false, err
			}
			for _, it := range items {
				if it.DedupeKey == "set-"+key {
					due = it.EnqueuedAt.Add(after)
				}
			}
			if due.IsZero() {
				return false, fmt.Errorf("%s is armed but its SetAlarm is not in the inbox", key)
			}
			ts, err := a.Store.ListTimers(a.Ctx, id, 100)
			for _, t := range ts {
				if t.IntentHash == x.Hash && !t.DeliverAt.Equal(due) {
					return false, fmt.Errorf("timer %s is due %v, want its input's time plus %v: %v", key, t.DeliverAt, after, due)
				}
			}
			return true, err
		}
		return false, nil
	})
	return due, err
}

// rang waits until world id's alarms rang exactly want, in order.
func (a *alarmRig) rang(id string, want ...string) error {
	return a.WaitFor(fmt.Sprint(id, " rang ", want), 20*time.Second, func() (bool, error) {
		s, err := a.state(id)
		if err != nil {
			return false, err
		}
		if len(s.Rang) > len(want) || !slices.Equal(s.Rang, want[:len(s.Rang)]) {
			return false, fmt.Errorf("%s rang %v, want %v", id, s.Rang, want)
		}
		return len(s.Rang) == len(want), nil
	})
}

// firings returns world id's timer firings in its inbox.
func (a *alarmRig) firings(id string) ([]store.InboxItem, error) {
	items, err := a.Store.ReadInbox(a.Ctx, id, 0, 0)
	var out []store.InboxItem
	for _, it := range items {
		if it.Kind == vocab.KindTimer {
			out = append(out, it)
		}
	}
	return out, err
}

// timerSteps returns the outcomes of world id's journaled steps of timer
// firings, in journal order.
func (a *alarmRig) timerSteps(id string) ([]string, error) {
	fs, err := a.journaledFirings(id)
	var out []string
	for _, f := range fs {
		out = append(out, f.Outcome)
	}
	return out, err
}

// journaledFiring is a timer firing world id's journal holds.
type journaledFiring struct {
	StepID     string
	Seq        uint64    // its inbox item's; 0 when its holder stepped it directly
	EnqueuedAt time.Time // the firing's time: what the handler's Ctx.Now said
	Outcome    string
}

// journaledFirings returns world id's journaled timer firings, in order.
func (a *alarmRig) journaledFirings(id string) ([]journaledFiring, error) {
	journal, err := plane.ReadTail(a.Ctx, a.Store, id, 0)
	if err != nil {
		return nil, err
	}
	var out []journaledFiring
	for _, e := range journal {
		var rec struct {
			Input struct {
				Seq        uint64          `cbor:"seq"`
				Kind       string          `cbor:"kind"`
				EnqueuedAt event.Timestamp `cbor:"enqueued_at"`
			} `cbor:"input"`
			Outcome string `cbor:"outcome"`
		}
		if err := world.Decode(e.Payload, &rec); err != nil {
			return nil, err
		}
		if rec.Input.Kind == vocab.KindTimer {
			out = append(out, journaledFiring{StepID: e.StepID, Seq: rec.Input.Seq, EnqueuedAt: rec.Input.EnqueuedAt.Time, Outcome: rec.Outcome})
		}
	}
	return out, nil
}

// firedAt checks that world id has exactly one journaled firing, and that
// it ran (its Ctx.Now) not before due (by the store's clock through the
// inbox, by the holder's stepping it directly) and, under the lab (where
// no call takes time), at exactly want.
func (a *alarmRig) firedAt(id string, due, want time.Time) error {
	fs, err := a.journaledFirings(id)
	if err != nil {
		return err
	}
	if len(fs) != 1 || fs[0].Outcome != string(world.OutcomeOK) {
		return fmt.Errorf("%s has firings %+v, want 1 that ran", id, fs)
	}
	if fs[0].EnqueuedAt.Before(due) {
		return fmt.Errorf("%s fired at %v, before its due time %v", id, fs[0].EnqueuedAt, due)
	}
	if !a.Real() && !fs[0].EnqueuedAt.Equal(want) {
		return fmt.Errorf("%s fired at %v, want %v", id, fs[0].EnqueuedAt, want)
	}
	return nil
}

// TestHeldWorldsTimerFiresAtItsDueTimeWithNoTimerWorker: the host that
// holds a world fires the timer the world set at its due time (under the
// lab to the nanosecond), with no timer worker running at all; the world
// applies the firing once and the host reports it (EvTimerFired, its
// lateness in Dur). The world's process is running, so it steps the
// firing itself, before any store call: no FireHeld, no inbox item; the
// firing's record is named by the timer (world.TimerStepID, seq 0) and
// the commit that journaled it took the timer out of the queue.
func TestHeldWorldsTimerFiresAtItsDueTimeWithNoTimerWorker(t *testing.T) {
	forEachBackend(t, 41, "held-timer", func(r *rig) (err error) {
		a := newAlarmRig(r)
		defer a.explain(&err)
		if err := a.create("h", "A"); err != nil {
			return err
		}
		var fireHeld atomic.Int64
		h, err := a.host("A", r.handle(func(op string) error {
			if op == "fire_held" {
				fireHeld.Add(1)
			}
			return nil
		}), func(c *plane.HostConfig) { c.IdleAfter = -1 }) // active when due
		if err != nil {
			return err
		}
		defer h.Stop(r.Ctx)
		after := 3 * time.Second
		if r.Real() {
			after = 300 * time.Millisecond
		}
		due, err := a.arm(a.client(), "h", "x", after)
		if err != nil {
			return err
		}
		if err := a.rang("h", "x"); err != nil {
			return err
		}
		if err := a.firedAt("h", due, due); err != nil {
			return err
		}
		evs := a.timerFired("h")
		if len(evs) != 1 || evs[0].Epoch != 1 || evs[0].N != 1 || evs[0].Dur < 0 || !r.Real() && evs[0].Dur != 0 {
			return fmt.Errorf("EvTimerFired events %+v, want one of h at epoch 1 (lateness 0 under the lab)", evs)
		}
		steps, err := a.timerSteps("h")
		if err != nil || !slices.Equal(steps, []string{string(world.OutcomeOK)}) {
			return fmt.Errorf("journaled firings %v (%v), want one ok", steps, err)
		}
		if ts, err := r.Store.ListTimers(r.Ctx, "h", 10); err != nil || len(ts) != 0 {
			return fmt.Errorf("timers left %+v, %v", ts, err)
		}
		s, err := a.state("h")
		if err != nil || len(s.Armed) != 1 {
			return fmt.Errorf("state %+v, %v", s, err)
		}
		fs, err := a.journaledFirings("h")
		if err != nil || len(fs) != 1 || fs[0].Seq != 0 || fs[0].StepID != world.TimerStepID(s.Armed[0].Hash) {
			return fmt.Errorf("journaled firings %+v (%v), want one stepped directly, named by timer %s", fs, err, s.Armed[0].Hash)
		}
		if in, err := a.firings("h"); err != nil || len(in) != 0 || fireHeld.Load() != 0 {
			return fmt.Errorf("firings in the inbox %+v (%v), %d FireHeld calls; want none", in, err, fireHeld.Load())
		}
		return nil
	})
}

// TestATimerIsNotHeldUpByAnotherWorldsSlowFiring: the host hands what is
// due to its firing lanes (timers fired through the inbox) without waiting
// for the firings in flight.
// While one world's firing is stuck in the store for a second, another
// world's timer, due 100 ms later, fires at its due time: under the lab to
// the nanosecond, on a real store before the stuck firing lands.
// holdFiring runs hold before the first held firing of world.
type holdFiring struct {
	store.Store
	world string
	hold  func()
	once  sync.Once
}

func (h *holdFiring) FireHeld(ctx context.Context, world string, epoch uint64, hash string) (store.HeldFiring, error) {
	if world == h.world {
		h.once.Do(h.hold)
	}
	return h.Store.FireHeld(ctx, world, epoch, hash)
}

func TestATimerIsNotHeldUpByAnotherWorldsSlowFiring(t *testing.T) {
	forEachBackend(t, 44, "held-lanes", func(r *rig) (err error) {
		a := newAlarmRig(r)
		defer a.explain(&err)
		const lanes = 16
		slow, fast := twoFiringLanes(lanes)
		for _, id := range []string{slow, fast} {
			if err := a.create(id, "A"); err != nil {
				return err
			}
		}
		// slow's firing is stuck: for a second of virtual time under the
		// lab; on a real store, until fast's firing has landed (or a hang
		// guard has passed), so that the order asserted below follows from
		// the lanes alone, not from how quickly a loaded machine fires.
		held := &holdFiring{Store: r.handle(nil), world: slow, hold: func() {
			if !r.Real() {
				_ = actor.Sleep(r.Ctx, r.Ex, time.Second)
				return
			}
			_ = r.WaitFor(fast+"'s firing", 10*time.Second, func() (bool, error) {
				fs, err := a.firings(fast)
				return len(fs) > 0, err
			})
		}}
		h, err := a.host("A", held, func(c *plane.HostConfig) { c.TimerConcurrency, c.TimersThroughInbox = lanes, true })
		if err != nil {
			return err
		}
		defer h.Stop(r.Ctx)
		after := 3 * time.Second
		if r.Real() {
			after = 300 * time.Millisecond
		}
		c := a.client()
		dueSlow, err := a.arm(c, slow, "s", after)
		if err != nil {
			return err
		}
		dueFast, err := a.arm(c, fast, "f", after+100*time.Millisecond)
		if err != nil {
			return err
		}
		// Under the lab fast must come due within slow's stuck second; a
		// real store holds slow's firing until fast's has landed, however
		// far apart a loaded machine armed them.
		if gap := dueFast.Sub(dueSlow); gap <= 0 || !r.Real() && gap > 500*time.Millisecond {
			return fmt.Errorf("setup: %s is due %v after %s, want within the stuck second", fast, gap, slow)
		}
		if err := a.rang(fast, "f"); err != nil {
			return err
		}
		if err := a.rang(slow, "s"); err != nil {
			return err
		}
		fs, err := a.firings(fast)
		if err != nil || len(fs) != 1 {
			return fmt.Errorf("%s: firings %v (%v), want one", fast, fs, err)
		}
		ss, err := a.firings(slow)
		if err != nil || len(ss) != 1 {
			return fmt.Errorf("%s: firings %v (%v), want one", slow, ss, err)
		}
		if !r.Real() && (!fs[0].EnqueuedAt.Equal(dueFast) || !ss[0].EnqueuedAt.Equal(dueSlow.Add(time.Second))) {
			return fmt.Errorf("fired at +%v (%s) and +%v (%s) after their due times, want 0 and the stuck second",
				fs[0].EnqueuedAt.Sub(dueFast), fast, ss[0].EnqueuedAt.Sub(dueSlow), slow)
		}
		if !fs[0].EnqueuedAt.Before(ss[0].EnqueuedAt) {
			return fmt.Errorf("%s fired at %v, after the stuck firing of %s landed (%v)", fast, fs[0].EnqueuedAt, slow, ss[0].EnqueuedAt)
		}
		return nil
	})
}

// twoFiringLanes returns two world ids whose timers a host with n lanes
// fires in different lanes.
func twoFiringLanes(n int) (string, string) {
	first := "lanes-0"
	for i := 1; ; i++ {
		if id := fmt.Sprintf("lanes-%d", i); plane.FireLane(id, n) != plane.FireLane(first, n) {
			return first, id
		}
	}
}

// TestCancelledHeldTimerNeverFires: a timer the world cancels leaves the
// host's schedule: it never fires (no firing, no EvTimerFired), while a
// later one set beside it does.
func TestCancelledHeldTimerNeverFires(t *testing.T) {
	forEachBackend(t, 42, "held-cancel", func(r *rig) error {
		a := newAlarmRig(r)
		if err := a.create("k", "A"); err != nil {
			return err
		}
		h, err := a.host("A", r.handle(nil), nil)
		if err != nil {
			return err
		}
		defer h.Stop(r.Ctx)
		unit, tries := time.Second, 1
		if r.Real() {
			// On a real clock the disarm must be stepped before the
			// cancelled alarm's due time, which a loaded machine may miss:
			// an alarm that rang first was not cancelled in time, so the
			// round says nothing and is tried again with a longer unit.
			unit, tries = 200*time.Millisecond, 4
		}
		c := a.client()
		var early []string // alarms whose disarm came after they rang
		for try := 0; ; try++ {
			key := fmt.Sprintf("cancelled-%d", try)
			if _, err := a.arm(c, "k", key, 2*unit); err != nil {
				return err
			}
			if _, err := c.Send(r.Ctx, "k", Disarm{Key: key}, "disarm-"+key); err != nil {
				return err
			}
			if err := r.drained("k"); err != nil {
				return err
			}
			s, err := a.state("k")
			if err != nil {
				return err
			}
			if !slices.Contains(s.Rang, key) {
				break
			}
			early = append(early, key)
			if try+1 >= tries {
				return fmt.Errorf("%s rang before its disarm was stepped in each of %d tries", key, tries)
			}
			unit *= 4
		}
		due, err := a.arm(c, "k", "kept", 4*unit)
		if err != nil {
			return err
		}
		// The kept alarm rings after the cancelled one's due time.
		if err := a.rang("k", append(early, "kept")...); err != nil {
			return err
		}
		if len(early) == 0 { // firedAt wants the world's one firing
			if err := a.firedAt("k", due, due); err != nil {
				return err
			}
		}
		if evs := a.timerFired("k"); len(evs) != len(early)+1 {
			return fmt.Errorf("%d EvTimerFired, want the kept alarm's alone (and %d of rounds that came too late)", len(evs), len(early))
		}
		if s, err := a.state("k"); err != nil || len(s.Armed) != 1 || s.Armed[0].Key != "kept" {
			return fmt.Errorf("state %+v, %v", s, err)
		}
		return nil
	})
}

// TestPassivatedWorldIsWokenByItsTimer: a world that passivated keeps its
// timer in its host's schedule; at the due time the host fires it, the
// firing wakes the world (a fresh process restores it), and the process
// steps the firing the host handed it without reading its inbox first. A
// world whose timers the host knows is not listed again on that restore.
func TestPassivatedWorldIsWokenByItsTimer(t *testing.T) {
	forEachBackend(t, 43, "held-passive", func(r *rig) error {
		a := newAlarmRig(r)
		if err := a.create("p", "A"); err != nil {
			return err
		}
		var mu sync.Mutex
		calls := map[string]int{}
		var readsAtFire, readsAtStep = -1, -1
		st := r.handle(func(op string) error {
			mu.Lock()
			calls[op]++
			mu.Unlock()
			return nil
		})
		var timerHeight uint64
		h, err := a.host("A", st, func(c *plane.HostConfig) {
			c.IdleAfter = 200 * time.Millisecond
			c.Observe = func(ev plane.HostEvent) {
				a.observe(ev)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case ev.Kind == plane.EvTimerFired:
					readsAtFire, timerHeight = calls["read_inbox"], 3
				case ev.Kind == plane.EvStep && ev.Height == timerHeight && readsAtStep < 0:
					readsAtStep = calls["read_inbox"]
				}
			}
		})
		if err != nil {
			return err
		}
		defer h.Stop(r.Ctx)
		c := a.client()
		after := 5 * time.Second
		if r.Real() {
			after = 3 * time.Second
		}
		// Height 1: the nudge; height 2: the alarm; height 3: its firing.
		if _, err := c.Send(r.Ctx, "p", Nudge{}, "nudge"); err != nil {
			return err
		}
		due, err := a.arm(c, "p", "x", after)
		if err != nil {
			return err
		}
		if err := r.WaitFor("p passivated", 10*time.Second, func() (bool, error) {
			_, active := h.Worlds()
			return active == 0 && len(a.seen(plane.EvPassivate, "p")) > 0, nil
		}); err != nil {
			return err
		}
		mu.Lock()
		listsBefore := calls["list_timers"]
		mu.Unlock()
		if err := a.rang("p", "x"); err != nil {
			return err
		}
		if err := a.firedAt("p", due, due); err != nil {
			return err
		}
		a.mu.Lock()
		evs := slices.Clone(a.events)
		a.mu.Unlock()
		// The firing's step (height 3) was a fresh process's, which
		// restored the world after its last passivation and was started
		// by a wake: the world was passive when its timer fired, and the
		// firing woke it. (EvTimerFired, EvWake and the new process's
		// events may interleave: the store's own hint wakes it too.)
		step := slices.IndexFunc(evs, func(ev plane.HostEvent) bool { return ev.Kind == plane.EvStep && ev.Height == 3 })
		fired := slices.IndexFunc(evs, func(ev plane.HostEvent) bool { return ev.Kind == plane.EvTimerFired })
		if step < 0 || fired < 0 {
			return fmt.Errorf("events: the firing's step at %d, EvTimerFired at %d", step, fired)
		}
		passivated := -1
		for i, ev := range evs[:step] {
			if ev.Kind == plane.EvPassivate {
				passivated = i
			}
		}
		if passivated < 0 || !slices.ContainsFunc(evs[passivated:step], func(ev plane.HostEvent) bool { return ev.Kind == plane.EvRestored }) ||
			!slices.ContainsFunc(evs[passivated:], func(ev plane.HostEvent) bool { return ev.Kind == plane.EvWake }) {
			return fmt.Errorf("events: last passivation at %d before the firing's step at %d, then no restore and wake: %v", passivated, step, evs)
		}
		mu.Lock()
		defer mu.Unlock()
		// Under the lab the order is the seed's: the host hands the
		// firing over before the process that its hint starts gets to
		// read. (A real scheduler may let the store's own hint win that
		// race; the process then reads, which is only slower.)
		if !r.Real() && readsAtStep != readsAtFire {
			return fmt.Errorf("%d inbox reads between the firing and its step, want none", readsAtStep-readsAtFire)
		}
		if n := calls["list_timers"]; n != listsBefore {
			return fmt.Errorf("the wake listed the world's timers %d times; the host knew them", n-listsBefore)
		}
		return nil
	})
}

// armThenMoveToB creates world id on a host of worker A, arms its alarm
// "x" (due 6s on, 1.5s on a real store), then crashes A, lets A's lease
// run out and assigns id to B, and returns the alarm's due time and B's
// host once B holds id (the caller stops it). No timer worker runs.
func (a *alarmRig) armThenMoveToB(id string) (time.Time, *plane.Host, error) {
	r := a.rig
	if err := a.create(id, "A"); err != nil {
		return time.Time{}, nil, err
	}
	stA := r.handle(nil)
	hA, err := a.host("A", stA, nil)
	if err != nil {
		return time.Time{}, nil, err
	}
	after := 6 * time.Second
	if r.Real() {
		after = 1500 * time.Millisecond
	}
	due, err := a.arm(a.client(), id, "x", after)
	if err != nil {
		return time.Time{}, nil, err
	}
	stA.Crash()
	hA.Kill(r.Ctx)
	if err := r.Advance(r.hostConfig("A", nil, nil).LeaseTTL); err != nil {
		return time.Time{}, nil, err
	}
	if err := r.Store.Assign(r.Ctx, id, store.Assignment{DesiredWorker: "B"}, nil); err != nil {
		return time.Time{}, nil, err
	}
	hB, err := a.host("B", r.handle(nil), nil)
	if err != nil {
		return time.Time{}, nil, err
	}
	if err := r.WaitFor("B holds "+id, 10*time.Second, func() (bool, error) {
		_, ok := hB.Lease(id)
		return ok, nil
	}); err != nil {
		hB.Stop(r.Ctx)
		return time.Time{}, nil, err
	}
	return due, hB, nil
}

// TestRestoredWorldFiresTimersSetBeforeARestart: the host that set a
// timer dies; the world's next host, once it restores the world (here on
// new input), learns the timer's due time from the store and fires it
// then, with no timer worker running.
func TestRestoredWorldFiresTimersSetBeforeARestart(t *testing.T) {
	forEachBackend(t, 44, "held-restore", func(r *rig) error {
		a := newAlarmRig(r)
		due, hB, err := a.armThenMoveToB("r")
		if err != nil {
			return err
		}
		defer hB.Stop(r.Ctx)
		if _, err := a.client().Send(r.Ctx, "r", Nudge{}, "nudge"); err != nil {
			return err
		}
		if err := a.rang("r", "x"); err != nil {
			return err
		}
		if err := a.firedAt("r", due, due); err != nil {
			return err
		}
		if evs := a.timerFired("r"); len(evs) != 1 || evs[0].Epoch != 2 {
			return fmt.Errorf("EvTimerFired %+v, want one by B at epoch 2", evs)
		}
		return nil
	})
}

// TestTakenOverPassiveWorldWakesAtItsTimer: a host that takes a world
// over learns from the acquisition when the world's earliest timer is due
// (AcquireResult.NextTimer), leaves the world passive (no input is
// waiting) and wakes it then: the world restores, learns its timers and
// fires this one, at its due time under the lab, with no input and no
// timer worker. Before, only the timer worker fired it, its Lag late.
func TestTakenOverPassiveWorldWakesAtItsTimer(t *testing.T) {
	forEachBackend(t, 47, "held-takeover-wake", func(r *rig) (err error) {
		a := newAlarmRig(r)
		defer a.explain(&err)
		due, hB, err := a.armThenMoveToB("p")
		if err != nil {
			return err
		}
		defer hB.Stop(r.Ctx)
		if !r.Real() {
			// Taken over before the timer is due, and left passive.
			if _, active := hB.Worlds(); active != 0 {
				return fmt.Errorf("B runs %d worlds before p's timer is due, want p passive", active)
			}
		}
		if err := a.rang("p", "x"); err != nil {
			return err
		}
		if err := a.firedAt("p", due, due); err != nil {
			return err
		}
		if evs := a.timerFired("p"); len(evs) != 1 || evs[0].Epoch != 2 {
			return fmt.Errorf("EvTimerFired %+v, want one by B at epoch 2", evs)
		}
		return nil
	})
}

// runTimerWorker runs a timer worker over st in a scope of its own until
// the returned stop is called.
func runTimerWorker(r *rig, st timer.Store, cfg timer.Config) (*timer.Worker, func(), error) {
	cfg.Executor = r.Ex
	w, err := timer.New(st, cfg)
	if err != nil {
		return nil, nil, err
	}
	sc, err := r.Root.Sub("timers:" + cfg.Worker)
	if err != nil {
		return nil, nil, err
	}
	if _, err := sc.Go("timer-worker", w.Run); err != nil {
		return nil, nil, err
	}
	return w, func() { _, _ = sc.CloseKilled(r.Ctx) }, nil
}

// TestHostAndTimerWorkerRaceToFireOnce: a timer worker with no Lag and
// the world's host both fire the same timer. Whichever order the store
// sees (the worker's claim, then the host's firing, then the worker's
// Fire; or the worker's Fire, then the host's), the firing is delivered
// once: the handler runs once and the journal has one firing, stepped ok.
func TestHostAndTimerWorkerRaceToFireOnce(t *testing.T) {
	for _, hostFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("host first ", hostFirst), func(t *testing.T) {
			forEachBackend(t, 45, "held-race", func(r *rig) error {
				a := newAlarmRig(r)
				if err := a.create("x", "A"); err != nil {
					return err
				}
				var worker *timer.Worker
				wait := func(what string, cond func() (bool, error)) error {
					return r.WaitFor(what, 10*time.Second, cond)
				}
				// Each side's hook holds its firing until the other side
				// has done its part, so each order happens as named.
				hostHook := func(op string) error {
					if op != "fire_held" {
						return nil
					}
					if hostFirst {
						return wait("the worker's claim", func() (bool, error) {
							ts, err := r.Store.ListTimers(r.Ctx, "x", 10)
							return len(ts) == 1 && ts[0].State == store.TimerClaimed, err
						})
					}
					return wait("the worker's firing", func() (bool, error) { return worker.Stats().Fired == 1, nil })
				}
				workerHook := func(op string) error {
					if op != "fire" || !hostFirst {
						return nil
					}
					return wait("the host's firing", func() (bool, error) { return len(a.seen(plane.EvTimerFired, "x")) == 1, nil })
				}
				w, stop, err := runTimerWorker(r, r.handle(workerHook), timer.Config{Worker: "timers"})
				if err != nil {
					return err
				}
				defer stop()
				worker = w
				// Through the inbox: the race is FireHeld's against Fire.
				h, err := a.host("A", r.handle(hostHook), func(c *plane.HostConfig) { c.TimersThroughInbox = true })
				if err != nil {
					return err
				}
				defer h.Stop(r.Ctx)
				after := 2 * time.Second
				if r.Real() {
					after = 300 * time.Millisecond
				}
				if _, err := a.arm(a.client(), "x", "x", after); err != nil {
					return err
				}
				if err := a.rang("x", "x"); err != nil {
					return err
				}
				if err := r.drained("x"); err != nil {
					return err
				}
				if err := wait("the worker's answer", func() (bool, error) {
					st := worker.Stats()
					return st.Fired+st.Duplicates == 1, nil
				}); err != nil {
					return err
				}
				fs, err := a.firings("x")
				if err != nil || len(fs) != 1 {
					return fmt.Errorf("firings %+v (%v), want one", fs, err)
				}
				steps, err := a.timerSteps("x")
				if err != nil || !slices.Equal(steps, []string{string(world.OutcomeOK)}) {
					return fmt.Errorf("journaled firings %v (%v), want one ok", steps, err)
				}
				st, byHost := w.Stats(), len(a.seen(plane.EvTimerFired, "x"))
				if hostFirst && (byHost != 1 || st.Fired != 0 || st.Duplicates != 1) ||
					!hostFirst && (byHost != 0 || st.Fired != 1 || st.Duplicates != 0) {
					return fmt.Errorf("host fired %d, worker %+v", byHost, st)
				}
				return nil
			})
		})
	}
}

// TestTimerWorkerFiresADeadHostsTimerAfterLag: the host that holds a world
// dies before the world's timer is due; the timer worker, lagging by
// Lag, fires it exactly Lag after its due time (virtual time), not
// before, and the world's next host applies it once.
func TestTimerWorkerFiresADeadHostsTimerAfterLag(t *testing.T) {
	const lag = 1500 * time.Millisecond
	runOn(t, "memstore", lab.Config{Seed: 46, Name: "held-dead"}, func(r *rig) error {
		a := newAlarmRig(r)
		if err := a.create("d", "A"); err != nil {
			return err
		}
		stA := r.handle(nil)
		hA, err := a.host("A", stA, nil)
		if err != nil {
			return err
		}
		_, stop, err := runTimerWorker(r, r.handle(nil), timer.Config{Worker: "timers", Lag: lag})
		if err != nil {
			return err
		}
		defer stop()
		due, err := a.arm(a.client(), "d", "x", 3*time.Second)
		if err != nil {
			return err
		}
		stA.Crash()
		hA.Kill(r.Ctx)
		if err := actor.Sleep(r.Ctx, r.Ex, due.Add(lag-time.Nanosecond).Sub(r.Ex.Now())); err != nil {
			return err
		}
		if fs, err := a.firings("d"); err != nil || len(fs) != 0 {
			return fmt.Errorf("firings a nanosecond before due+Lag: %+v, %v", fs, err)
		}
		if err := r.WaitFor("the worker's firing", time.Second, func() (bool, error) {
			fs, err := a.firings("d")
			return len(fs) == 1, err
		}); err != nil {
			return err
		}
		if fs, err := a.firings("d"); err != nil || len(fs) != 1 || !fs[0].EnqueuedAt.Equal(due.Add(lag)) {
			return fmt.Errorf("firings in the inbox %+v (%v), want one at due+Lag %v", fs, err, due.Add(lag))
		}
		if err := r.Store.Assign(r.Ctx, "d", store.Assignment{DesiredWorker: "B"}, nil); err != nil {
			return err
		}
		hB, err := a.host("B", r.handle(nil), nil)
		if err != nil {
			return err
		}
		defer hB.Stop(r.Ctx)
		if err := a.rang("d", "x"); err != nil {
			return err
		}
		if evs := a.seen(plane.EvTimerFired, ""); len(evs) != 0 {
			return fmt.Errorf("a host fired %+v; the dead host's timer is the worker's", evs)
		}
		return nil
	})
}

// TestTimersDueTogetherFireOnceAcrossCycles: a running world with more
// timers due at one instant than a cycle may step has them handed to its
// process together; the cycle's budget steps some, the rest go back and
// the next cycles step them, each once, directly (no inbox item), in the
// order the schedule hands them out, at their due time (under the lab to
// the nanosecond).
func TestTimersDueTogetherFireOnceAcrossCycles(t *testing.T) {
	forEachBackend(t, 47, "held-together", func(r *rig) (err error) {
		a := newAlarmRig(r)
		defer a.explain(&err)
		if err := a.create("m", "A"); err != nil {
			return err
		}
		h, err := a.host("A", r.handle(nil), func(c *plane.HostConfig) {
			c.IdleAfter, c.MaxTickStepsPerCycle = -1, 2
		})
		if err != nil {
			return err
		}
		defer h.Stop(r.Ctx)
		after := 2 * time.Second
		if r.Real() {
			after = 400 * time.Millisecond
		}
		c := a.client()
		keys := []string{"a", "b", "c", "d", "e"}
		for _, k := range keys {
			if _, err := c.Send(r.Ctx, "m", SetAlarm{Key: k, AfterMs: after.Milliseconds()}, "set-"+k); err != nil {
				return err
			}
		}
		if err := r.drained("m"); err != nil {
			return err
		}
		s, err := a.state("m")
		if err != nil || len(s.Armed) != len(keys) {
			return fmt.Errorf("armed %+v (%v), want %d alarms", s.Armed, err, len(keys))
		}
		// The due times from the inputs (each SetAlarm's enqueue time, its
		// handler's Now, plus after): on a loaded machine the first timers
		// may have fired, and left the queue, by now.
		items, err := r.Store.ReadInbox(r.Ctx, "m", 0, 0)
		if err != nil {
			return err
		}
		var latest time.Time
		for _, it := range items {
			if strings.HasPrefix(it.DedupeKey, "set-") && it.EnqueuedAt.Add(after).After(latest) {
				latest = it.EnqueuedAt.Add(after)
			}
		}
		if err := r.WaitFor("every alarm rang", 20*time.Second, func() (bool, error) {
			s, err := a.state("m")
			return len(s.Rang) == len(keys), err
		}); err != nil {
			return err
		}
		s, err = a.state("m")
		if err != nil {
			return err
		}
		if got := slices.Sorted(slices.Values(s.Rang)); !slices.Equal(got, keys) {
			return fmt.Errorf("rang %v, want each of %v once", s.Rang, keys)
		}
		fs, err := a.journaledFirings("m")
		if err != nil || len(fs) != len(keys) {
			return fmt.Errorf("journaled firings %+v (%v), want %d", fs, err, len(keys))
		}
		for _, f := range fs {
			if f.Seq != 0 || f.Outcome != string(world.OutcomeOK) {
				return fmt.Errorf("firing %+v, want each stepped directly and ok", f)
			}
			if !r.Real() && !f.EnqueuedAt.Equal(latest) {
				return fmt.Errorf("fired at %v, want the due time %v", f.EnqueuedAt, latest)
			}
		}
		// The host reports a commit after it returns, so the store can
		// show the last firings before their commit's event is observed.
		steps := 0
		if err := r.WaitFor("every commit observed", 5*time.Second, func() (bool, error) {
			steps = 0
			for _, ev := range a.seen(plane.EvCommit, "m") {
				if ev.N > 2 {
					return false, fmt.Errorf("a commit of %d steps, over the budget of 2", ev.N)
				}
				steps += ev.N
			}
			return steps >= 2*len(keys), nil
		}); err != nil {
			return err
		}
		if steps != 2*len(keys) {
			return fmt.Errorf("%d steps committed, want %d arming and %d firings", steps, len(keys), len(keys))
		}
		if in, err := a.firings("m"); err != nil || len(in) != 0 {
			return fmt.Errorf("firings in the inbox %+v (%v), want none", in, err)
		}
		return nil
	})
}

// TestInputHintedBeforeAFiringIsSteppedFirst: a due timer handed to a
// world's process while an input the host had been told of waits in its
// inbox (the process was busy committing) is stepped after that input, in
// the same cycle; the journal keeps the order in which things arrived.
func TestInputHintedBeforeAFiringIsSteppedFirst(t *testing.T) {
	runOn(t, "memstore", lab.Config{Seed: 48, Name: "held-order"}, func(r *rig) (err error) {
		a := newAlarmRig(r)
		defer a.explain(&err)
		if err := a.create("o", "A"); err != nil {
			return err
		}
		var slow atomic.Bool
		hook := func(op string) error {
			if op == "commit" && slow.CompareAndSwap(true, false) {
				// The cycle of the first nudge commits across the due time.
				_ = actor.Sleep(r.Ctx, r.Ex, 200*time.Millisecond)
			}
			return nil
		}
		h, err := a.host("A", r.handle(hook), func(c *plane.HostConfig) { c.IdleAfter = -1 })
		if err != nil {
			return err
		}
		defer h.Stop(r.Ctx)
		c := a.client()
		due, err := a.arm(c, "o", "x", 2*time.Second)
		if err != nil {
			return err
		}
		if err := actor.Sleep(r.Ctx, r.Ex, due.Add(-100*time.Millisecond).Sub(r.Ex.Now())); err != nil {
			return err
		}
		slow.Store(true)
		if _, err := c.Send(r.Ctx, "o", Nudge{}, "nudge-1"); err != nil {
			return err
		}
		if err := actor.Sleep(r.Ctx, r.Ex, 50*time.Millisecond); err != nil {
			return err
		}
		if _, err := c.Send(r.Ctx, "o", Nudge{}, "nudge-2"); err != nil {
			return err
		}
		if err := a.rang("o", "x"); err != nil {
			return err
		}
		if err := r.drained("o"); err != nil {
			return err
		}
		journal, err := plane.ReadTail(r.Ctx, r.Store, "o", 0)
		if err != nil {
			return err
		}
		var order []string
		for _, e := range journal {
			in, err := world.RecordInput(e)
			if err != nil {
				return err
			}
			order = append(order, fmt.Sprintf("%s/%d", in.Kind, in.Seq))
		}
		// set-x, nudge-1 and nudge-2 are inbox seqs 1–3; the firing is
		// stepped directly (seq 0) after nudge-2, which arrived before it.
		if want := []string{"event/1", "event/2", "event/3", "timer/0"}; !slices.Equal(order, want) {
			return fmt.Errorf("journal order %v, want %v", order, want)
		}
		fs, err := a.journaledFirings("o")
		if err != nil || len(fs) != 1 || fs[0].EnqueuedAt.Before(due) {
			return fmt.Errorf("firings %+v (%v), want one at or after %v", fs, err, due)
		}
		return nil
	})
}
