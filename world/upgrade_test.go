package world_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Two versions of one world with different state types: v1 counts in an
// int, v2 keeps the count as a string and a label.
type acctV1 struct{ N int }
type acctV2 struct {
	Total string
	Label string
}

type Bump struct{ By int }

func (Bump) WorldType() string { return "acct/Bump" }

type Arm struct{}

func (Arm) WorldType() string { return "acct/Arm" }

func acctDefs(t *testing.T, fail error, panics bool) (*world.Def[acctV1], *world.Def[acctV2], world.Kernel) {
	t.Helper()
	v1 := world.New[acctV1]("acct", 1)
	world.On(v1, func(c *world.Ctx, s *acctV1, m Bump) error { s.N += m.By; return nil })
	world.On(v1, func(c *world.Ctx, s *acctV1, m Arm) error {
		// Something of the kernel's own to carry over: an awaited
		// effect and an armed timer.
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://example.com/"})
		c.SetTimer(c.Now().Add(time.Hour), Bump{By: 1})
		return nil
	})
	v2 := world.New[acctV2]("acct", 2)
	world.On(v2, func(c *world.Ctx, s *acctV2, m Bump) error {
		s.Total += strings.Repeat("|", m.By)
		return nil
	})
	world.On(v2, func(c *world.Ctx, s *acctV2, m Arm) error { return nil })
	k := world.Versions(world.Upgrade(v1, v2, func(s acctV1) (acctV2, error) {
		if panics {
			panic("boom")
		}
		if fail != nil {
			return acctV2{}, fail
		}
		return acctV2{Total: strings.Repeat("|", s.N), Label: "migrated"}, nil
	}))
	if err := k.Err(); err != nil {
		t.Fatalf("Versions: %v", err)
	}
	return v1, v2, k
}

// driver steps an Instance as the plane does and keeps its records.
type driver struct {
	t       *testing.T
	inst    world.Instance
	seq     uint64
	records []event.Envelope
}

func (d *driver) step(kind string, payload []byte) world.StepResult {
	d.t.Helper()
	d.seq++
	at := t0.Add(time.Duration(d.seq) * time.Second)
	res, err := d.inst.Step(world.Input{Seq: d.seq, Kind: kind, Payload: payload, EnqueuedAt: at}, at)
	if err != nil {
		d.t.Fatalf("Step(seq %d): %v", d.seq, err)
	}
	d.records = append(d.records, res.Record)
	return res
}

func (d *driver) event(v any) world.StepResult {
	d.t.Helper()
	return d.step(vocab.KindEvent, mustEvent(d.t, v))
}

func (d *driver) upgrade(to uint64) world.StepResult {
	d.t.Helper()
	b, err := world.EncodeUpgrade(to)
	if err != nil {
		d.t.Fatal(err)
	}
	return d.step(vocab.KindUpgrade, b)
}

