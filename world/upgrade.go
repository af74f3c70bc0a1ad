package world

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// EventWorldUpgraded is the event type of the journal record of an
// upgrade input (vocab.KindUpgrade): the world moved from one version of
// its definition to another, or stayed where it was and says why. Its
// planVersion is the version the world is on after the record, so the
// version of every record names the definition that replays what follows
// it.
const EventWorldUpgraded = "WorldUpgraded"

// Migration is a typed upgrade function from one version of a world
// definition to the next, made by Upgrade. Carry it in a binary with
// Versions.
type Migration interface {
	Name() string
	From() uint64
	To() uint64
	// Err is why the migration cannot run (the definitions are broken,
	// or do not name one world at two rising versions).
	Err() error
	m() *migration
}

type migration struct {
	name     string
	from, to vdef
	f        func(user []byte) ([]byte, error)
	err      error
}

func (m *migration) Name() string  { return m.name }
func (m *migration) From() uint64  { return m.from.ver() }
func (m *migration) To() uint64    { return m.to.ver() }
func (m *migration) Err() error    { return m.err }
func (m *migration) m() *migration { return m }

// Upgrade declares how a world of definition from becomes one of
// definition to: f turns the user state S1 into S2. It is pure, as a
// handler is: no clock, no I/O, the same answer for the same state. The
// kernel's own bookkeeping (the effects a world awaits, the timers it has
// armed) carries over unchanged; only S is migrated. An error or a panic
// from f fails the upgrade, and the world stays on from.
func Upgrade[S1, S2 any](from *Def[S1], to *Def[S2], f func(S1) (S2, error)) Migration {
	m := &migration{name: from.name, from: from, to: to}
	switch {
	case f == nil:
		m.err = errors.New("no upgrade function")
	case from.name != to.name:
		m.err = fmt.Errorf("%q and %q are different worlds", from.name, to.name)
	case to.version <= from.version:
		m.err = fmt.Errorf("version %d does not follow %d", to.version, from.version)
	}
	if m.err != nil {
		m.err = &DefError{Op: "Upgrade", Name: from.name, Err: m.err}
	}
	m.f = func(user []byte) ([]byte, error) {
		var s S1
		if err := from.stateDec.Unmarshal(user, &s); err != nil {
			return nil, &StateError{Reason: "state does not decode as version " + strconv.FormatUint(from.version, 10), Err: err}
		}
		s2, err := f(s)
		if err != nil {
			return nil, err
		}
		b, err := event.Marshal(&s2)
		if err != nil {
			return nil, &StateError{Reason: "upgraded state cannot be encoded", Err: err}
		}
		return b, nil
	}
	return m
}

// vdef is a definition with its state type erased, as a lineage holds it.
type vdef interface {
	Kernel() Kernel
	ver() uint64
	ready() error
	// adopt is the world id at height with the handler's state user and
	// the kernel's m, as this definition's world.
	adopt(id string, height uint64, user []byte, m meta) (versioned, error)
}

func (d *Def[S]) ver() uint64 { return d.version }

func (d *Def[S]) adopt(id string, height uint64, user []byte, m meta) (versioned, error) {
	state, err := encodeImage(user, m)
	if err != nil {
		return nil, err
	}
	return &World[S]{def: d, id: id, height: height, state: state, hash: Hash(state), user: user, meta: m}, nil
}

// versioned is a World[S] with S erased, as a lineage steps it.
type versioned interface {
	Instance
	vd() vdef
	parts() ([]byte, meta)
	replayOne(e *event.Envelope) error
	applyRaw(res StepResult, user []byte, m meta)
}

func (w *World[S]) vd() vdef                                     { return w.def }
func (w *World[S]) parts() ([]byte, meta)                        { return w.user, w.meta }
func (w *World[S]) applyRaw(res StepResult, user []byte, m meta) { w.apply(res, user, m) }

// upgradeMsg is the payload of an upgrade input.
type upgradeMsg struct {
	To uint64 `cbor:"to"`
}

