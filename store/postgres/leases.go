package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// Every lease operation is one SQL function call: one round trip, one
// transaction, committed durably (an epoch lost in a crash could be handed
// out twice). The functions write only when the contract's decision (which
// they mirror) says so, and return the rows they read: the decision and
// its typed error are made here, by store/internal/contract, on those rows.

// errDisagree reports a lease function whose write disagrees with the
// contract's decision on the rows it read (a bug in the SQL mirror).
func errDisagree(op, world string) error {
	return store.Errorf(op, errUnreachable, world, "the SQL and the contract decided differently")
}

// acquired is what the acquire function answers: the rows it read under
// lock and whether it wrote.
type acquired struct {
	found, assigned, leased, written bool
	status, desired, holder          string
	epoch, exp, now                  int64
	inc, displaced                   *string // NULL in acquire_leases rows of leases never written
	tookOver                         *bool
}

// row is the lease row the function read.
func (a *acquired) row() contract.LeaseRow {
	if !a.leased {
		return contract.LeaseRow{}
	}
	l := contract.LeaseRow{Found: true, Holder: a.holder, Epoch: uint64(a.epoch), ExpiresAt: fromNS(a.exp)}
	if a.inc != nil {
		l.Incarnation = *a.inc
	}
	if a.tookOver != nil {
		l.TookOver = *a.tookOver
	}
	if a.displaced != nil {
		l.Displaced = *a.displaced
	}
	return l
}

