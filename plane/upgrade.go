package plane

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Upgrade statuses: what an upgrade request found.
const (
	UpgradeRequested = "requested" // an upgrade input was enqueued
	UpgradePending   = "pending"   // one to that version waits in the inbox already
	UpgradeAlready   = "already"   // the world is on that version
)

// WorldUpgrade answers an upgrade request of one world.
type WorldUpgrade struct {
	World  string
	From   uint64 // the version the world is on (0: not known yet, a world that never stepped)
	To     uint64
	Status string // UpgradeRequested, UpgradePending or UpgradeAlready
	Seq    uint64 // the upgrade input's inbox seq (requested, pending)
}

// WorldVersion is the version of its definition world id is on, read
// without replaying: the planVersion of its last journal record (an
// upgrade's record carries the version it moved to), else the version
// its snapshot's state records, else 0 (a world that never stepped: any
// version of its universe may start it).
func WorldVersion(ctx context.Context, st store.Store, id string) (uint64, error) {
	head, err := st.Head(ctx, id)
	if err != nil {
		return 0, err
	}
	if head > 0 {
		rs, err := st.Read(ctx, id, head-1, 1)
		if err != nil && !errors.Is(err, store.ErrCompacted) {
			return 0, err
		}
		if len(rs) == 1 {
			return rs[0].PlanVersion, nil
		}
	}
	snap, ok, err := st.ActiveSnapshot(ctx, id)
	if err != nil || !ok {
		return 0, err
	}
	return world.StateVersion(snap.State), nil
}

// snapshotVersion is the version of the definition that wrote snap, as
// the journal tells it (world.Snapshot.Version), for a state that records
// none itself and a kernel that carries several versions (the only ones
// that ask): the planVersion of the record at the snapshot's height, in
// the journal of the world that wrote it (a fork's baseline is its
// parent's state). 0: the record is compacted away or there is none
// (a seed); a journal tail after the snapshot still tells, and with
// neither the kernel refuses the state rather than guess.
func snapshotVersion(ctx context.Context, st store.Store, kern world.Kernel, rec store.World, snap store.Snapshot) (uint64, error) {
	if snap.Height == 0 || world.StateVersion(snap.State) != 0 || len(world.KernelVersions(kern)) < 2 {
		return 0, nil
	}
	// Up the fork chain while the height is a fork point: the record is
	// in the journal of the world the state came from. Bounded, as a
	// chain of forks at one height is.
	for range 64 {
		if rec.ParentWorld == "" || rec.ForkedAtHeight != snap.Height {
			break
		}
		parent, err := st.GetWorld(ctx, rec.ParentWorld)
		if errors.Is(err, store.ErrWorldNotFound) || errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		rec = parent
	}
	rs, err := st.Read(ctx, rec.ID, snap.Height-1, 1)
	if errors.Is(err, store.ErrCompacted) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrWorldNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(rs) == 1 && rs[0].RunSeq == snap.Height {
		return rs[0].PlanVersion, nil
	}
	return 0, nil
}

// PendingUpgrade is the version the oldest upgrade input waiting in world
// id's inbox asks for (0: none), and its seq.
func PendingUpgrade(ctx context.Context, st store.Store, id string) (to, seq uint64, err error) {
	sc, err := scanUpgrade(ctx, st, id, upgradeScan{})
	return sc.to, sc.seq, err
}

// upgradeScan is how far a world's inbox was read for an upgrade input:
// items up to read were, and the oldest upgrade among those after the
// cursor then is to (at seq; 0: none).
type upgradeScan struct {
	read, to, seq uint64
	pass          uint64 // the orchestrator pass that last used it
	since         uint64 // the pass that last read the inbox from the cursor
}

// rescanEvery is how many passes a remembered scan is trusted before the
// inbox is read from the cursor again. Seqs only grow while the store
// keeps what it committed; a failover to an asynchronous standby may lose
// items and hand their seqs out again, to items (an upgrade among them)
// that a scan remembering it read past them would never see. Reading
// afresh now and then bounds that blindness to this many passes.
const rescanEvery = 64