// EncodeUpgrade is the payload of an input of kind vocab.KindUpgrade that
// asks a world to move to version to of its definition.
func EncodeUpgrade(to uint64) ([]byte, error) { return event.Marshal(upgradeMsg{To: to}) }

// upgradeDecode reads an upgrade request strictly, within an input's
// limits.
func upgradeDecode(b []byte, msg *upgradeMsg) error {
	dec, err := event.NewDecoder(event.DecoderOptions{MaxSize: MaxInputBytes, DisallowUnknownFields: true})
	if err != nil {
		return err
	}
	return dec.Unmarshal(b, msg)
}

// upgradeRecord is the payload of an EventWorldUpgraded record.
type upgradeRecord struct {
	V         uint64      `cbor:"v"`
	Input     recordInput `cbor:"input"`
	From      uint64      `cbor:"from"`
	To        uint64      `cbor:"to"` // the version asked for (0: the request did not decode)
	Outcome   Outcome     `cbor:"outcome"`
	Error     string      `cbor:"error,omitempty"`
	Refused   bool        `cbor:"refused,omitempty"`
	StateHash string      `cbor:"state_hash"`
}

// Upgraded is what an EventWorldUpgraded record says.
type Upgraded struct {
	From, To  uint64 // the version before, and the one asked for
	Outcome   Outcome
	Error     string // why, when Outcome is not ok
	StateHash string // the state after the record
}

// RecordUpgraded reads an EventWorldUpgraded record.
func RecordUpgraded(e event.Envelope) (Upgraded, error) {
	var r upgradeRecord
	if err := unmarshalRecord(e.Payload, &r); err != nil || r.V != recordVersion || e.EventType != EventWorldUpgraded {
		return Upgraded{}, &TailError{Height: e.RunSeq, Reason: "payload is not a world upgrade record", Err: err}
	}
	return Upgraded{From: r.From, To: r.To, Outcome: r.Outcome, Error: r.Error, StateHash: r.StateHash}, nil
}

// UpgradeError is an upgrade that did not happen: the world stays on From.
type UpgradeError struct {
	From, To uint64
	Reason   string
	Err      error // ErrVersionNotCarried, ErrDowngrade, or the upgrade function's error
}

