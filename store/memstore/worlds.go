package memstore

import (
	"context"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// world is a world's record and everything scoped to it. Effects and timers
// are global queues (keyed by intent hash) and live in state.
type world struct {
	rec store.World

	snapshots   map[uint64]store.Snapshot // by height
	hasBaseline bool
	baseline    uint64 // the active baseline's height

	inbox     []store.InboxItem // seq order; kept after draining
	lastSeq   uint64
	cursor    uint64
	inboxKeys map[string]*inboxKey // per-world dedupe keys
	// drains are the cursor's moves, kept until the retention passes, as
	// the SQL backends keep them, so that a copy carries them as they are
	// (the keys' completion is on the keys themselves).
	drains []store.PortDrain
	fabric map[string]*dedupeRecord
}

// inboxKey is an inbox dedupe record. It is pending until the cursor passes
// its item (a key swept before its item is drained would let a retried
// producer enqueue the same input twice); drainedAt is its completion time.
type inboxKey struct {
	seq       uint64
	drained   bool
	drainedAt time.Time
}

// dedupeRecord is a completed dedupe record: fabric deliveries.
type dedupeRecord struct {
	seq         uint64
	completedAt time.Time
}

func newWorld(rec store.World) *world {
	return &world{
		rec:       rec,
		snapshots: map[uint64]store.Snapshot{},
		inboxKeys: map[string]*inboxKey{},
		fabric:    map[string]*dedupeRecord{},
	}
}

// CreateWorld implements store.Worlds.
func (s *backend) CreateWorld(ctx context.Context, universe, id string, seed *store.Snapshot) (store.World, error) {
	const op = "create_world"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	defer s.end()
	if err := s.st.claimWorldID(op, id); err != nil {
		return store.World{}, err
	}
	now := s.now()
	w := newWorld(store.World{ID: id, Universe: universe, Status: store.WorldActive, CreatedAt: now})
	if seed != nil {
		snap := *seed
		snap.World, snap.State, snap.CreatedAt = id, cloneBytes(seed.State), now
		w.snapshots[snap.Height] = snap
		w.hasBaseline, w.baseline = true, snap.Height
		s.st.seedStream(id, snap.Height)
	}
	s.st.worlds[id] = w
	return w.rec, nil
}

// Spawn implements store.Worlds: CreateWorld, Enqueue of each item and,
// with a holder, Acquire and an Append of the events, as one transaction.
// Everything is decided before anything is written (the id, the lease,
// then the journal), so a refusal leaves the store as it was.
func (s *backend) Spawn(ctx context.Context, spec store.SpawnSpec) (store.Spawned, error) {
	const op = "spawn"
	if err := s.begin(ctx, op); err != nil {
		return store.Spawned{}, err
	}
	defer s.end()
	if err := s.st.claimWorldID(op, spec.World); err != nil {
		return store.Spawned{}, err
	}
	now := s.now()
	var lease contract.LeaseRow
	if spec.Holder != "" {
		// A world that did not exist has no assignment and was never
		// leased: its first lease is epoch 1.
		next, _, err := contract.Acquire(op, spec.World, spec.Holder, spec.Incarnation, store.WorldActive, "", false, contract.LeaseRow{}, now, spec.TTL)
		if err != nil {
			return store.Spawned{}, err
		}
		lease = next
	}
	// The events are a fenced Append under that lease with ExpectedHead 0:
	// claimWorldID left the stream without events, so none is a duplicate
	// and they get 1…n.
	journal := s.st.planAppend(spec.World, spec.Events, now)
	if err := contract.AppendHead(op, spec.World, store.Head(0), journal.from, journal.fresh()); err != nil {
		return store.Spawned{}, err
	}

	w := newWorld(store.World{ID: spec.World, Universe: spec.Universe, Status: store.WorldActive, CreatedAt: now})
	s.st.worlds[spec.World] = w
	out := store.Spawned{World: w.rec, Seqs: make([]uint64, len(spec.Items))}
	if spec.Holder != "" {
		out.Lease = lease.Lease(spec.World)
	}
	for i, it := range spec.Items {
		// The front refused a key given twice, so none of these is a dup.
		out.Seqs[i], _ = s.st.enqueue(w, it.Kind, it.Payload, it.DedupeKey, now)
	}
	if spec.Holder != "" {
		l := lease
		s.st.leases[spec.World] = &l
		s.st.notify(store.TopicLeases)
	}
	s.st.applyAppend(journal, spec.Events, now)
	out.Appended = journal.out
	return out, nil
}

// claimWorldID asks contract.WorldID whether id may name a new world.
func (st *state) claimWorldID(op, id string) error {
	_, found := st.worlds[id]
	return contract.WorldID(op, id, found, st.head(id))
}

func (st *state) seedStream(id string, height uint64) {
	str := st.stream(id)
	str.base, str.head = height, height
}

// ForkWorld implements store.Worlds: one transaction, so the fork exists
// completely or not at all.
func (s *backend) ForkWorld(ctx context.Context, src string, height uint64, newID string) (store.World, error) {
	const op = "fork_world"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	defer s.end()
	sw, ok := s.st.worlds[src]
	if !ok {
		return store.World{}, store.Errorf(op, store.ErrWorldNotFound, src, "")
	}
	snap, ok := sw.snapshots[height]
	if !ok {
		return store.World{}, store.Errorf(op, store.ErrSnapshotNotFound, src, "height %d", height)
	}
	if err := s.st.claimWorldID(op, newID); err != nil {
		return store.World{}, err
	}
	now := s.now()
	w := newWorld(store.World{
		ID: newID, Universe: sw.rec.Universe, Status: store.WorldActive,
		ParentWorld: src, ParentSnapshotHash: snap.StateHash, ForkedAtHeight: height,
		CreatedAt: now,
	})
	snap.World, snap.State, snap.CreatedAt = newID, cloneBytes(snap.State), now
	w.snapshots[height] = snap
	w.hasBaseline, w.baseline = true, height
	s.st.seedStream(newID, height)
	s.st.worlds[newID] = w
	return w.rec, nil
}

// ForkWorldFrom implements store.Worlds: ForkWorld with the caller's
// state as the fork's baseline.
func (s *backend) ForkWorldFrom(ctx context.Context, src string, base store.Snapshot, newID string) (store.World, error) {
	const op = "fork_world_from"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	defer s.end()
	sw, ok := s.st.worlds[src]
	if !ok {
		return store.World{}, store.Errorf(op, store.ErrWorldNotFound, src, "")
	}
	if head := s.st.head(src); base.Height > head {
		return store.World{}, store.Errorf(op, store.ErrInvalid, src, "fork height %d passes the journal head %d", base.Height, head)
	}
	if err := s.st.claimWorldID(op, newID); err != nil {
		return store.World{}, err
	}
	now := s.now()
	w := newWorld(store.World{
		ID: newID, Universe: sw.rec.Universe, Status: store.WorldActive,
		ParentWorld: src, ParentSnapshotHash: base.StateHash, ForkedAtHeight: base.Height,
		CreatedAt: now,
	})
	w.snapshots[base.Height] = store.Snapshot{World: newID, Height: base.Height, State: cloneBytes(base.State), StateHash: base.StateHash, CreatedAt: now}
	w.hasBaseline, w.baseline = true, base.Height
	s.st.seedStream(newID, base.Height)
	s.st.worlds[newID] = w
	return w.rec, nil
}

// GetWorld implements store.Worlds.
func (s *backend) GetWorld(ctx context.Context, id string) (store.World, error) {
	const op = "get_world"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	defer s.end()
	w, ok := s.st.worlds[id]
	if !ok {
		return store.World{}, store.Errorf(op, store.ErrWorldNotFound, id, "")
	}
	return w.rec, nil
}

// ListWorlds implements store.Worlds.
func (s *backend) ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error) {
	const op = "list_worlds"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	var out []store.World
	for _, id := range sortedKeys(s.st.worlds) {
		w := s.st.worlds[id]
		if w.rec.Universe == universe && (status == "" || w.rec.Status == status) {
			out = append(out, w.rec)
		}
	}
	return out, nil
}

