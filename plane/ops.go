package plane

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Ops is the internal ops API: what the HTTP ops API and the CLI call.
// Every operation is idempotent (repeating it with the same arguments
// answers as the first time did, or as a no-op) and its errors are typed:
// the store's sentinels, or this package's.
type Ops struct {
	st      store.Store
	kernels Kernels
	dec     ingressDecoder
	recDec  *event.Decoder // journal records: a whole input and more, so a record's limit
	in      ingressTrace
	act     Activation // nil: inputs wait for the reconcile to place their world
	adm     *Admission // nil: ingress unbounded
}

// ingressDecoder is what ingress validation reads payloads with: an
// *event.Decoder (an interface so that a test can count the decodes).
type ingressDecoder interface {
	Canonicalize(data []byte) ([]byte, error)
	IsCanonical(data []byte) error
	Unmarshal(data []byte, v any) error
}

// OpsOption configures NewOps.
type OpsOption func(*opsOptions)

type opsOptions struct {
	tracer trace.TracerProvider
	links  *TraceLinks
	clock  actor.Executor
	act    Activation
	adm    *Admission
}

// OpsAdmission bounds EnqueueIngress and EnqueueEvent by a's limits.
func OpsAdmission(a *Admission) OpsOption {
	return func(o *opsOptions) { o.adm = a }
}

// OpsActivation makes EnqueueIngress and EnqueueEvent activate the world
// of every input they accept as it goes in (Activation), so that an
// unplaced world answers its first input without waiting for a reconcile.
func OpsActivation(a Activation) OpsOption {
	return func(o *opsOptions) { o.act = a }
}

// OpsTracing makes EnqueueIngress write its orrery.ingress spans with tp
// (nil: the global provider, which is also the default), record them in
// links (optional) for the cycle that journals the item, and stamp them on
// clock's time (nil: the SDK stamps them).
func OpsTracing(tp trace.TracerProvider, links *TraceLinks, clock actor.Executor) OpsOption {
	return func(o *opsOptions) { o.tracer, o.links, o.clock = tp, links, clock }
}

// NewOps returns the ops API over st.
func NewOps(st store.Store, kernels Kernels, opts ...OpsOption) (*Ops, error) {
	dec, err := event.NewDecoder(event.DecoderOptions{DisallowUnknownFields: true})
	if err != nil {
		return nil, err
	}
	recDec, err := event.NewDecoder(event.DecoderOptions{MaxSize: event.MaxPayloadBytes})
	if err != nil {
		return nil, err
	}
	var o opsOptions
	for _, opt := range opts {
		opt(&o)
	}
	return &Ops{st: st, kernels: kernels, dec: dec, recDec: recDec, act: o.act, adm: o.adm,
		in: ingressTrace{tr: otrace.Tracer(o.tracer), links: o.links, ex: o.clock}}, nil
}

// AssignWorld writes world's desired worker (assign_world).
func (o *Ops) AssignWorld(ctx context.Context, worldID, worker, reason string) error {
	return o.st.Assign(ctx, worldID, store.Assignment{DesiredWorker: worker, Reason: reason}, nil)
}

// UnassignWorld removes world's assignment (unassign_world); no assignment
// is a no-op.
func (o *Ops) UnassignWorld(ctx context.Context, worldID string) error {
	err := o.st.Unassign(ctx, worldID, nil)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// AcquireLease is acquire_lease: the holder acquiring again gets its lease
// back unchanged.
func (o *Ops) AcquireLease(ctx context.Context, worldID, worker string, ttl time.Duration) (store.Lease, error) {
	return o.st.Acquire(ctx, worldID, worker, ttl)
}

// RenewLease is renew_lease.
func (o *Ops) RenewLease(ctx context.Context, worldID, worker string, epoch uint64, ttl time.Duration) (store.Lease, error) {
	return o.st.Renew(ctx, worldID, worker, epoch, ttl)
}

// ReleaseLease is release_lease. Releasing a lease already released at
// that epoch (a retried release) is a no-op.
func (o *Ops) ReleaseLease(ctx context.Context, worldID, worker string, epoch uint64) error {
	err := o.st.Release(ctx, worldID, worker, epoch)
	if err != nil && (errors.Is(err, store.ErrNotHolder) || errors.Is(err, store.ErrStaleEpoch)) {
		if l, ok, gerr := o.st.GetLease(ctx, worldID); gerr == nil && ok && l.Holder == "" && l.Epoch == epoch {
			return nil
		}
	}
	return err
}

// ListWorkerWorlds is list_worker_worlds.
func (o *Ops) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	return o.st.ListWorkerWorlds(ctx, worker, after, limit)
}