// driverOn drives a new world id of def alone.
func driverOn[S any](t *testing.T, def *world.Def[S], id string) (*driver, *world.World[S]) {
	t.Helper()
	w, err := world.Load(def, id, world.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	return &driver{t: t, inst: w}, w
}

func version(t *testing.T, inst world.Instance) uint64 {
	t.Helper()
	v, ok := inst.(interface{ Version() uint64 })
	if !ok {
		t.Fatalf("%T has no Version", inst)
	}
	return v.Version()
}

func TestUpgradeMigratesUserStateAndKeepsBookkeeping(t *testing.T) {
	_, _, k := acctDefs(t, nil, false)
	fresh, err := k.Replay("a1", world.Snapshot{}, nil)
	if err != nil || version(t, fresh) != 2 {
		t.Fatalf("a world with no records: %v", err)
	}
	// A world with no records starts on the newest version: to test an
	// upgrade, start one on v1 by replaying a v1 record.
	v1only, _, _ := acctDefs(t, nil, false)
	w1, err := world.Load(v1only, "a1", world.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	first, err := w1.Step(world.Input{Seq: 1, Kind: vocab.KindEvent, Payload: mustEvent(t, Bump{By: 3}), EnqueuedAt: at}, at)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := k.Replay("a1", world.Snapshot{}, []event.Envelope{first.Record})
	if err != nil {
		t.Fatalf("replay of a v1 record: %v", err)
	}
	if got := version(t, inst); got != 1 {
		t.Fatalf("version after a v1 record = %d, want 1", got)
	}
	d := &driver{t: t, inst: inst, seq: 1, records: []event.Envelope{first.Record}}
	d.event(Arm{})
	awaiting, timers := inst.Awaiting(), inst.Timers()
	if len(awaiting) != 1 || len(timers) != 1 {
		t.Fatalf("before: awaiting %v timers %v", awaiting, timers)
	}

	res := d.upgrade(2)
	if res.Outcome != world.OutcomeOK || res.Err != nil {
		t.Fatalf("upgrade: %s %v", res.Outcome, res.Err)
	}
	if res.Record.EventType != world.EventWorldUpgraded || res.Record.PlanVersion != 2 || res.Record.StepID != world.StepID(3) {
		t.Fatalf("record: %s v%d %s", res.Record.EventType, res.Record.PlanVersion, res.Record.StepID)
	}
	u, err := world.RecordUpgraded(res.Record)
	if err != nil || u.From != 1 || u.To != 2 || u.StateHash != res.StateHash || res.StateHash != world.Hash(res.State) {
		t.Fatalf("RecordUpgraded = %+v, %v (state hash %s)", u, err, res.StateHash)
	}
	if got := version(t, inst); got != 2 {
		t.Fatalf("version after the upgrade = %d", got)
	}
	if world.StateVersion(inst.State()) != 2 {
		t.Fatalf("StateVersion = %d, want 2", world.StateVersion(inst.State()))
	}
	if a, tm := inst.Awaiting(), inst.Timers(); len(a) != 1 || a[0] != awaiting[0] || len(tm) != 1 || tm[0] != timers[0] {
		t.Fatalf("bookkeeping changed: awaiting %v timers %v, was %v %v", a, tm, awaiting, timers)
	}
	// The migrated state, and v2's handler on it.
	d.event(Bump{By: 2})
	_, v2, _ := acctDefs(t, nil, false)
	w2, err := world.Load(v2, "a1", inst.Snapshot())
	if err != nil {
		t.Fatalf("v2 loads the upgraded state: %v", err)
	}
	if s, _ := w2.Value(); s.Total != "|||||" || s.Label != "migrated" {
		t.Fatalf("state = %+v", s)
	}
	// A v1 definition alone refuses the v2 state.
	if _, err := world.Load(v1only, "a1", inst.Snapshot()); !errors.Is(err, world.ErrVersionNotCarried) {
		t.Fatalf("v1 loading a v2 state: %v, want ErrVersionNotCarried", err)
	}
}

// acctJournal is a journal written under v1, upgraded, then under v2, and
// the instance that wrote it.
func acctJournal(t *testing.T, k world.Kernel) *driver {
	t.Helper()
	v1, _, _ := acctDefs(t, nil, false)
	d, _ := driverOn(t, v1, "j")
	d.event(Bump{By: 1})
	d.event(Bump{By: 2})
	inst, err := k.Replay("j", world.Snapshot{}, d.records)
	if err != nil {
		t.Fatal(err)
	}
	d.inst = inst
	d.upgrade(2)
	d.event(Bump{By: 4})
	d.event(Arm{})
	return d
}

func TestReplayUsesTheVersionThatWroteEachRecord(t *testing.T) {
	_, _, k := acctDefs(t, nil, false)
	d := acctJournal(t, k)
	want := d.inst.StateHash()

	// The whole journal from the empty state: v1 records by v1, the
	// upgrade, v2 records by v2; never a divergence.
	got, err := k.Replay("j", world.Snapshot{}, d.records)
	if err != nil {
		t.Fatalf("replay of a mixed journal: %v", err)
	}
	if got.StateHash() != want || version(t, got) != 2 {
		t.Fatalf("replayed %s v%d, want %s v2", got.StateHash(), version(t, got), want)
	}
	// Below the upgrade (state at a past height, a fork point): v1.
	below, err := k.Replay("j", world.Snapshot{}, d.records[:2])
	if err != nil || version(t, below) != 1 {
		t.Fatalf("below the upgrade: %v (version %d)", err, version(t, below))
	}
	// From the snapshot at the upgrade's height, as a takeover restores:
	// v2, with only v2 records after it.
	at, err := k.Replay("j", world.Snapshot{}, d.records[:3])
	if err != nil {
		t.Fatal(err)
	}
	from, err := k.Replay("j", at.Snapshot(), d.records[3:])
	if err != nil || from.StateHash() != want || version(t, from) != 2 {
		t.Fatalf("from the upgrade snapshot: %v", err)
	}
	// With no tail, the snapshot alone says its version.
	if l, err := k.Load("j", at.Snapshot()); err != nil || version(t, l) != 2 {
		t.Fatalf("Load of the upgrade snapshot: %v", err)
	}
	// v2 alone cannot replay v1's records: that is what replay by the
	// writing version prevents (the version reason names it).
	_, v2, _ := acctDefs(t, nil, false)
	var de *world.DivergenceError
	if _, err := world.Replay(v2, "j", world.Snapshot{}, d.records); !errors.As(err, &de) || de.Reason != world.ReasonVersion {
		t.Fatalf("v2 alone on v1 records: %v", err)
	}
	// v2 alone replays from the upgrade's snapshot: v1 can be removed.
	if w, err := world.Replay(v2, "j", at.Snapshot(), d.records[3:]); err != nil || w.StateHash() != want {
		t.Fatalf("v2 alone from the upgrade snapshot: %v", err)
	}
	// An upgrade record whose migrated state the code no longer makes is
	// a divergence (state), not a silent change.
	_, _, k2 := acctDefs(t, errors.New("changed its mind"), false)
	if _, err := k2.Replay("j", world.Snapshot{}, d.records); !errors.As(err, &de) || de.Height != 3 {
		t.Fatalf("replay with another upgrade function: %v", err)
	}
}

func TestFailingUpgradeLeavesTheWorldServingOnItsVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    error
		panics  bool
		outcome world.Outcome
	}{
		{"error", errors.New("cannot migrate"), false, world.OutcomeError},
		{"panic", nil, true, world.OutcomePanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v1, _, k := acctDefs(t, tc.fail, tc.panics)
			w1, _ := world.Load(v1, "f", world.Snapshot{})
			d := &driver{t: t, inst: w1}
			d.event(Bump{By: 2})
			inst, err := k.Replay("f", world.Snapshot{}, d.records)
			if err != nil {
				t.Fatal(err)
			}
			d.inst = inst
			before := inst.StateHash()
			res := d.upgrade(2)
			if res.Outcome != tc.outcome || !errors.Is(res.Err, world.ErrUpgrade) {
				t.Fatalf("upgrade: %s %v", res.Outcome, res.Err)
			}
			if res.Record.PlanVersion != 1 || res.StateHash != before || version(t, inst) != 1 {
				t.Fatalf("after a failed upgrade: record v%d, state %s (was %s), version %d", res.Record.PlanVersion, res.StateHash, before, version(t, inst))
			}
			if u, _ := world.RecordUpgraded(res.Record); u.Error == "" || u.To != 2 || u.From != 1 {
				t.Fatalf("the record does not say why: %+v", u)
			}
			// Still serving on v1.
			if r := d.event(Bump{By: 1}); r.Outcome != world.OutcomeOK || r.Record.PlanVersion != 1 {
				t.Fatalf("v1 after the failure: %s v%d", r.Outcome, r.Record.PlanVersion)
			}
			if _, err := k.Replay("f", world.Snapshot{}, d.records); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
}

func TestUpgradeNoopDowngradeAndMissingVersion(t *testing.T) {
	_, _, k := acctDefs(t, nil, false)
	inst, err := k.Load("n", world.Snapshot{}) // a new world: the newest version
	if err != nil {
		t.Fatal(err)
	}
	if version(t, inst) != 2 || world.StateVersion(inst.State()) != 2 {
		t.Fatalf("new world on v%d, state stamped %d", version(t, inst), world.StateVersion(inst.State()))
	}
	d := &driver{t: t, inst: inst}
	d.event(Bump{By: 1})
	before := inst.StateHash()
	if r := d.upgrade(2); r.Outcome != world.OutcomeOK || r.StateHash != before || r.Record.PlanVersion != 2 {
		t.Fatalf("to the version it has: %s %v, state %s (was %s)", r.Outcome, r.Err, r.StateHash, before)
	}
	if r := d.upgrade(1); r.Outcome != world.OutcomeError || !errors.Is(r.Err, world.ErrDowngrade) || r.StateHash != before {
		t.Fatalf("downgrade: %s %v", r.Outcome, r.Err)
	}
	if r := d.upgrade(3); r.Outcome != world.OutcomeError || !errors.Is(r.Err, world.ErrVersionNotCarried) || version(t, inst) != 2 {
		t.Fatalf("to a version not carried: %s %v", r.Outcome, r.Err)
	}
	if r := d.step(vocab.KindUpgrade, []byte{0xff}); r.Outcome != world.OutcomeError || !errors.Is(r.Err, world.ErrMalformedInput) {
		t.Fatalf("a malformed request: %s %v", r.Outcome, r.Err)
	}
	if _, err := k.Replay("n", world.Snapshot{}, d.records); err != nil {
		t.Fatalf("replay: %v", err)
	}
	// A single-version definition answers upgrade inputs too: to itself
	// a no-op, to another version not carried.
	v1, _, _ := acctDefs(t, nil, false)
	w, _ := world.Load(v1, "s", world.Snapshot{})
	ds := &driver{t: t, inst: w}
	if r := ds.upgrade(1); r.Outcome != world.OutcomeOK {
		t.Fatalf("v1 alone to v1: %s %v", r.Outcome, r.Err)
	}
	if r := ds.upgrade(2); !errors.Is(r.Err, world.ErrVersionNotCarried) {
		t.Fatalf("v1 alone to v2: %v", r.Err)
	}
	if _, err := world.Replay(v1, "s", world.Snapshot{}, ds.records); err != nil {
		t.Fatalf("v1 replays its own upgrade records: %v", err)
	}
}

func TestVersionsRefusesBrokenLineages(t *testing.T) {
	a1 := world.New[acctV1]("acct", 1)
	a2 := world.New[acctV2]("acct", 2)
	b2 := world.New[acctV2]("other", 2)
	up := func(acctV1) (acctV2, error) { return acctV2{}, nil }
	for name, k := range map[string]world.Kernel{
		"other world":   world.Versions(world.Upgrade(a1, b2, up)),
		"backwards":     world.Versions(world.Upgrade(world.New[acctV1]("acct", 3), a2, up)),
		"nil function":  world.Versions(world.Upgrade[acctV1, acctV2](a1, a2, nil)),
		"no migrations": world.Versions(),
	} {
		if err := k.Err(); !errors.Is(err, world.ErrInvalidDef) {
			t.Errorf("%s: Err = %v, want ErrInvalidDef", name, err)
		}
	}
	k := world.Versions(world.Upgrade(a1, a2, up))
	if got := world.KernelVersions(k); len(got) != 2 || got[0] != 1 || got[1] != 2 || k.Version() != 2 || k.Name() != "acct" {
		t.Fatalf("KernelVersions = %v, Version %d", got, k.Version())
	}
	if !world.Carries(k, 1) || world.Carries(k, 3) || !world.Carries(a1.Kernel(), 1) {
		t.Fatal("Carries")
	}
}

// A state with no version stamp was written by a binary that carried one
// definition, at whatever version that was: a lineage loads it on the
// version the journal names (Snapshot.Version), and refuses to guess when
// nothing names one, rather than run another version's handlers on it.
func TestUnstampedStateLoadsOnTheJournalsVersion(t *testing.T) {
	_, v2, k := acctDefs(t, nil, false)
	// A binary of v2 alone: its states record no version.
	d, w := driverOn(t, v2, "u")
	d.event(Bump{By: 2})
	snap := w.Snapshot()
	if world.StateVersion(snap.State) != 0 {
		t.Fatalf("a single definition's state is stamped %d; the test needs an unstamped one", world.StateVersion(snap.State))
	}

	for name, load := range map[string]func(world.Snapshot) (world.Instance, error){
		"load":   func(s world.Snapshot) (world.Instance, error) { return k.Load("u", s) },
		"replay": func(s world.Snapshot) (world.Instance, error) { return k.Replay("u", s, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := load(snap); !errors.Is(err, world.ErrVersionUnknown) || !errors.Is(err, world.ErrState) {
				t.Fatalf("an unstamped state with no version: %v, want ErrVersionUnknown", err)
			}
			told := snap
			told.Version = 2
			inst, err := load(told)
			if err != nil {
				t.Fatalf("told version 2: %v", err)
			}
			if got := version(t, inst); got != 2 {
				t.Fatalf("version = %d, want 2", got)
			}
			// v2's handler runs, on the state as v2 left it: the same
			// step the v2 binary would take.
			at := t0.Add(time.Minute)
			in := world.Input{Seq: 9, Kind: vocab.KindEvent, Payload: mustEvent(t, Bump{By: 1}), EnqueuedAt: at}
			got, err := inst.Step(in, at)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := world.Load(v2, "u", snap)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ref.Step(in, at)
			if err != nil {
				t.Fatal(err)
			}
			if got.StateHash != want.StateHash || got.Outcome != want.Outcome {
				t.Fatalf("lineage step = %s %s, v2's = %s %s", got.Outcome, got.StateHash, want.Outcome, want.StateHash)
			}
			// Its snapshot says its version, so it loads again with no
			// journal at hand.
			again, err := k.Load("u", inst.Snapshot())
			if err != nil || version(t, again) != 2 || again.StateHash() != inst.StateHash() {
				t.Fatalf("reload of its own snapshot: %v", err)
			}
		})
	}
}

// A world a binary carrying one version alone started has unstamped
// states from its first step on; a lineage replaying its journal from
// the start must begin where that binary did, not on the stamped state a
// lineage itself starts a new world with.
func TestReplayFromTheStartOfASingleVersionsJournal(t *testing.T) {
	_, v2, k := acctDefs(t, nil, false)
	d, w := driverOn(t, v2, "s")
	d.event(Bump{By: 2})
	d.event(Bump{By: 1})
	inst, err := k.Replay("s", world.Snapshot{}, d.records)
	if err != nil {
		t.Fatalf("replay of a v2-only journal: %v", err)
	}
	if version(t, inst) != 2 || inst.StateHash() != w.StateHash() {
		t.Fatalf("replayed to version %d state %s, want 2 %s", version(t, inst), inst.StateHash(), w.StateHash())
	}
	// And a lineage's own new world, stamped from the start, still
	// replays.
	fresh, err := k.Replay("n", world.Snapshot{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dn := &driver{t: t, inst: fresh}
	dn.event(Bump{By: 3})
	again, err := k.Replay("n", world.Snapshot{}, dn.records)
	if err != nil || again.StateHash() != fresh.StateHash() || world.StateVersion(again.State()) != 2 {
		t.Fatalf("replay of the lineage's own world: %v", err)
	}
}