// scanUpgrade finds the oldest upgrade input after world id's cursor,
// reading on from what was (was; zero: nothing) rather than from the
// cursor: inbox seqs only grow and items never change, so what was read
// holds until the cursor passes it. A found upgrade not yet consumed is
// the answer still, at the cost of the cursor's read alone.
func scanUpgrade(ctx context.Context, st store.Store, id string, was upgradeScan) (upgradeScan, error) {
	cur, err := st.Cursor(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrWorldNotFound) {
			return upgradeScan{}, nil
		}
		return upgradeScan{}, err
	}
	if was.to != 0 && was.seq > cur {
		return was, nil
	}
	after := max(cur, was.read)
	if was.to != 0 {
		after = max(cur, was.seq) // consumed: the items after it were never read
	}
	const page = 256
	for {
		items, err := st.ReadInbox(ctx, id, after, page)
		if err != nil {
			return upgradeScan{}, err
		}
		for _, it := range items {
			if it.Kind == vocab.KindUpgrade {
				var m struct {
					To uint64 `cbor:"to"`
				}
				// One that asks for no version is recorded failed by
				// its host, which then reaches the next.
				if event.Unmarshal(it.Payload, &m) == nil && m.To != 0 {
					return upgradeScan{read: it.Seq, to: m.To, seq: it.Seq}, nil
				}
			}
			after = it.Seq
		}
		if len(items) < page {
			return upgradeScan{read: after}, nil
		}
	}
}

// upgradeScans remembers each world's upgradeScan between orchestrator
// passes, so that a pass during a rolling upgrade reads only what entered
// an inbox since the last one, not every inbox whole. A world a pass did
// not look at is forgotten at its end (sweep).
type upgradeScans struct {
	mu   sync.Mutex
	pass uint64
	m    map[string]upgradeScan
}

// begin starts a pass.
func (s *upgradeScans) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pass++
}

// sweep forgets the worlds the pass begun last did not look at.
func (s *upgradeScans) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sc := range s.m {
		if sc.pass != s.pass {
			delete(s.m, id)
		}
	}
}

// pending is PendingUpgrade, read on from what s remembers of id (s nil:
// from the cursor).
func (s *upgradeScans) pending(ctx context.Context, st store.Store, id string) (uint64, error) {
	if s == nil {
		to, _, err := PendingUpgrade(ctx, st, id)
		return to, err
	}
	s.mu.Lock()
	was, ok := s.m[id]
	if !ok || s.pass-was.since >= rescanEvery {
		was = upgradeScan{since: s.pass}
	}
	s.mu.Unlock()
	sc, err := scanUpgrade(ctx, st, id, was)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.pass, sc.since = s.pass, was.since
	if s.m == nil {
		s.m = map[string]upgradeScan{}
	}
	s.m[id] = sc
	return sc.to, nil
}

// UpgradeWorld asks world id to move to version to of its definition: an
// upgrade input, ordered with the world's other inputs and run by the
// host that holds its lease, which appends one record (EventWorldUpgraded)
// and snapshots the world at it. A world on to already is answered
// UpgradeAlready and nothing is enqueued; one on a newer version is
// ErrDowngrade. Repeating the request while it waits is answered with the
// waiting input (UpgradePending). The outcome is the record's: a failed
// upgrade (the upgrade function's error, a host that does not carry to)
// leaves the world serving on its version, and the journal says why.
func (o *Ops) UpgradeWorld(ctx context.Context, id string, to uint64) (WorldUpgrade, error) {
	const op = "world_upgrade"
	out := WorldUpgrade{World: id, To: to}
	if to == 0 {
		return out, errorf(op, ErrInvalid, id, detail("versions start at 1"))
	}
	if err := store.CheckInt(op, "to", to); err != nil {
		return out, errorf(op, ErrInvalid, id, err)
	}
	rec, err := o.st.GetWorld(ctx, id)
	if err != nil {
		return out, err
	}
	if _, ok := o.kernels[rec.Universe]; !ok {
		return out, errorf(op, ErrNoKernel, id, detail("universe %q", rec.Universe))
	}
	if out.From, err = WorldVersion(ctx, o.st, id); err != nil {
		return out, err
	}
	switch {
	case out.From == to:
		out.Status = UpgradeAlready
		return out, nil
	case out.From > to:
		return out, errorf(op, ErrDowngrade, id, &world.UpgradeError{From: out.From, To: to,
			Reason: "a world never goes back to an older version", Err: world.ErrDowngrade})
	}
	if pto, seq, err := PendingUpgrade(ctx, o.st, id); err != nil {
		return out, err
	} else if pto == to {
		out.Status, out.Seq = UpgradePending, seq
		return out, nil
	}
	payload, err := world.EncodeUpgrade(to)
	if err != nil {
		return out, err
	}
	head, err := o.st.Head(ctx, id)
	if err != nil {
		return out, err
	}
	// The key names the journal height the request was made at: a retry
	// of the same request dedupes, and asking again after a failed
	// upgrade (the journal moved on) is a new input.
	key := store.UpgradeKeyPrefix + strconv.FormatUint(to, 10) + "@" + strconv.FormatUint(head, 10)
	activate(ctx, o.act, id)
	// An operator's request, never shed (nil admission), as other
	// control requests are not.
	ack, err := enqueue(ctx, o.st, nil, op, id, store.InboxItem{Kind: vocab.KindUpgrade, Payload: payload, DedupeKey: key})
	if err != nil {
		return out, err
	}
	out.Status, out.Seq = UpgradeRequested, ack.Seq
	return out, nil
}