func (e *UpgradeError) Error() string {
	msg := fmt.Sprintf("world: upgrade from version %d to %d: %s", e.From, e.To, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrUpgrade.
func (e *UpgradeError) Is(target error) bool { return target == ErrUpgrade }

func (e *UpgradeError) Unwrap() error { return e.Err }

// lineage is every version of one world a binary carries and the
// migrations between them.
type lineage struct {
	name  string
	defs  map[uint64]vdef
	vers  []uint64 // sorted
	next  map[uint64]*migration
	errs  []error
	alone bool // a single definition: no migrations
}

// Versions is a Kernel that carries several versions of one world and
// the migrations between them (Upgrade), for a binary that rolls worlds
// from one version to the next. Its Version is the newest one, the
// version a world it creates starts at; a world it restores runs the
// version its journal and state say, and moves on only by an upgrade
// input (vocab.KindUpgrade, EncodeUpgrade). Replay runs every record with
// the definition that wrote it. An upgrade to a version more than one
// step ahead runs each migration on the way, in one record.
func Versions(ms ...Migration) Kernel {
	l := &lineage{defs: map[uint64]vdef{}, next: map[uint64]*migration{}}
	for _, mi := range ms {
		if mi == nil {
			l.errs = append(l.errs, &DefError{Op: "Versions", Err: errors.New("nil migration")})
			continue
		}
		m := mi.m()
		if m.err != nil {
			l.errs = append(l.errs, m.err)
			continue
		}
		if l.name == "" {
			l.name = m.name
		}
		if m.name != l.name {
			l.errs = append(l.errs, &DefError{Op: "Versions", Name: m.name, Err: fmt.Errorf("not a version of %q", l.name)})
			continue
		}
		if _, dup := l.next[m.From()]; dup {
			l.errs = append(l.errs, &DefError{Op: "Versions", Name: m.name, Err: fmt.Errorf("two migrations from version %d", m.From())})
			continue
		}
		l.next[m.From()] = m
		for _, d := range []vdef{m.from, m.to} {
			if prev, ok := l.defs[d.ver()]; ok && prev != d {
				l.errs = append(l.errs, &DefError{Op: "Versions", Name: m.name, Err: fmt.Errorf("two definitions of version %d", d.ver())})
			}
			l.defs[d.ver()] = d
		}
	}
	if len(l.defs) == 0 {
		l.errs = append(l.errs, &DefError{Op: "Versions", Err: errors.New("no migration")})
	}
	for v := range l.defs {
		l.vers = append(l.vers, v)
	}
	slices.Sort(l.vers)
	// Every version reaches the newest: otherwise a world on it could
	// never be upgraded by this binary, which is a mistake to refuse now.
	for _, v := range l.vers[:max(len(l.vers)-1, 0)] {
		if _, ok := l.next[v]; !ok {
			l.errs = append(l.errs, &DefError{Op: "Versions", Name: l.name, Err: fmt.Errorf("no migration from version %d", v)})
		}
	}
	return l
}

func single(d vdef) *lineage {
	return &lineage{defs: map[uint64]vdef{d.ver(): d}, vers: []uint64{d.ver()}, alone: true}
}

// KernelVersions lists the versions of its world k carries, oldest first.
func KernelVersions(k Kernel) []uint64 {
	if l, ok := k.(*lineage); ok {
		return slices.Clone(l.vers)
	}
	return []uint64{k.Version()}
}

// Carries reports whether k carries version v of its world.
func Carries(k Kernel, v uint64) bool { return slices.Contains(KernelVersions(k), v) }

// StateVersion is the version recorded in a world state by the upgrade
// that made it (kept by every later step), or 0 when the state was never
// upgraded (it is of whatever version created the world) or is no world
// state.
func StateVersion(state []byte) uint64 {
	if state == nil {
		return 0
	}
	var img struct {
		Plan uint64 `cbor:"plan"`
	}
	dec, err := event.NewDecoder(event.DecoderOptions{MaxSize: len(state) + 1, MaxDepth: 1024, MaxElements: event.MaxMaxElements})
	if err != nil || dec.Unmarshal(state, &img) != nil {
		return 0
	}
	return img.Plan
}

func (l *lineage) Name() string    { return l.name }
func (l *lineage) Version() uint64 { return l.vers[len(l.vers)-1] }

func (l *lineage) Err() error {
	errs := slices.Clone(l.errs)
	for _, v := range l.vers {
		errs = append(errs, l.defs[v].Kernel().Err())
	}
	return errors.Join(errs...)
}

func (l *lineage) ready() error {
	if len(l.errs) > 0 {
		return errors.Join(l.errs...)
	}
	for _, v := range l.vers {
		if err := l.defs[v].ready(); err != nil {
			return err
		}
	}
	return nil
}

// Types lists the input types any carried version handles.
func (l *lineage) Types() []string {
	var out []string
	for _, v := range l.vers {
		out = append(out, l.defs[v].Kernel().Types()...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckInput passes an input some carried version handles: the world it
// is for may be on any of them, and one that is not handles it as it
// handles any input it has no handler for.
func (l *lineage) CheckInput(typeName string, value []byte) error {
	var first error
	for _, v := range slices.Backward(l.vers) {
		err := l.defs[v].Kernel().CheckInput(typeName, value)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// versionOf is the version a state was written by: its stamp; the newest
// version for a world with no state yet (a new world starts on it); for a
// state from before the binary carried versions side by side, the version
// its reader found in the journal (Snapshot.Version), or the only one
// this lineage carries. Anything else would be a guess: the binary that
// wrote the state may have been at any version.
func (l *lineage) versionOf(s Snapshot) (uint64, error) {
	switch {
	case StateVersion(s.State) != 0:
		return StateVersion(s.State), nil
	case s.State == nil:
		return l.Version(), nil
	case s.Version != 0:
		return s.Version, nil
	case len(l.vers) == 1:
		return l.vers[0], nil
	}
	return 0, &StateError{Reason: fmt.Sprintf("world %q at height %d: its state records no version, nothing says which of %v wrote it",
		l.name, s.Height, l.vers), Err: ErrVersionUnknown}
}

func (l *lineage) def(v uint64, height uint64) (vdef, error) {
	d, ok := l.defs[v]
	if !ok {
		return nil, &StateError{Reason: fmt.Sprintf("world %q at height %d is on version %d, which this binary does not carry (it carries %v)",
			l.name, height, v, l.vers), Err: ErrVersionNotCarried}
	}
	return d, nil
}

func (l *lineage) Load(id string, s Snapshot) (Instance, error) {
	v, err := l.versionOf(s)
	if err != nil {
		return nil, err
	}
	w, err := l.load(id, s, v)
	if err != nil {
		return nil, err
	}
	return &lineageWorld{l: l, w: w}, nil
}

func (l *lineage) load(id string, s Snapshot, v uint64) (versioned, error) {
	if err := l.ready(); err != nil {
		return nil, err
	}
	d, err := l.def(v, s.Height)
	if err != nil {
		return nil, err
	}
	inst, err := d.Kernel().Load(id, s)
	if err != nil {
		return nil, err
	}
	w := inst.(versioned)
	if s.State == nil && v != l.vers[0] {
		// A new world on a version a migration made: stamped, so that
		// every reader of its state knows which definition it is for.
		user, m := w.parts()
		m.plan = v
		return d.adopt(id, s.Height, user, m)
	}
	return w, nil
}

func (l *lineage) Replay(id string, base Snapshot, tail []event.Envelope) (Instance, error) {
	// The first record names the version it followed: a step's is its
	// own, an upgrade's the one it started from. It outranks a version
	// read elsewhere: it is the journal's word on this very state.
	var v uint64
	if len(tail) > 0 {
		switch e := tail[0]; e.EventType {
		case EventWorldStepped:
			v = e.PlanVersion
		case EventWorldUpgraded:
			if u, err := RecordUpgraded(e); err == nil {
				v = u.From
			}
		}
	}
	if v == 0 {
		var err error
		if v, err = l.versionOf(base); err != nil {
			return nil, err
		}
	}
	w, err := l.load(id, base, v)
	if err != nil {
		return nil, err
	}
	lw := &lineageWorld{l: l, w: w}
	if base.State == nil && len(tail) > 0 && w.vd().ver() != l.vers[0] {
		// A world born on a version a migration made: its first state is
		// stamped if a binary carrying versions side by side started it,
		// not if one carrying that definition alone did. The first
		// record's state hash says which; neither is a guess.
		if err := lw.replayOne(&tail[0]); err != nil {
			var de *DivergenceError
			if !errors.As(err, &de) || de.Reason != ReasonState {
				return nil, err
			}
			bare, lerr := w.vd().Kernel().Load(id, base)
			if lerr != nil {
				return nil, err
			}
			lw.w = bare.(versioned)
			if lw.replayOne(&tail[0]) != nil {
				return nil, err
			}
		}
		tail = tail[1:]
	}
	for i := range tail {
		if err := lw.replayOne(&tail[i]); err != nil {
			return nil, err
		}
	}
	return lw, nil
}

func (l *lineage) ForkState(state []byte) ([]byte, error) {
	// An unstamped state forks to the same bytes whichever version reads
	// it (the user state is carried as it is, nothing runs), so the oldest
	// is as good as the right one here; the fork's reader finds its
	// version as any reader does.
	if err := l.ready(); err != nil {
		return nil, err
	}
	v := StateVersion(state)
	if v == 0 {
		v = l.vers[0]
	}
	d, err := l.def(v, 0)
	if err != nil {
		return nil, err
	}
	return d.Kernel().ForkState(state)
}

// ForkStateAt is k.ForkState for a state that records no version but
// that its reader was told version v wrote (a seed taken with StateAt,
// whose Snapshot.Version says it): the fork records v, so that a world
// created from it, which has no journal to name its version, loads on v.
// A state that records its version, a kernel carrying one version, or v
// 0 forks as ForkState does. A version k does not carry is
// ErrVersionNotCarried.
func ForkStateAt(k Kernel, state []byte, v uint64) ([]byte, error) {
	out, err := k.ForkState(state)
	if err != nil || v == 0 || StateVersion(out) != 0 || len(KernelVersions(k)) < 2 {
		return out, err
	}
	if !Carries(k, v) {
		return nil, &StateError{Reason: fmt.Sprintf("a seed of version %d, which this binary does not carry (it carries %v)", v, KernelVersions(k)), Err: ErrVersionNotCarried}
	}
	var img image
	if err := event.Unmarshal(out, &img); err != nil {
		return nil, &StateError{Reason: "not a world state", Err: err}
	}
	img.Plan = v
	b, err := event.Marshal(img)
	if err != nil {
		return nil, &StateError{Reason: "state cannot be encoded", Err: err}
	}
	return b, nil
}

// lineageWorld is a world of a lineage: the world of the version it is
// on, replaced by an upgrade.
type lineageWorld struct {
	l *lineage
	w versioned
}

func (lw *lineageWorld) ID() string             { return lw.w.ID() }
func (lw *lineageWorld) Height() uint64         { return lw.w.Height() }
func (lw *lineageWorld) State() []byte          { return lw.w.State() }
func (lw *lineageWorld) StateHash() string      { return lw.w.StateHash() }
func (lw *lineageWorld) Snapshot() Snapshot     { return lw.snapshot() }
func (lw *lineageWorld) Awaiting() []Awaiting   { return lw.w.Awaiting() }
func (lw *lineageWorld) Timers() []string       { return lw.w.Timers() }
func (lw *lineageWorld) Armed(hash string) bool { return lw.w.Armed(hash) }

// snapshot says which version the state is of, so that loading it again
// (a parked world woken, a refused commit rolled back) needs no journal.
func (lw *lineageWorld) snapshot() Snapshot {
	s := lw.w.Snapshot()
	s.Version = lw.Version()
	return s
}

// Version is the version of the definition the world is on.
func (lw *lineageWorld) Version() uint64 { return lw.w.vd().ver() }

func (lw *lineageWorld) Step(in Input, emittedAt time.Time) (StepResult, error) {
	return lw.Prepare(in).Step(emittedAt)
}

func (lw *lineageWorld) Prepare(in Input) Prepared {
	if in.Kind != vocab.KindUpgrade {
		return lw.w.Prepare(in)
	}
	return &upgradePrep{l: lw.l, cur: &lw.w, height: lw.w.Height(), in: in}
}

func (lw *lineageWorld) Refuse(in Input, emittedAt time.Time, reason error) (StepResult, error) {
	if in.Kind != vocab.KindUpgrade {
		return lw.w.Refuse(in, emittedAt, reason)
	}
	res, next, err := lw.l.upgrade(lw.w, in, emittedAt, false, &RefusedError{Err: reason})
	if err != nil {
		return StepResult{}, err
	}
	lw.w = next
	return res, nil
}

func (lw *lineageWorld) replayOne(e *event.Envelope) error {
	if e.EventType != EventWorldUpgraded {
		return lw.w.replayOne(e)
	}
	next, err := lw.l.replayUpgrade(lw.w, e)
	if err != nil {
		return err
	}
	lw.w = next
	return nil
}

// upgradePrep is a prepared upgrade input: nothing to decode ahead.
type upgradePrep struct {
	l      *lineage
	cur    *versioned
	height uint64
	in     Input
	done   bool
}

func (p *upgradePrep) Step(emittedAt time.Time) (StepResult, error) {
	if p.done || (*p.cur).Height() != p.height {
		return StepResult{}, ErrStalePrepared
	}
	p.done = true
	res, next, err := p.l.upgrade(*p.cur, p.in, emittedAt, false, nil)
	if err != nil {
		return StepResult{}, err
	}
	*p.cur = next
	return res, nil
}

// upgrade runs an upgrade input against cur: the world on the version the
// input names (the same world when it fails or is already there), and the
// step's result.
func (l *lineage) upgrade(cur versioned, in Input, emittedAt time.Time, replaying bool, refused error) (StepResult, versioned, error) {
	d := cur.vd()
	from := d.ver()
	user, m := cur.parts()
	rin := recordInput{Seq: in.Seq, Kind: in.Kind, Payload: []byte{}}
	rec := upgradeRecord{V: recordVersion, From: from, Outcome: OutcomeOK}
	fail := func(o Outcome, err error) {
		rec.Outcome = o
		rec.Error, _ = bound(err)
	}
	var resErr error
	next, nextUser, nextMeta := cur, user, m
	var msg upgradeMsg
	if _, err := event.Marshal(event.Timestamp{Time: in.EnqueuedAt}); err != nil {
		resErr = &InputError{Seq: in.Seq, Kind: in.Kind, Reason: "enqueued_at out of range", Err: err}
	} else if canon, err := event.Canonicalize(in.Payload); err != nil || len(canon) > MaxInputBytes {
		resErr = &InputError{Seq: in.Seq, Kind: in.Kind, Reason: "not an upgrade request", Err: err}
	} else {
		rin.EnqueuedAt, rin.Payload = event.Timestamp{Time: in.EnqueuedAt}, canon
		if err := upgradeDecode(canon, &msg); err != nil || msg.To == 0 {
			resErr = &InputError{Seq: in.Seq, Kind: in.Kind, Reason: "not an upgrade request", Err: err}
		}
	}
	rec.To = msg.To
	switch {
	case resErr != nil:
	case refused != nil:
		resErr = refused
		rec.Refused = true
	case msg.To == from:
		// Already there: consumed, nothing changes.
	case msg.To < from:
		resErr = &UpgradeError{From: from, To: msg.To, Reason: "a world never goes back to an older version", Err: ErrDowngrade}
	default:
		var err error
		next, nextUser, nextMeta, err = l.migrate(cur, msg.To)
		if err != nil {
			next, nextUser, nextMeta = cur, user, m
			resErr = err
			var pe *recovered
			if errors.As(err, &pe) {
				resErr = &UpgradeError{From: from, To: msg.To, Reason: "the upgrade function panicked", Err: &PanicError{Type: "upgrade", Value: pe.value}}
				fail(OutcomePanic, resErr)
			}
		}
	}
	if resErr != nil && rec.Outcome == OutcomeOK {
		fail(OutcomeError, resErr)
	}
	if resErr != nil {
		_, resErr = bound(resErr)
	}
	h := cur.Height() + 1
	state, err := encodeImage(nextUser, nextMeta)
	if err != nil {
		return StepResult{}, nil, err
	}
	rec.Input, rec.StateHash = rin, Hash(state)
	res := StepResult{Height: h, State: state, StateHash: rec.StateHash, Outcome: rec.Outcome, Err: resErr}
	version := next.vd().ver()
	res.digest = StepDigest{Plan: l.nameOf(cur), Version: version, Outcome: rec.Outcome, StateHash: rec.StateHash}
	res.Record.StepID = StepID(in.Seq)
	if !replaying {
		payload, err := event.Marshal(rec)
		if err != nil {
			return StepResult{}, nil, &StateError{Reason: "journal record cannot be encoded", Err: err}
		}
		res.Record = event.Envelope{StreamID: cur.ID(), RunSeq: h, EventType: EventWorldUpgraded, EmittedAt: emittedAt,
			StepID: StepID(in.Seq), LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: l.nameOf(cur), PlanVersion: version, Payload: payload}
		res.Record.Normalize()
		res.Record.EventID = res.Record.IdempotencyKey
	}
	next.applyRaw(res, nextUser, nextMeta)
	return res, next, nil
}

func (l *lineage) nameOf(w versioned) string { return w.vd().Kernel().Name() }

// migrate runs the migrations from cur's version up to to, and returns the
// world on to with the migrated state.
func (l *lineage) migrate(cur versioned, to uint64) (next versioned, user []byte, m meta, err error) {
	from := cur.vd().ver()
	target, ok := l.defs[to]
	if !ok {
		return nil, nil, meta{}, &UpgradeError{From: from, To: to, Reason: fmt.Sprintf("this binary carries versions %v", l.vers), Err: ErrVersionNotCarried}
	}
	if err := target.ready(); err != nil {
		return nil, nil, meta{}, &UpgradeError{From: from, To: to, Reason: "the target definition is broken", Err: err}
	}
	user, m = cur.parts()
	for v := from; v != to; {
		mg, ok := l.next[v]
		if !ok || mg.To() > to {
			return nil, nil, meta{}, &UpgradeError{From: from, To: to, Reason: fmt.Sprintf("no migration from version %d", v), Err: ErrVersionNotCarried}
		}
		if user, err = runMigration(mg, user); err != nil {
			return nil, nil, meta{}, err
		}
		v = mg.To()
	}
	if len(user) > MaxStateBytes {
		return nil, nil, meta{}, &UpgradeError{From: from, To: to, Reason: "the upgraded state is too large",
			Err: &LimitError{What: "state", Got: len(user), Max: MaxStateBytes}}
	}
	m.plan = to
	next, err = target.adopt(cur.ID(), cur.Height(), user, m)
	if err != nil {
		return nil, nil, meta{}, &UpgradeError{From: from, To: to, Reason: "the upgraded state cannot be encoded", Err: err}
	}
	return next, user, m, nil
}

func runMigration(mg *migration, user []byte) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, &recovered{value: v}
		}
	}()
	out, err = mg.f(user)
	if err != nil {
		var pe *recovered
		if !errors.As(err, &pe) {
			err = &UpgradeError{From: mg.From(), To: mg.To(), Reason: "the upgrade function failed", Err: err}
		}
	}
	return out, err
}

func (r *recovered) Error() string { return fmt.Sprint("panic: ", r.value) }

// replayUpgrade re-runs an upgrade record against cur and checks it.
func (l *lineage) replayUpgrade(cur versioned, e *event.Envelope) (versioned, error) {
	h := cur.Height() + 1
	switch {
	case e.StreamID != cur.ID():
		return nil, &TailError{Height: e.RunSeq, Reason: "record of stream " + e.StreamID + ", not " + cur.ID()}
	case e.RunSeq != h:
		return nil, &TailError{Height: e.RunSeq, Reason: fmt.Sprintf("expected height %d (the tail must follow the baseline without gaps)", h)}
	}
	var want upgradeRecord
	if err := unmarshalRecord(e.Payload, &want); err != nil || want.V != recordVersion {
		return nil, &TailError{Height: h, Reason: "payload is not a world upgrade record", Err: err}
	}
	if want.From != cur.vd().ver() {
		return nil, &DivergenceError{Height: h, Reason: ReasonVersion,
			Want: StepDigest{Plan: e.PlanID, Version: want.From}, Got: StepDigest{Plan: l.nameOf(cur), Version: cur.vd().ver()}}
	}
	in := Input{Seq: want.Input.Seq, Kind: want.Input.Kind, Payload: want.Input.Payload, EnqueuedAt: want.Input.EnqueuedAt.Time}
	var refused error
	if want.Refused {
		refused = &RefusedError{}
	}
	// Stepped on a copy: a divergence leaves cur as it was.
	user, m := cur.parts()
	probe, err := cur.vd().adopt(cur.ID(), cur.Height(), user, m)
	if err != nil {
		return nil, err
	}
	res, next, err := l.upgrade(probe, in, e.EmittedAt, true, refused)
	if err != nil {
		return nil, err
	}
	if e.StepID != res.Record.StepID {
		return nil, &TailError{Height: h, Reason: "stepId " + e.StepID + " does not match the input (" + res.Record.StepID + ")"}
	}
	wantD := StepDigest{Plan: e.PlanID, Version: e.PlanVersion, Outcome: want.Outcome, StateHash: want.StateHash}
	if reason := diverges(wantD, res.digest); reason != "" {
		return nil, &DivergenceError{Height: h, Reason: reason, Want: wantD, Got: res.digest}
	}
	return next, nil
}

var _ Kernel = (*lineage)(nil)
