package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// CreateWorld implements store.Worlds (see create_world).
func (s *backend) CreateWorld(ctx context.Context, universe, world string, seed *store.Snapshot) (store.World, error) {
	const op = "create_world"
	if err := s.begin(op); err != nil {
		return store.World{}, err
	}
	var h int64
	var state []byte
	var hash string
	if seed != nil {
		h, state, hash = int64(seed.Height), seed.State, seed.StateHash
	}
	var created int64
	err := s.retry(ctx, op, world, func() error {
		return s.db.QueryRow(ctx, createWorldSQL, universe, world, seed != nil, h, state, hash, s.off()).Scan(&created)
	})
	if err != nil {
		return store.World{}, err
	}
	return store.World{ID: world, Universe: universe, Status: store.WorldActive, CreatedAt: fromNS(created)}, nil
}

// createWorldSQL calls the create_world function (CreateWorld, Spawn): $1
// universe, $2 world, $3 seeded, $4 the seed's height, $5 its state, $6
// its hash, $7 the clock's offset. It answers the creation time.
const createWorldSQL = `SELECT create_world($1, $2, $3, $4, $5, $6, $7)`

// Spawn implements store.Worlds: CreateWorld, the first items and, with a
// holder, Acquire and an Append of the events, in one transaction of one
// round trip (BEGIN … COMMIT pipelined) and two statements. Nothing in it
// waits for a Go decision, since on a world the transaction itself creates
// every step has one possible outcome:
//
//   - spawn_world creates the world (a taken id raises ErrWorldExists,
//     OR004, which fails the rest of the batch with it), writes the items
//     at seqs 1…n as a delivery writes them (at the world's creation time,
//     notifying the inbox's watchers), starts the journal stream at the
//     head the events leave, under the stream's row lock, and takes the
//     first lease (epoch 1: nobody else sees the world, so none holds its
//     lease row or assigns it). It answers acquire's row, which Go decides
//     again with contract.Acquire;
//   - the events are inserted at runSeq 1…h as the speculative append path
//     inserts them, decided in Go against head 0 under the fence of the
//     new lease: the stream is new and locked, so the head needs no
//     compare-and-swap and no key of it can be stored or compacted; the
//     unique index of keys stays the last word.
func (s *backend) Spawn(ctx context.Context, spec store.SpawnSpec) (store.Spawned, error) {
	const op = "spawn"
	if err := s.begin(op); err != nil {
		return store.Spawned{}, err
	}
	// The front's CheckSpawn refused a key given twice and the inbox is new, so every
	// item is new.
	n := len(spec.Items)
	kinds, payloads, keys := make([]string, n), make([][]byte, n), make([]string, n)
	for i, it := range spec.Items {
		kinds[i], payloads[i], keys[i] = it.Kind, it.Payload, it.DedupeKey
	}
	// The events: a fenced Append under the new lease (the world's first:
	// epoch 1) expecting head 0, decided against the head spawn_world
	// leaves, so the decision holds for every attempt. Being new, at the
	// head expected and under a fence spawn_world takes, they cannot be
	// refused: a refusal would be a bug, reported before anything is sent.
	var journal *speculation
	head := int64(0)
	if len(spec.Events) > 0 {
		r := newAppendReq(ctx, op, spec.World, spec.Events)
		r.opts = store.AppendOptions{Fence: &store.Fence{World: spec.World, Epoch: 1}}
		r.head = store.Head(0)
		journal = newSpeculation([]*appendReq{r})
		journal.decide(map[string]*streamRow{spec.World: {}})
		if journal.pl.res[0].err != nil {
			return store.Spawned{}, errDisagree(op, spec.World)
		}
		head = int64(journal.v.heads[spec.World].head)
	}
	var created int64
	var lease acquired
	err := s.oneTrip(ctx, op, spec.World, func(b *batch) {
		b.queue(func(br pgx.BatchResults) error {
			return br.QueryRow().Scan(&created, &lease.found, &lease.status, &lease.assigned, &lease.desired,
				&lease.leased, &lease.holder, &lease.epoch, &lease.exp, &lease.now, &lease.written)
		}, spawnWorldSQL, spec.Universe, spec.World, spec.Holder, int64(spec.TTL), head, kinds, payloads, keys, s.off(), spec.Incarnation)
		if journal != nil {
			s.queueInserts(b, journal.pl)
			s.queueCycles(b, journal.pl, journal.v, nil)
		}
	})
	if err != nil {
		return store.Spawned{}, err
	}
	out := store.Spawned{
		World: store.World{ID: spec.World, Universe: spec.Universe, Status: store.WorldActive, CreatedAt: fromNS(created)},
		Seqs:  make([]uint64, len(spec.Items)),
	}
	for i := range out.Seqs {
		out.Seqs[i] = uint64(i + 1)
	}
	if spec.Holder != "" {
		// spawn_world wrote what this decides; a disagreement would be a
		// bug in one of them.
		if out.Lease, err = lease.decide(op, spec.World, spec.Holder, spec.Incarnation, spec.TTL); err != nil {
			return store.Spawned{}, err
		}
	}
	// The heads the spawn left (0, or the events' last runSeq) are the
	// world's next append's guess: it may take the speculative path.
	heads := map[string]*streamRow{spec.World: {}}
	if journal != nil {
		out.Appended, heads = journal.pl.answers()[0].out, journal.v.heads
	}
	s.heads.remember(heads)
	if len(spec.Items) > 0 {
		s.hint(store.TopicInbox(spec.World))
	}
	if spec.Holder != "" {
		s.hint(store.TopicLeases)
	}
	return out, nil
}