// UniverseUpgrade answers an upgrade request of one page of a universe's
// worlds.
type UniverseUpgrade struct {
	Asked    int // worlds an upgrade input was enqueued for, or already waited
	Already  int // worlds on the version already
	Failed   int // worlds the request failed for (Failures says why)
	Failures map[string]error
	Next     string // the world id to continue after ("": the universe is done)
}

// UpgradeUniverse is UpgradeWorld for the active and paused worlds of
// universe with ids after after, at most limit of them (0: 100), in id
// order: a page, so that a universe of any size is upgraded by as many
// calls as it takes, each bounded.
func (o *Ops) UpgradeUniverse(ctx context.Context, universe string, to uint64, after string, limit int) (UniverseUpgrade, error) {
	const op = "universe_upgrade"
	out := UniverseUpgrade{Failures: map[string]error{}}
	if _, ok := o.kernels[universe]; !ok {
		return out, errorf(op, ErrNoKernel, "", detail("universe %q", universe))
	}
	if to == 0 {
		return out, errorf(op, ErrInvalid, "", detail("versions start at 1"))
	}
	if limit <= 0 {
		limit = 100
	}
	var ids []string
	for _, status := range []store.WorldStatus{store.WorldActive, store.WorldPaused} {
		ws, err := o.st.ListWorlds(ctx, universe, status)
		if err != nil {
			return out, err
		}
		for _, w := range ws {
			if w.ID > after {
				ids = append(ids, w.ID)
			}
		}
	}
	slices.Sort(ids)
	if len(ids) > limit {
		ids, out.Next = ids[:limit], ids[limit-1]
	}
	for _, id := range ids {
		r, err := o.UpgradeWorld(ctx, id, to)
		switch {
		case err != nil:
			out.Failed++
			out.Failures[id] = err
		case r.Status == UpgradeAlready:
			out.Already++
		default:
			out.Asked++
		}
	}
	return out, nil
}

// versionsNeeded are the versions of its definition a host must carry to
// run world id now, read without replaying: the version it is on and the
// one an upgrade waiting in its inbox asks for (nil: any version, a world
// that never stepped and awaits no upgrade).
//
// An upgrade to a version no worker of live carries (a typo, a version
// not deployed yet) is left out: the world goes where the version it is on
// runs, so it keeps serving, and the host that reaches the upgrade input
// records it failed. Needing it would leave the world placed nowhere, its
// every input waiting for a host that may never come.
//
// scans (nil: none) remembers how far each inbox was read, so that a
// caller that asks again and again (the orchestrator, every pass of a
// rollout) reads only what is new.
func versionsNeeded(ctx context.Context, st store.Store, scans *upgradeScans, id, universe string, live []store.WorkerInfo) ([]uint64, error) {
	cur, err := WorldVersion(ctx, st, id)
	if err != nil {
		return nil, err
	}
	to, err := scans.pending(ctx, st, id)
	if err != nil {
		return nil, err
	}
	if to != 0 && to != cur && !slices.ContainsFunc(live, func(w store.WorkerInfo) bool {
		return Runs(w, RoleHost) && eligibleFor(w, universe, nonzero(cur, to))
	}) {
		to = 0
	}
	return nonzero(cur, to), nil
}

// nonzero lists the distinct non-zero versions of vs, in order.
func nonzero(vs ...uint64) []uint64 {
	var out []uint64
	for _, v := range vs {
		if v != 0 && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// eligibleFor is Eligible for every version in vers (none: any version).
func eligibleFor(info store.WorkerInfo, universe string, vers []uint64) bool {
	if len(vers) == 0 {
		return Eligible(info, universe, 0)
	}
	for _, v := range vers {
		if !Eligible(info, universe, v) {
			return false
		}
	}
	return true
}

// uniform reports whether every live host in live that carries universe
// carries the same versions of it, so that a world's version cannot
// change where it may run, and placement need not read it.
func uniform(live []store.WorkerInfo, universe string) bool {
	prefix := capWorld + universe + "@"
	var first []string
	seen := false
	for _, w := range live {
		if len(w.Capabilities) == 0 || !Runs(w, RoleHost) {
			continue // an older binary carries whatever it carries: it is not told apart
		}
		var vs []string
		for _, c := range w.Capabilities {
			if len(c) > len(prefix) && c[:len(prefix)] == prefix {
				vs = append(vs, c)
			}
		}
		if len(vs) == 0 {
			continue
		}
		if !seen {
			first, seen = vs, true
		} else if !slices.Equal(first, vs) {
			return false
		}
	}
	return true
}
