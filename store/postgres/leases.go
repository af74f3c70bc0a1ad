package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
)

// Every lease operation is one SQL function call: one round trip, one
// transaction, committed durably (an epoch lost in a crash could be handed
// out twice).

// The functions answer typed failures as a code (see the migration), so
// that an acquisition race leaves no error in the server's log.
func (s *Store) leaseCall(ctx context.Context, op, world, sql string, args ...any) (store.Lease, error) {
	var l store.Lease
	err := s.retry(ctx, op, world, func() error {
		var code, detail string
		var epoch, exp int64
		if err := s.pool.QueryRow(ctx, sql, args...).Scan(&code, &detail, &l.Holder, &epoch, &exp); err != nil {
			return err
		}
		l.World, l.Epoch, l.ExpiresAt = world, uint64(epoch), fromNS(exp)
		return codeErr(op, world, code, detail)
	})
	if err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// Acquire implements protocol A (see acquire_lease).
func (s *Store) Acquire(ctx context.Context, world, worker string, ttl time.Duration) (store.Lease, error) {
	const op = "acquire"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, err
	}
	if worker == "" || ttl <= 0 || !validText(worker) || !validText(world) {
		return store.Lease{}, store.Errorf(op, store.ErrInvalid, world, "worker %q, ttl %v", worker, ttl)
	}
	return s.leaseCall(ctx, op, world, `SELECT * FROM acquire_lease($1, $2, $3, $4)`, world, worker, int64(ttl), s.off())
}

// Renew implements protocol B (see renew_lease).
func (s *Store) Renew(ctx context.Context, world, worker string, epoch uint64, ttl time.Duration) (store.Lease, error) {
	const op = "renew"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, err
	}
	if ttl <= 0 {
		return store.Lease{}, store.Errorf(op, store.ErrInvalid, world, "ttl %v", ttl)
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil || !validText(world) || !validText(worker) {
		return store.Lease{}, store.Errorf(op, store.ErrInvalid, world, "epoch %d, worker %q", epoch, worker)
	}
	return s.leaseCall(ctx, op, world, `SELECT * FROM renew_lease($1, $2, $3, $4, $5)`, world, worker, e, int64(ttl), s.off())
}

// Release implements store.Leases (see release_lease).
func (s *Store) Release(ctx context.Context, world, worker string, epoch uint64) error {
	const op = "release"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil || !validText(world) || !validText(worker) {
		return store.Errorf(op, store.ErrInvalid, world, "epoch %d, worker %q", epoch, worker)
	}
	return s.retry(ctx, op, world, func() error {
		var code, detail string
		if err := s.pool.QueryRow(ctx, `SELECT * FROM release_lease($1, $2, $3, $4)`, world, worker, e, s.off()).Scan(&code, &detail); err != nil {
			return err
		}
		return codeErr(op, world, code, detail)
	})
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, world string) (store.Lease, bool, error) {
	const op = "get_lease"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, false, err
	}
	var l store.Lease
	var found bool
	err := s.retry(ctx, op, world, func() error {
		var holder *string
		var epoch, exp *int64
		err := s.pool.QueryRow(ctx, `SELECT l.holder, l.epoch, l.expires_at_ns
			FROM worlds x LEFT JOIN leases l ON l.world = x.world WHERE x.world = $1`, world).Scan(&holder, &epoch, &exp)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		if err != nil {
			return err
		}
		found = holder != nil
		if found {
			l = store.Lease{World: world, Holder: *holder, Epoch: uint64(*epoch), ExpiresAt: fromNS(*exp)}
		}
		return nil
	})
	return l, found, err
}

// Assign implements store.Leases.
func (s *Store) Assign(ctx context.Context, world string, a store.Assignment) error {
	const op = "assign"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if !validText(world) || !validText(a.DesiredWorker) || !validText(a.Reason) || int64(a.Priority) != int64(int32(a.Priority)) {
		return store.Errorf(op, store.ErrInvalid, world, "assignment %+v", a)
	}
	return s.retry(ctx, op, world, func() error {
		tag, err := s.pool.Exec(ctx, `INSERT INTO assignments AS a (world, desired_worker, priority, reason)
			SELECT x.world, $2, $3, $4 FROM worlds x WHERE x.world = $1
			ON CONFLICT (world) DO UPDATE SET desired_worker = EXCLUDED.desired_worker,
				priority = EXCLUDED.priority, reason = EXCLUDED.reason`,
			world, a.DesiredWorker, int32(a.Priority), a.Reason)
		if err == nil && tag.RowsAffected() == 0 {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		return err
	})
}

// Unassign implements store.Leases; it is idempotent.
func (s *Store) Unassign(ctx context.Context, world string) error {
	const op = "unassign"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	return s.retry(ctx, op, world, func() error {
		var exists bool
		err := s.pool.QueryRow(ctx, `WITH d AS (DELETE FROM assignments WHERE world = $1)
			SELECT EXISTS (SELECT 1 FROM worlds WHERE world = $1)`, world).Scan(&exists)
		if err == nil && !exists {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		return err
	})
}

// GetAssignment implements store.Leases.
func (s *Store) GetAssignment(ctx context.Context, world string) (store.Assignment, bool, error) {
	const op = "get_assignment"
	if err := s.begin(ctx, op); err != nil {
		return store.Assignment{}, false, err
	}
	var a store.Assignment
	var found bool
	err := s.retry(ctx, op, world, func() error {
		var prio int32
		err := s.pool.QueryRow(ctx, `SELECT desired_worker, priority, reason FROM assignments WHERE world = $1`, world).
			Scan(&a.DesiredWorker, &prio, &a.Reason)
		if err == pgx.ErrNoRows {
			found = false
			return nil
		}
		a.Priority, found = int(prio), err == nil
		return err
	})
	return a, found, err
}

// WorkerWorlds implements store.Leases.
func (s *Store) WorkerWorlds(ctx context.Context, worker string) ([]string, error) {
	const op = "worker_worlds"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	out := []string{}
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.pool.Query(ctx, `SELECT world FROM leases WHERE holder = $1 AND holder <> '' AND expires_at_ns > now_ns($2)
			UNION SELECT world FROM assignments WHERE desired_worker = $1
			ORDER BY 1`, worker, s.off())
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if out == nil {
		out = []string{}
	}
	return out, err
}