// Ingress is one external input: its kind (vocab.KindEvent or
// vocab.KindCall), its wire form (world.EncodeEvent or EncodeCall, as
// CBOR bytes from outside) and its idempotency key.
type Ingress struct {
	Kind      string
	Payload   []byte
	DedupeKey string
}

// EnqueueIngress is enqueue_ingress: the input is validated completely
// before anything is written, and a repeated key is acknowledged with the
// first seq. Bad input is ErrInvalidIngress and nothing is enqueued.
//
// Each check runs once on the way to the inbox row: the wire form here
// (ValidateIngress: the payload is decoded once), the type and value
// against the world's kernel (world.Kernel.CheckInput), and what the store
// checks of every producer's item (the world id, the kind, the key's
// namespace, the size) in the store alone, whose refusal is answered as
// ErrInvalidIngress.
func (o *Ops) EnqueueIngress(ctx context.Context, worldID string, in Ingress) (ack Ack, err error) {
	ctx, sp := o.in.start(ctx, worldID, in.Kind)
	defer func() { o.in.end(sp, worldID, ack, err) }()
	m, err := o.parseIngress(in.Kind, in.Payload)
	if err != nil {
		return Ack{}, errorf("enqueue_ingress", ErrInvalidIngress, worldID, err)
	}
	return o.enqueueChecked(ctx, worldID, m, store.InboxItem{Kind: in.Kind, Payload: in.Payload, DedupeKey: in.DedupeKey})
}

// EnqueueEvent is EnqueueIngress of an event given by its parts rather
// than its wire form: its input type, named at run time as
// world.EncodeEventNamed takes it, and its value as canonical CBOR (what
// the ops API makes of a JSON value). The wire payload is encoded once
// here and never decoded: validation reads the parts it is built from,
// and only scans the bytes for canonical form and the decoder's limits. A
// value that is not canonical is ErrInvalidIngress.
func (o *Ops) EnqueueEvent(ctx context.Context, worldID, typeName string, value []byte, dedupeKey string) (ack Ack, err error) {
	return o.enqueueEvent(ctx, worldID, typeName, value, dedupeKey, false)
}

// EnqueueScheduleTick is EnqueueEvent for a schedule's tick, whose key is
// in the schedules' namespace (store.ScheduleKeyPrefix), which every other
// producer's input is refused: the scheduler's path alone.
func (o *Ops) EnqueueScheduleTick(ctx context.Context, worldID, typeName string, value []byte, dedupeKey string) (ack Ack, err error) {
	return o.enqueueEvent(ctx, worldID, typeName, value, dedupeKey, true)
}

func (o *Ops) enqueueEvent(ctx context.Context, worldID, typeName string, value []byte, dedupeKey string, tick bool) (ack Ack, err error) {
	ctx, sp := o.in.start(ctx, worldID, vocab.KindEvent)
	defer func() { o.in.end(sp, worldID, ack, err) }()
	payload, err := world.EncodeEventNamed(typeName, cbor.RawMessage(value))
	if err != nil {
		return Ack{}, errorf("enqueue_ingress", ErrInvalidIngress, worldID, err)
	}
	if err := o.dec.IsCanonical(payload); err != nil {
		return Ack{}, errorf("enqueue_ingress", ErrInvalidIngress, worldID, err)
	}
	m := ingressMessage{Type: typeName, Value: value}
	return o.enqueueChecked(ctx, worldID, m, store.InboxItem{Kind: vocab.KindEvent, Payload: payload, DedupeKey: dedupeKey, ScheduleTick: tick})
}