// SetWorldStatus implements store.Worlds: the operator's path, without a
// lease (contract.Transition).
func (s *backend) SetWorldStatus(ctx context.Context, id string, status store.WorldStatus, reason string) (store.World, error) {
	const op = "set_world_status"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	defer s.end()
	w, ok := s.st.worlds[id]
	if !ok {
		return store.World{}, store.Errorf(op, store.ErrWorldNotFound, id, "")
	}
	move, err := s.st.planStatus(op, w, status, reason)
	if err != nil {
		return w.rec, err
	}
	s.st.applyStatus(move, s.now())
	return w.rec, nil
}

// statusMove is a decided status change (contract.Transition), not yet
// applied: SetWorldStatus and a Commit's Status decide before they write.
type statusMove struct {
	w              *world
	to             store.WorldStatus
	reason         string
	noop, endLease bool
}

// planStatus decides w's move to status (mu held); it writes nothing.
func (st *state) planStatus(op string, w *world, status store.WorldStatus, reason string) (statusMove, error) {
	noop, endLease, err := contract.Transition(op, w.rec.ID, w.rec.Status, status)
	return statusMove{w: w, to: status, reason: reason, noop: noop, endLease: endLease}, err
}

// applyStatus applies a decided move (mu held). Leaving active ends the
// lease in this same transaction: its holder is fenced at once, and the
// epoch counter is kept, so the next Acquire after a resume is a higher
// epoch. The same status again keeps the recorded reason and time.
// A move that withdraws the world's pending effects
// (contract.WithdrawsPending) returns how many.
func (st *state) applyStatus(m statusMove, now time.Time) (withdrawn int) {
	if m.noop {
		return 0
	}
	if l := st.leases[m.w.rec.ID]; m.endLease && l != nil && l.Holder != "" {
		st.endLease(l, now)
	}
	m.w.rec.Status, m.w.rec.StatusReason, m.w.rec.StatusChangedAt = m.to, m.reason, now
	st.notify(store.TopicAssignments)
	if m.to == store.WorldArchived {
		st.leaveQueue(m.w.rec.ID)
	}
	if contract.WithdrawsPending(m.to) {
		withdrawn = st.withdraw(m.w.rec.ID, nil, true, now)
	}
	return withdrawn
}
