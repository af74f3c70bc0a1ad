package sqlite

import (
	"context"
	"database/sql"
	"math"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Leases (protocols A and B). A lease has expired when its expiry is at or
// before the store clock. Every lease write goes through the committer, so
// it is durable (synchronous=FULL) before the caller learns its epoch: an
// epoch is never handed out twice, even across a crash.

type leaseRow struct {
	found   bool
	holder  string
	epoch   int64
	expires int64
}

func (t *wtx) lease(world string) (leaseRow, error) {
	var l leaseRow
	found, err := t.queryRow(`SELECT holder, epoch, expires_at FROM leases WHERE world = ?`, []any{world}, &l.holder, &l.epoch, &l.expires)
	l.found = found
	return l, err
}

func (l leaseRow) lease(world string) store.Lease {
	return store.Lease{World: world, Holder: l.holder, Epoch: uint64(l.epoch), ExpiresAt: fromNS(l.expires)}
}

func (l leaseRow) live(nowNS int64) bool { return l.found && l.holder != "" && l.expires > nowNS }

// expiry is nowNS + ttl, saturating at the end of the int64 range.
func expiry(nowNS int64, ttl time.Duration) int64 {
	if e := nowNS + int64(ttl); e >= nowNS {
		return e
	}
	return math.MaxInt64
}

// Acquire takes the world's lease (protocol A).
func (s *Store) Acquire(ctx context.Context, world, worker string, ttl time.Duration) (store.Lease, error) {
	const op = "acquire"
	if err := checkWorker(op, world, worker, "ttl", ttl); err != nil {
		return store.Lease{}, err
	}
	var out store.Lease
	err := s.write(ctx, op, world, func(t *wtx) error {
		status, err := t.worldStatus(op, world)
		if err != nil {
			return err
		}
		if err := requireActive(op, world, status); err != nil {
			return err
		}
		var desired string
		found, err := t.queryRow(`SELECT desired_worker FROM assignments WHERE world = ?`, []any{world}, &desired)
		if err != nil {
			return err
		}
		if found && desired != "" && desired != worker {
			return store.Errorf(op, store.ErrNotAssigned, world, "assigned to %s", desired)
		}
		l, err := t.lease(world)
		if err != nil {
			return err
		}
		if l.live(t.nowNS) {
			if l.holder == worker {
				out = l.lease(world)
				return nil
			}
			return store.Errorf(op, store.ErrLeaseHeld, world, "held by %s at epoch %d", l.holder, l.epoch)
		}
		next := leaseRow{found: true, holder: worker, epoch: l.epoch + 1, expires: expiry(t.nowNS, ttl)}
		if _, err := t.exec(`INSERT INTO leases (world, holder, epoch, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (world) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires_at = excluded.expires_at`,
			world, next.holder, next.epoch, next.expires); err != nil {
			return err
		}
		out = next.lease(world)
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// holderCheck is protocol B's test, shared by Renew and Release: the world
// exists; an absent or released lease is held by nobody (ErrNotHolder), as
// is one held by another worker; the holder at another epoch gets
// ErrStaleEpoch. checkExpiry also treats an expired lease as held by
// nobody.
func (t *wtx) holderCheck(op, world, worker string, epoch uint64, checkExpiry bool) (leaseRow, error) {
	if _, err := t.worldStatus(op, world); err != nil {
		return leaseRow{}, err
	}
	l, err := t.lease(world)
	if err != nil {
		return l, err
	}
	switch {
	case !l.found || l.holder == "":
		return l, store.Errorf(op, store.ErrNotHolder, world, "lease not held")
	case l.holder != worker:
		return l, store.Errorf(op, store.ErrNotHolder, world, "held by %s", l.holder)
	case uint64(l.epoch) != epoch:
		return l, store.Errorf(op, store.ErrStaleEpoch, world, "epoch %d, lease epoch %d", epoch, l.epoch)
	case checkExpiry && l.expires <= t.nowNS:
		return l, store.Errorf(op, store.ErrNotHolder, world, "lease expired")
	}
	return l, nil
}

// Renew extends the lease (protocol B). An expired lease is not renewed,
// even when nobody took it over: its holder's writes were already fenced,
// so it must Acquire again (a new epoch).
func (s *Store) Renew(ctx context.Context, world, worker string, epoch uint64, ttl time.Duration) (store.Lease, error) {
	const op = "renew"
	var out store.Lease
	err := s.write(ctx, op, world, func(t *wtx) error {
		if ttl <= 0 {
			return store.Errorf(op, store.ErrInvalid, world, "ttl %v must be positive", ttl)
		}
		l, err := t.holderCheck(op, world, worker, epoch, true)
		if err != nil {
			return err
		}
		l.expires = expiry(t.nowNS, ttl)
		if _, err := t.exec(`UPDATE leases SET expires_at = ? WHERE world = ?`, l.expires, world); err != nil {
			return err
		}
		out = l.lease(world)
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// Release gives the lease up, keeping its epoch (and ending its expiry
// now). Releasing a lease already released at the same epoch is a no-op, so
// a retried release succeeds; an expired lease may still be released by its
// holder.
func (s *Store) Release(ctx context.Context, world, worker string, epoch uint64) error {
	const op = "release"
	return s.write(ctx, op, world, func(t *wtx) error {
		if _, err := t.worldStatus(op, world); err != nil {
			return err
		}
		l, err := t.lease(world)
		if err != nil {
			return err
		}
		if l.found && l.holder == "" && uint64(l.epoch) == epoch {
			return nil
		}
		if _, err := t.holderCheck(op, world, worker, epoch, false); err != nil {
			return err
		}
		_, err = t.exec(`UPDATE leases SET holder = '', expires_at = MIN(expires_at, ?) WHERE world = ?`, t.nowNS, world)
		return err
	})
}

// GetLease reads the lease record (ok=false if the world was never leased).
func (s *Store) GetLease(ctx context.Context, world string) (store.Lease, bool, error) {
	const op = "get_lease"
	if err := s.read(ctx, op); err != nil {
		return store.Lease{}, false, err
	}
	var (
		l       leaseRow
		holder  sql.NullString
		epoch   sql.NullInt64
		expires sql.NullInt64
	)
	found, err := s.queryRow(ctx, `SELECT l.holder, l.epoch, l.expires_at FROM worlds w LEFT JOIN leases l ON l.world = w.id WHERE w.id = ?`,
		[]any{world}, &holder, &epoch, &expires)
	if err != nil {
		return store.Lease{}, false, dbErr(op, world, err)
	}
	if !found {
		return store.Lease{}, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	if !epoch.Valid {
		return store.Lease{}, false, nil
	}
	l.holder, l.epoch, l.expires = holder.String, epoch.Int64, expires.Int64
	return l.lease(world), true, nil
}

// Assign writes the world's desired placement.
func (s *Store) Assign(ctx context.Context, world string, a store.Assignment) error {
	const op = "assign"
	return s.write(ctx, op, world, func(t *wtx) error {
		if _, err := t.worldStatus(op, world); err != nil {
			return err
		}
		_, err := t.exec(`INSERT INTO assignments (world, desired_worker, priority, reason) VALUES (?, ?, ?, ?)
			ON CONFLICT (world) DO UPDATE SET desired_worker = excluded.desired_worker, priority = excluded.priority, reason = excluded.reason`,
			world, a.DesiredWorker, int64(a.Priority), a.Reason)
		return err
	})
}

// Unassign removes the desired placement (a no-op if there is none).
func (s *Store) Unassign(ctx context.Context, world string) error {
	const op = "unassign"
	return s.write(ctx, op, world, func(t *wtx) error {
		if _, err := t.worldStatus(op, world); err != nil {
			return err
		}
		_, err := t.exec(`DELETE FROM assignments WHERE world = ?`, world)
		return err
	})
}

// GetAssignment reads the desired placement.
func (s *Store) GetAssignment(ctx context.Context, world string) (store.Assignment, bool, error) {
	const op = "get_assignment"
	if err := s.read(ctx, op); err != nil {
		return store.Assignment{}, false, err
	}
	var (
		a        store.Assignment
		priority int64
	)
	found, err := s.queryRow(ctx, `SELECT desired_worker, priority, reason FROM assignments WHERE world = ?`, []any{world},
		&a.DesiredWorker, &priority, &a.Reason)
	if err != nil {
		return store.Assignment{}, false, dbErr(op, world, err)
	}
	if !found {
		return store.Assignment{}, false, nil
	}
	a.Priority = int(priority)
	return a, true, nil
}

// WorkerWorlds lists, sorted, the worlds whose unexpired lease worker holds
// or whose assignment names worker.
func (s *Store) WorkerWorlds(ctx context.Context, worker string) ([]string, error) {
	const op = "worker_worlds"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	if worker == "" {
		return nil, nil
	}
	rows, err := s.query(ctx, `
		SELECT world FROM leases WHERE holder = ? AND expires_at > ?
		UNION
		SELECT world FROM assignments WHERE desired_worker = ?
		ORDER BY 1`, worker, ns(s.cfg.clock()), worker)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, dbErr(op, "", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, "", err)
	}
	return out, nil
}

// checkWorker checks a worker id and a positive duration (what names it in
// the error), as leases and queue claims need.
func checkWorker(op, world, worker, what string, d time.Duration) error {
	if worker == "" {
		return store.Errorf(op, store.ErrInvalid, world, "empty worker")
	}
	if d <= 0 {
		return store.Errorf(op, store.ErrInvalid, world, "%s %v must be positive", what, d)
	}
	return nil
}