// enqueueChecked checks an input whose wire form passed against the
// definition of the world's universe (the type has a handler and the value
// decodes into it) and enqueues it. A world without a definition here is
// ErrNoKernel; an unknown world is the store's ErrWorldNotFound.
func (o *Ops) enqueueChecked(ctx context.Context, worldID string, m ingressMessage, item store.InboxItem) (Ack, error) {
	rec, err := o.st.GetWorld(ctx, worldID)
	if err != nil {
		return Ack{}, worldReadErr(worldID, err)
	}
	k, ok := o.kernels[rec.Universe]
	if !ok {
		return Ack{}, errorf("enqueue_ingress", ErrNoKernel, worldID, detail("universe %q", rec.Universe))
	}
	if err := k.CheckInput(m.Type, m.Value); err != nil {
		return Ack{}, errorf("enqueue_ingress", ErrInvalidIngress, worldID, err)
	}
	activate(ctx, o.act, worldID)
	return enqueue(ctx, o.st, o.adm, "enqueue_ingress", worldID, item)
}

// worldReadErr answers a failed read of the world an input is for. The
// store checks the world id when it is written to (Enqueue), not when it
// is read: an id it would refuse names no world, so the read answers not
// found, and only then is the id judged, to answer bad input as bad input
// rather than as a world that might yet be created.
func worldReadErr(worldID string, err error) error {
	if errors.Is(err, store.ErrInvalid) {
		return errorf("enqueue_ingress", ErrInvalidIngress, worldID, err)
	}
	if errors.Is(err, store.ErrWorldNotFound) {
		if cerr := store.CheckID("enqueue_ingress", "world", worldID); cerr != nil {
			return errorf("enqueue_ingress", ErrInvalidIngress, worldID, cerr)
		}
	}
	return err
}

// ingressMessage is the wire form of an event or call from outside: the
// kernel's message without the fields only the plane writes (fabric
// origins, timer hashes), which outside input may not carry.
type ingressMessage struct {
	Type          string          `cbor:"type"`
	Value         cbor.RawMessage `cbor:"value"`
	CallID        string          `cbor:"call_id,omitempty"`
	CorrelationID string          `cbor:"correlation_id,omitempty"`
}

// ValidateIngress checks external input as the kernel will read it: an
// event or a call, CBOR within event's limits, the message form with a
// type outside the reserved "sys/" names, and a call id on exactly the
// calls. It does not canonicalise: the kernel does that once, when it
// writes the input into the journal record. The payload is decoded once,
// strictly, as EnqueueIngress always decoded it: an indefinite-length
// item is refused here (it was refused further along before), so such a
// payload sent to an unknown world is now bad input (400), not not-found.
func (o *Ops) ValidateIngress(kind string, payload []byte) error {
	_, err := o.parseIngress(kind, payload)
	return err
}

// parseIngress is ValidateIngress, answering the decoded message so that
// nothing after it decodes the payload again. The payload is decoded once,
// strictly (definite lengths, no unknown fields). Canonicalize before it
// checks the whole value within the decoder's limits (depth, elements,
// duplicate keys, inside the value too): a scan of canonical bytes, which
// every encoder of ours writes, and a decode only of other bytes.
func (o *Ops) parseIngress(kind string, payload []byte) (ingressMessage, error) {
	switch kind {
	case vocab.KindEvent, vocab.KindCall:
	default:
		return ingressMessage{}, detail("kind %q is not %q or %q", kind, vocab.KindEvent, vocab.KindCall)
	}
	if _, err := o.dec.Canonicalize(payload); err != nil {
		return ingressMessage{}, err
	}
	var m ingressMessage
	if err := o.dec.Unmarshal(payload, &m); err != nil {
		return ingressMessage{}, err
	}
	switch {
	case m.Type == "" || !utf8.ValidString(m.Type):
		return ingressMessage{}, detail("no type")
	case strings.HasPrefix(m.Type, "sys/"):
		return ingressMessage{}, detail("type %q is reserved", m.Type)
	case (kind == vocab.KindCall) != (m.CallID != ""):
		return ingressMessage{}, detail("call_id is set on exactly the calls")
	}
	return m, nil
}