// spawnWorldSQL calls spawn_world (Spawn's world, items, stream and first
// lease): $1 universe, $2 world, $3 holder (” for none), $4 TTL, $5 the
// stream's head after the events, $6–$8 the items' kinds, payloads and
// dedupe keys, $9 the clock's offset.
const spawnWorldSQL = `SELECT * FROM spawn_world($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// ForkWorld implements store.Worlds (see fork_world): one transaction,
// whose cost is one snapshot row whatever the source's history.
func (s *backend) ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (store.World, error) {
	const op = "fork_world"
	if err := s.begin(op); err != nil {
		return store.World{}, err
	}
	w := store.World{ID: newWorld, Status: store.WorldActive, ParentWorld: src, ForkedAtHeight: height}
	err := s.retry(ctx, op, src, func() error {
		var created int64
		err := s.db.QueryRow(ctx, `SELECT * FROM fork_world($1, $2, $3, $4)`, src, int64(height), newWorld, s.off()).
			Scan(&w.Universe, &w.ParentSnapshotHash, &created)
		w.CreatedAt = fromNS(created)
		return err
	})
	if err != nil {
		if se, ok := err.(*store.Error); ok && se.Kind == store.ErrWorldExists {
			se.World = newWorld
		}
		return store.World{}, err
	}
	return w, nil
}

// ForkWorldFrom implements store.Worlds: ForkWorld with the caller's
// state as the fork's baseline. The source's row is read under a share
// lock with its head in a first round trip (so it can neither go nor its
// universe change before the commit), decided in Go, and the fork is
// written in a second: create_world seeds it as CreateWorld seeds a world
// and the same transaction records its lineage.
func (s *backend) ForkWorldFrom(ctx context.Context, src string, base store.Snapshot, newWorld string) (store.World, error) {
	const op = "fork_world_from"
	if err := s.begin(op); err != nil {
		return store.World{}, err
	}
	w := store.World{ID: newWorld, Status: store.WorldActive, ParentWorld: src, ParentSnapshotHash: base.StateHash, ForkedAtHeight: base.Height}
	var found bool
	var head, created int64
	err := s.twoTrips(ctx, op, newWorld, func(b *batch) {
		found, head = false, 0
		b.queue(func(br pgx.BatchResults) error {
			return scanEach(br, []any{&w.Universe, &head}, func() { found = true })
		}, `SELECT w.universe, COALESCE(x.head, 0) FROM worlds w LEFT JOIN streams x ON x.stream = w.world
			WHERE w.world = $1 FOR SHARE OF w`, src)
	}, func(b *batch) error {
		switch {
		case !found:
			return store.Errorf(op, store.ErrWorldNotFound, src, "fork source")
		case int64(base.Height) > head:
			return store.Errorf(op, store.ErrInvalid, src, "fork height %d passes the journal head %d", base.Height, head)
		}
		b.queue(func(br pgx.BatchResults) error { return br.QueryRow().Scan(&created) },
			createWorldSQL, w.Universe, newWorld, true, int64(base.Height), base.State, base.StateHash, s.off())
		b.queue(nil, `UPDATE worlds SET parent_world = $2, parent_snapshot_hash = $3, forked_at_height = $4 WHERE world = $1`,
			newWorld, src, base.StateHash, int64(base.Height))
		return nil
	})
	if err != nil {
		if se, ok := err.(*store.Error); ok && se.Kind == store.ErrWorldExists {
			se.World = newWorld
		}
		return store.World{}, err
	}
	w.CreatedAt = fromNS(created)
	return w, nil
}

const worldCols = `world, universe, status, status_reason, status_changed_at_ns, parent_world, parent_snapshot_hash, forked_at_height, created_at_ns`

func scanWorld(row pgx.CollectableRow) (store.World, error) {
	return scanWorldRow(row)
}

func scanWorldRow(row pgx.Row) (store.World, error) {
	var w store.World
	var status string
	var changed, height, created int64
	err := row.Scan(&w.ID, &w.Universe, &status, &w.StatusReason, &changed, &w.ParentWorld, &w.ParentSnapshotHash, &height, &created)
	w.Status, w.StatusChangedAt, w.ForkedAtHeight, w.CreatedAt = store.WorldStatus(status), fromNS(changed), uint64(height), fromNS(created)
	return w, err
}

// GetWorld implements store.Worlds.
func (s *backend) GetWorld(ctx context.Context, world string) (store.World, error) {
	const op = "get_world"
	if err := s.begin(op); err != nil {
		return store.World{}, err
	}
	var w store.World
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.db.Query(ctx, `SELECT `+worldCols+` FROM worlds WHERE world = $1`, world)
		var err error
		w, err = pgx.CollectExactlyOneRow(rows, scanWorld)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		return err
	})
	return w, err
}

// ListWorlds implements store.Worlds.
func (s *backend) ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error) {
	const op = "list_worlds"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	var out []store.World
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.db.Query(ctx, `SELECT `+worldCols+` FROM worlds
			WHERE universe = $1 AND ($2 = '' OR status = $2) ORDER BY world`, universe, string(status))
		var err error
		out, err = pgx.CollectRows(rows, scanWorld)
		return err
	})
	return out, err
}

// SetWorldStatus implements store.Worlds, the operator's path: no lease.
// It locks the world's row, then its lease row (the lock order; an
// acquisition holds the world row FOR KEY SHARE, so one waits for the
// other), decides with contract.Transition, and when the world leaves
// active releases the lease in the same transaction: its holder is fenced
// at once.
func (s *backend) SetWorldStatus(ctx context.Context, world string, status store.WorldStatus, reason string) (store.World, error) {
	const op = "set_world_status"
	if err := s.begin(op); err != nil {
		return store.World{}, err
	}
	var w store.World
	var held, changed bool
	var now int64
	err := s.twoTrips(ctx, op, world, func(b *batch) {
		held, changed = false, false
		b.queue(func(br pgx.BatchResults) error {
			var err error
			w, err = scanWorldRow(br.QueryRow())
			if err == pgx.ErrNoRows {
				return store.Errorf(op, store.ErrWorldNotFound, world, "")
			}
			return err
		}, `SELECT `+worldCols+` FROM worlds WHERE world = $1 FOR UPDATE`, world)
		b.queue(func(br pgx.BatchResults) error {
			return scanEach(br, []any{&held}, func() {})
		}, `SELECT holder <> '' FROM leases WHERE world = $1 FOR UPDATE`, world)
		b.queue(func(br pgx.BatchResults) error { return br.QueryRow().Scan(&now) }, `SELECT now_ns($1)`, s.off())
	}, func(b *batch) error {
		noop, endLease, err := contract.Transition(op, world, w.Status, status)
		if err != nil || noop {
			return err
		}
		changed = true
		w.Status, w.StatusReason, w.StatusChangedAt = status, reason, fromNS(now)
		held = endLease && held
		b.queue(nil, notifySQL, queueStatus(b, world, status, reason, held, now))
		if contract.WithdrawsPending(status) {
			queueWithdrawals(b, nil, nil, []string{world}, s.off(), nil)
		}
		return nil
	})
	if err != nil {
		return store.World{}, err
	}
	if changed {
		s.hint(store.TopicAssignments)
	}
	if held {
		s.hint(store.TopicLeases)
	}
	return w, nil
}

// queueStatus queues a decided status change of world on b (SetWorldStatus,
// and a Commit's Status): the world's row, and its lease's when the world
// leaves active with a holder (released, epoch kept, expiry now if later).
// Both rows must be locked already (FOR UPDATE the world's, before its
// lease's). It returns the topics the change hints.
func queueStatus(b *batch, world string, status store.WorldStatus, reason string, endLease bool, now int64) []string {
	b.queue(nil, `UPDATE worlds SET status = $2, status_reason = $3, status_changed_at_ns = $4 WHERE world = $1`,
		world, string(status), reason, now)
	if endLease {
		b.queue(nil, `UPDATE leases SET holder = '', expires_at_ns = least(expires_at_ns, $2) WHERE world = $1`, world, now)
	}
	return statusTopics(endLease)
}

// statusTopics are the topics a status change hints.
func statusTopics(endLease bool) []string {
	if endLease {
		return []string{store.TopicAssignments, store.TopicLeases}
	}
	return []string{store.TopicAssignments}
}

// queueStatusNow is queueStatus in a transaction that read no time (a
// Commit on the speculative path, whose locks queueSpeculation takes): the
// change records the store's clock at its write, read once for the world's
// row and its lease's end.
func queueStatusNow(b *batch, world string, status store.WorldStatus, reason string, endLease bool, off int64) []string {
	if !endLease {
		b.queue(nil, `UPDATE worlds SET status = $2, status_reason = $3, status_changed_at_ns = now_ns($4) WHERE world = $1`,
			world, string(status), reason, off)
	} else {
		b.queue(nil, statusEndSQL, world, string(status), reason, off)
	}
	return statusTopics(endLease)
}