// decide decides again with contract.Acquire on the rows the function
// read, and refuses an answer on which the two disagree.
func (a *acquired) decide(op, world, worker, inc string, ttl time.Duration) (store.Lease, error) {
	if !a.found {
		return store.Lease{}, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	next, keep, err := contract.Acquire(op, world, worker, inc, store.WorldStatus(a.status), a.desired, a.assigned, a.row(), fromNS(a.now), ttl)
	if (err != nil || keep) == a.written {
		return store.Lease{}, errDisagree(op, world)
	}
	if err != nil {
		return store.Lease{}, err
	}
	return next.Lease(world), nil
}

// AcquireLeases implements store.Leases: one call of acquire_leases, one
// round trip for any number of worlds. The function returns, for each
// distinct world that exists, the rows it decided on under lock and
// whether it wrote; contract.Acquire decides each world here again, in the
// caller's order, on the row as the decisions before it left it (a world
// named twice meets, the second time, the lease its first occurrence
// took), and an answer on which the SQL and the contract disagree is
// refused.
func (s *backend) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...store.AcquireOption) ([]store.AcquireResult, error) {
	const op = "acquire_leases"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	o, err := store.ResolveAcquireOptions(op, opts)
	if err != nil {
		return nil, err
	}
	inc := o.Incarnation
	out := make([]store.AcquireResult, len(worlds))
	if len(worlds) == 0 {
		return out, nil
	}
	asked := make(map[string]bool, len(worlds))
	for _, w := range worlds {
		asked[w] = true
	}
	wrote := false
	err = s.retry(ctx, op, "", func() error {
		rows, _ := s.db.Query(ctx, `SELECT * FROM acquire_leases($1, $2, $3, $4, $5)`, worker, inc, worlds, int64(ttl), s.off())
		read := make(map[string]*bulkAcquired, len(asked))
		var world, universe string
		var backlog bool
		var next *int64
		var a acquired
		_, err := pgx.ForEachRow(rows, []any{&world, &a.status, &universe, &a.assigned, &a.desired, &a.leased, &a.holder,
			&a.epoch, &a.exp, &a.now, &a.written, &backlog, &next, &a.inc, &a.tookOver, &a.displaced}, func() error {
			if !asked[world] || read[world] != nil {
				return errUnreachable
			}
			a.found = true
			read[world] = &bulkAcquired{acquired: a, universe: universe, backlog: backlog}
			if next != nil {
				read[world].next = fromNS(*next)
			}
			return nil
		})
		if err != nil {
			return err
		}
		wrote = false
		for i, w := range worlds {
			res := store.AcquireResult{World: w}
			r := read[w]
			if r == nil {
				res.Err = store.Errorf("acquire", store.ErrWorldNotFound, w, "")
				out[i] = res
				continue
			}
			first := !r.decided
			if first {
				r.row = r.acquired.row()
				r.decided = true
			}
			next, keep, err := contract.Acquire("acquire", w, worker, inc, store.WorldStatus(r.status), r.desired, r.assigned, r.row, fromNS(r.now), ttl)
			took := err == nil && !keep
			if first && took != r.written || !first && took {
				return errDisagree(op, w)
			}
			if took {
				r.row = next
				wrote = true
			}
			res.Err = err
			if err == nil {
				res.Lease = next.Lease(w)
				res.Universe, res.Backlog, res.NextTimer = r.universe, r.backlog, r.next
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if wrote {
		s.hint(store.TopicLeases)
	}
	return out, nil
}

// bulkAcquired is one world's row of acquire_leases, and the lease as the
// decisions made so far left it.
type bulkAcquired struct {
	acquired
	universe string
	backlog  bool
	next     time.Time // the earliest timer not delivered (zero: none)
	decided  bool
	row      contract.LeaseRow
}

// RenewLeases implements store.Leases: one call of renew_leases, one round
// trip for any number of refs.
func (s *backend) RenewLeases(ctx context.Context, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	return s.bulkLeases(ctx, "renew_leases", worker, refs, ttl)
}

// ReleaseLeases implements store.Leases: one call of release_leases.
func (s *backend) ReleaseLeases(ctx context.Context, worker string, refs []store.LeaseRef) ([]store.LeaseResult, error) {
	return s.bulkLeases(ctx, "release_leases", worker, refs, 0)
}

// bulkLeases renews (ttl > 0) or releases (ttl == 0) refs in one round
// trip, and answers each ref as Renew or Release would alone: the SQL
// function returns the lease rows as it read them under lock, and
// contract.Holder or contract.ReleaseCheck decides each ref on them.
func (s *backend) bulkLeases(ctx context.Context, op, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	renew := op == "renew_leases"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	ws, es := make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		ws[i], es[i] = r.World, int64(r.Epoch)
	}
	out := make([]store.LeaseResult, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	released := false
	err := s.retry(ctx, op, "", func() error {
		var rows pgx.Rows
		if renew {
			rows, _ = s.db.Query(ctx, renewLeasesSQL, worker, ws, es, int64(ttl), s.off())
		} else {
			rows, _ = s.db.Query(ctx, `SELECT * FROM release_leases($1, $2, $3, $4)`, worker, ws, es, s.off())
		}
		var ord, epoch, exp, now int64
		var found, leased, done bool
		var holder, inc string
		dest := []any{&ord, &found, &leased, &holder, &epoch, &exp, &now, &done}
		if renew {
			dest = append(dest, &inc)
		}
		n := 0
		_, err := pgx.ForEachRow(rows, dest, func() error {
			i := int(ord) - 1
			if i < 0 || i >= len(refs) {
				return errUnreachable
			}
			n++
			ref := refs[i]
			row := contract.LeaseRow{Found: leased, Holder: holder, Epoch: uint64(epoch), ExpiresAt: fromNS(exp)}
			res := store.LeaseResult{World: ref.World}
			var err error
			var noop bool
			switch {
			case !found:
				err = store.Errorf(op, store.ErrWorldNotFound, ref.World, "")
			case renew:
				err = contract.Holder(op, ref.World, worker, ref.Epoch, row, fromNS(now))
			default:
				noop, err = contract.ReleaseCheck(op, ref.World, worker, ref.Epoch, row)
			}
			if (err == nil && !noop) != done {
				return errDisagree(op, ref.World)
			}
			switch {
			case err != nil:
				res.Err = err
			case renew:
				res.Lease = store.Lease{World: ref.World, Holder: worker, Incarnation: inc, Epoch: ref.Epoch, ExpiresAt: fromNS(now).Add(ttl)}
			default:
				res.Lease = store.Lease{World: ref.World, Epoch: ref.Epoch, ExpiresAt: fromNS(min(exp, now))}
				released = released || done
			}
			out[i] = res
			return nil
		})
		if err == nil && n != len(refs) {
			err = errUnreachable
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if released {
		s.hint(store.TopicLeases)
	}
	return out, nil
}

// GetLease implements store.Leases.
func (s *backend) GetLease(ctx context.Context, world string) (store.Lease, bool, error) {
	const op = "get_lease"
	if err := s.begin(op); err != nil {
		return store.Lease{}, false, err
	}
	var l store.Lease
	var found bool
	err := s.retry(ctx, op, world, func() error {
		var holder, inc *string
		var epoch, exp *int64
		err := s.db.QueryRow(ctx, `SELECT l.holder, l.epoch, l.expires_at_ns, l.incarnation
			FROM worlds x LEFT JOIN leases l ON l.world = x.world WHERE x.world = $1`, world).Scan(&holder, &epoch, &exp, &inc)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		if err != nil {
			return err
		}
		found = holder != nil
		if found {
			l = contract.LeaseRow{Found: true, Holder: *holder, Incarnation: *inc, Epoch: uint64(*epoch), ExpiresAt: fromNS(*exp)}.Lease(world)
		}
		return nil
	})
	return l, found, err
}

// Assign implements store.Leases.
func (s *backend) Assign(ctx context.Context, world string, a store.Assignment, by *store.Fence) error {
	const op = "assign"
	if err := s.begin(op); err != nil {
		return err
	}
	return s.oneTrip(ctx, op, world, func(b *batch) {
		s.queueAuthority(b, by)
		b.queue(func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() == 0 {
				return store.Errorf(op, store.ErrWorldNotFound, world, "")
			}
			return err
		}, `INSERT INTO assignments AS a (world, desired_worker, priority, reason)
			SELECT x.world, $2, $3, $4 FROM worlds x WHERE x.world = $1
			ON CONFLICT (world) DO UPDATE SET desired_worker = EXCLUDED.desired_worker,
				priority = EXCLUDED.priority, reason = EXCLUDED.reason`,
			world, a.DesiredWorker, int64(a.Priority), a.Reason)
		b.queue(nil, `SELECT notify_topic('assignments')`)
	})
}

// Unassign implements store.Leases; it is idempotent.
func (s *backend) Unassign(ctx context.Context, world string, by *store.Fence) error {
	const op = "unassign"
	if err := s.begin(op); err != nil {
		return err
	}
	return s.oneTrip(ctx, op, world, func(b *batch) {
		s.queueAuthority(b, by)
		b.queue(func(br pgx.BatchResults) error {
			var exists bool
			err := br.QueryRow().Scan(&exists)
			if err == nil && !exists {
				return store.Errorf(op, store.ErrWorldNotFound, world, "")
			}
			return err
		}, `WITH d AS (DELETE FROM assignments WHERE world = $1)
			SELECT EXISTS (SELECT 1 FROM worlds WHERE world = $1)`, world)
		b.queue(nil, `SELECT notify_topic('assignments')`)
	})
}

// CompareAndAssign implements store.Leases. Each case is one statement
// whose write is conditioned on the row it finds (reassignSQL), so the
// compare and the write cannot interleave with another writer's: a row
// changed meanwhile is read again by the UPDATE or DELETE after its lock,
// and a row inserted meanwhile is met by the INSERT's conflict clause.
func (s *backend) CompareAndAssign(ctx context.Context, world string, prev, next *store.Assignment, by *store.Fence) error {
	const op = "compare_and_assign"
	if err := s.begin(op); err != nil {
		return err
	}
	sql, args := reassignSQL(world, prev, next)
	return s.oneTrip(ctx, op, world, func(b *batch) {
		s.queueAuthority(b, by)
		b.queue(func(br pgx.BatchResults) error {
			var done, exists bool
			if err := br.QueryRow().Scan(&done, &exists); err != nil {
				return err
			}
			switch {
			case !exists:
				return store.Errorf(op, store.ErrWorldNotFound, world, "")
			case !done:
				return store.Errorf(op, store.ErrAssignmentChanged, world, "")
			}
			return nil
		}, sql, args...)
		b.queue(nil, `SELECT notify_topic('assignments')`)
	})
}

// reassignSQL is CompareAndAssign's statement and its arguments: it
// answers whether the assignment now is next (written, or found so: a
// retry of a write whose answer was lost), and whether the world exists.
// $1 is the world, $2-$4 next's fields, and prev's follow.
func reassignSQL(world string, prev, next *store.Assignment) (string, []any) {
	const exists = `EXISTS (SELECT 1 FROM worlds WHERE world = $1)`
	is := func(n int) string {
		return fmt.Sprintf(`a.desired_worker = $%d AND a.priority = $%d AND a.reason = $%d`, n, n+1, n+2)
	}
	args := []any{world}
	if next != nil {
		args = append(args, next.DesiredWorker, int64(next.Priority), next.Reason)
	}
	if prev != nil {
		args = append(args, prev.DesiredWorker, int64(prev.Priority), prev.Reason)
	}
	switch {
	case prev == nil && next == nil:
		return `SELECT NOT EXISTS (SELECT 1 FROM assignments WHERE world = $1), ` + exists, args
	case prev == nil:
		return `WITH d AS (INSERT INTO assignments AS a (world, desired_worker, priority, reason)
				SELECT x.world, $2, $3, $4 FROM worlds x WHERE x.world = $1
				ON CONFLICT (world) DO UPDATE SET world = a.world WHERE ` + is(2) + ` RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM d), ` + exists, args
	case next == nil:
		return `WITH d AS (DELETE FROM assignments a WHERE a.world = $1 AND ` + is(2) + ` RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM d) OR NOT EXISTS (SELECT 1 FROM assignments WHERE world = $1), ` + exists, args
	}
	return `WITH d AS (UPDATE assignments a SET desired_worker = $2, priority = $3, reason = $4
			WHERE a.world = $1 AND (` + is(5) + ` OR ` + is(2) + `) RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM d), ` + exists, args
}

// GetAssignment implements store.Leases.
func (s *backend) GetAssignment(ctx context.Context, world string) (store.Assignment, bool, error) {
	const op = "get_assignment"
	if err := s.begin(op); err != nil {
		return store.Assignment{}, false, err
	}
	var a store.Assignment
	var found bool
	err := s.retry(ctx, op, world, func() error {
		var prio int64
		err := s.db.QueryRow(ctx, `SELECT desired_worker, priority, reason FROM assignments WHERE world = $1`, world).
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

// listWorkerWorldsSQL is one page of ListWorkerWorlds ($1 worker, $2
// after, $3 limit, $4 clock offset).
const listWorkerWorldsSQL = `WITH page AS (
		SELECT world FROM (
			(SELECT l.world FROM leases l
			 WHERE l.holder = $1 AND l.holder <> '' AND l.world > $2 AND l.expires_at_ns > (SELECT now_ns($4))
			 ORDER BY l.world LIMIT $3)
			UNION
			(SELECT a.world FROM assignments a
			 WHERE a.desired_worker = $1 AND a.world > $2
			 ORDER BY a.world LIMIT $3)
		) AS m ORDER BY world LIMIT $3)
	SELECT page.world, l.holder, l.epoch, l.expires_at_ns, a.desired_worker, a.priority, a.reason, l.incarnation,
		coalesce(b.backlog, false)
	FROM page
	LEFT JOIN LATERAL (SELECT * FROM leases x WHERE x.world = page.world LIMIT 1) AS l ON true
	LEFT JOIN LATERAL (SELECT * FROM assignments y WHERE y.world = page.world LIMIT 1) AS a ON true
	LEFT JOIN LATERAL (SELECT w.inbox_seq > coalesce(s.inbox_cursor, 0) AS backlog
		FROM worlds w LEFT JOIN streams s ON s.stream = w.world WHERE w.world = page.world LIMIT 1) AS b ON true
	ORDER BY page.world`

// ListWorkerWorlds implements store.Leases: one query per page. Each side
// (the unexpired leases worker holds, on leases_by_holder (holder, world);
// its assignments, on assignments_by_worker (desired_worker, world)) is an
// index range scan from after, cut at limit; the two merge by world id and
// are cut again, and each row's lease and assignment are primary-key
// lookups (LATERAL … LIMIT 1 is never turned into a join that scans a
// table). So a page reads about 2×limit index entries, however many worlds
// there are. (Where a worker holds a large share of all worlds, the
// planner may walk the primary key from after instead, filtering by
// worker: still a range scan cut at limit.)
func (s *backend) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	const op = "list_worker_worlds"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	out := []store.WorkerWorld{}
	if limit == 0 {
		return out, nil
	}
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.db.Query(ctx, listWorkerWorldsSQL, worker, after, int64(limit), s.off())
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WorkerWorld, error) {
			var ww store.WorkerWorld
			var holder, desired, reason, inc *string
			var epoch, exp, prio *int64
			if err := row.Scan(&ww.World, &holder, &epoch, &exp, &desired, &prio, &reason, &inc, &ww.Backlog); err != nil {
				return ww, err
			}
			if holder != nil {
				l := contract.LeaseRow{Found: true, Holder: *holder, Incarnation: *inc, Epoch: uint64(*epoch), ExpiresAt: fromNS(*exp)}.Lease(ww.World)
				ww.Lease = &l
			}
			if desired != nil {
				ww.Assignment = &store.Assignment{DesiredWorker: *desired, Priority: int(*prio), Reason: *reason}
			}
			return ww, nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// queueAuthority queues the check of an assignment writer's fence (nil: an
// operator) ahead of the write, in its transaction: check_fence locks the
// fence's lease row (FOR SHARE) and raises unless contract.Fence holds.
func (s *backend) queueAuthority(b *batch, by *store.Fence) {
	if by != nil {
		b.queue(nil, `SELECT check_fence($1, $2, now_ns($3))`, by.World, int64(by.Epoch), s.off())
	}
}