// WorldFork is world_fork: newWorld is created from src's state at
// height (0: src's active snapshot), with its lineage. The state is src's
// stored snapshot at that height when there is one, else src's state
// replayed up to it as StateAt replays it (so any height of the journal
// above the compaction floor forks; a height above the head is
// ErrInvalid, a compacted one the store's ErrCompacted). The fork boots at
// exactly that state, with no effects, timers or dedupe records of its
// own, and nothing awaited (see Baseline). A repeat with the same source
// and height returns the existing fork; another fork under that id is
// ErrConflict.
func (o *Ops) WorldFork(ctx context.Context, src string, height uint64, newWorld string) (store.World, error) {
	if height == 0 {
		snap, ok, err := o.st.ActiveSnapshot(ctx, src)
		if err != nil {
			return store.World{}, err
		}
		if !ok {
			return store.World{}, store.Errorf("world_fork", store.ErrSnapshotNotFound, src, "no snapshot to fork")
		}
		height = snap.Height
	}
	rec, err := o.st.ForkWorld(ctx, src, height, newWorld)
	if errors.Is(err, store.ErrSnapshotNotFound) {
		rec, err = o.forkDerived(ctx, src, height, newWorld)
	}
	if errors.Is(err, store.ErrWorldExists) {
		prev, gerr := o.st.GetWorld(ctx, newWorld)
		if gerr != nil {
			return store.World{}, gerr
		}
		if prev.ParentWorld == src && prev.ForkedAtHeight == height {
			return prev, nil
		}
		return store.World{}, errorf("world_fork", ErrConflict, newWorld, err)
	}
	return rec, err
}

// WorldCreateFromSeed is world_create_from_seed: a world of universe
// created at seed, whose state the universe's kernel must accept, with
// nothing awaited (the seed's effects and timers belong to no queue here).
// A repeat with the same seed, before the world has snapshotted past it,
// returns the existing world; another seed under that id is ErrConflict.
// A seed state that records no version, for a universe whose kernel
// carries several, names the version that wrote it in seed.Version
// (StateAt's snapshot does): otherwise it is ErrInvalid
// (world.ErrVersionUnknown), as no kernel guesses it.
func (o *Ops) WorldCreateFromSeed(ctx context.Context, universe, worldID string, seed world.Snapshot) (store.World, error) {
	kern, err := o.kernels.of("world_create_from_seed", store.World{ID: worldID, Universe: universe})
	if err != nil {
		return store.World{}, err
	}
	inst, err := kern.Load(worldID, seed)
	if err != nil {
		return store.World{}, errorf("world_create_from_seed", ErrInvalid, worldID, err)
	}
	// The seeded world has no journal to name the version its state is
	// of, so an unstamped seed's fork records the version it was told.
	state, err := world.ForkStateAt(kern, inst.State(), seed.Version)
	if err != nil {
		return store.World{}, errorf("world_create_from_seed", ErrInvalid, worldID, err)
	}
	snap := store.Snapshot{World: worldID, Height: seed.Height, State: state, StateHash: world.Hash(state)}
	rec, err := o.st.CreateWorld(ctx, universe, worldID, &snap)
	if errors.Is(err, store.ErrWorldExists) {
		prev, gerr := o.st.GetWorld(ctx, worldID)
		if gerr != nil {
			return store.World{}, gerr
		}
		cur, ok, serr := o.st.ActiveSnapshot(ctx, worldID)
		if serr != nil {
			return store.World{}, serr
		}
		if prev.Universe == universe && prev.ParentWorld == "" && ok && cur.Height == snap.Height && cur.StateHash == snap.StateHash {
			return prev, nil
		}
		return store.World{}, errorf("world_create_from_seed", ErrConflict, worldID, err)
	}
	return rec, err
}
