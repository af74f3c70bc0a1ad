package sqlite

import (
	"context"
	"database/sql"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// Leases (protocols A and B): the decisions are contract.Acquire, Holder
// and ReleaseCheck. Every lease write goes through the committer, so it is
// durable (synchronous=FULL) before the caller learns its epoch: an epoch
// is never handed out twice, even across a crash.

func leaseOf(world string, l contract.LeaseRow) store.Lease { return l.Lease(world) }

// leaseCols are the columns of a lease row (alias l) that leaseCells
// scans, in order: NULL for a world never leased.
const leaseCols = `l.holder, l.incarnation, l.took_over, l.displaced, l.epoch, l.expires_at`

// leaseCells scans leaseCols.
type leaseCells struct {
	holder, inc, displaced sql.NullString
	tookOver               sql.NullBool
	epoch, expires         sql.NullInt64
}

func (c *leaseCells) dest() []any {
	return []any{&c.holder, &c.inc, &c.tookOver, &c.displaced, &c.epoch, &c.expires}
}

func (c *leaseCells) row() contract.LeaseRow {
	if !c.epoch.Valid {
		return contract.LeaseRow{}
	}
	return contract.LeaseRow{Found: true, Holder: c.holder.String, Incarnation: c.inc.String, TookOver: c.tookOver.Bool,
		Displaced: c.displaced.String, Epoch: uint64(c.epoch.Int64), ExpiresAt: fromNS(c.expires.Int64)}
}

// acquire takes the world's lease for worker inside the request, as
// contract.Acquire decides on the world, its assignment and its lease
// (Acquire, and Spawn's first lease).
func (t *wtx) acquire(op, world, worker, inc string, ttl time.Duration) (store.Lease, error) {
	found, status, l, err := t.worldLease(world)
	if err != nil {
		return store.Lease{}, err
	}
	if !found {
		return store.Lease{}, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	var desired string
	assigned, err := t.queryRow(`SELECT desired_worker FROM assignments WHERE world = ?`, []any{world}, &desired)
	if err != nil {
		return store.Lease{}, err
	}
	next, keep, err := contract.Acquire(op, world, worker, inc, status, desired, assigned, l, t.now, ttl)
	if err != nil {
		return store.Lease{}, err
	}
	if keep {
		return next.Lease(world), nil
	}
	if _, err := t.exec(`INSERT INTO leases (world, holder, incarnation, took_over, displaced, epoch, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (world) DO UPDATE SET holder = excluded.holder, incarnation = excluded.incarnation,
			took_over = excluded.took_over, displaced = excluded.displaced, epoch = excluded.epoch, expires_at = excluded.expires_at`,
		world, next.Holder, next.Incarnation, next.TookOver, next.Displaced, int64(next.Epoch), next.ExpiresAt.UnixNano()); err != nil {
		return store.Lease{}, err
	}
	t.notify(store.TopicLeases)
	return next.Lease(world), nil
}

// AcquireLeases acquires many worlds for one worker in one transaction.
// The worlds are read acquireChunk at a time, each with its status,
// universe, assignment, lease and whether its inbox has a backlog, in one
// statement; each is decided in order by contract.Acquire, exactly as
// Acquire decides it alone, on the row as the decisions before it left it
// (so a world named twice finds the lease its first occurrence took); and
// the leases taken are written with one statement per chunk. Both
// statements take the chunk's ids padded to the next power of two
// (chunkSize), so each is prepared once per size and a single world's
// Acquire, which the front makes a batch of one, binds one id, not
// acquireChunk.
func (s *backend) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...store.AcquireOption) ([]store.AcquireResult, error) {
	const op = "acquire_leases"
	o, err := store.ResolveAcquireOptions(op, opts)
	if err != nil {
		return nil, err
	}
	ws := append([]string(nil), worlds...)
	out := make([]store.AcquireResult, len(ws))
	err = s.write(ctx, op, "", func(t *wtx) error {
		for lo := 0; lo < len(ws); lo += acquireChunk {
			chunk := ws[lo:min(lo+acquireChunk, len(ws))]
			sz, n := chunkSize(len(chunk))
			rows, err := t.acquireRows(chunk, sz, n)
			if err != nil {
				return err
			}
			taken := make([]any, 0, 3+3*n)
			taken = append(taken, worker, t.now.Add(ttl).UnixNano(), o.Incarnation)
			for i, id := range chunk {
				res := store.AcquireResult{World: id}
				r, found := rows[id]
				if !found {
					res.Err = store.Errorf("acquire", store.ErrWorldNotFound, id, "")
					out[lo+i] = res
					continue
				}
				next, keep, err := contract.Acquire("acquire", id, worker, o.Incarnation, r.status, r.desired, r.assigned, r.lease, t.now, ttl)
				res.Err = err
				if err == nil {
					res.Lease = next.Lease(id)
					res.Universe, res.Backlog = r.universe, r.backlog
					if r.next.Valid {
						res.NextTimer = fromNS(r.next.Int64)
					}
					if !keep {
						r.lease = next
						rows[id] = r
						var displaced any // NULL: taken free
						if next.TookOver {
							displaced = next.Displaced
						}
						taken = append(taken, id, int64(next.Epoch), displaced)
					}
				}
				out[lo+i] = res
			}
			if len(taken) == 3 {
				continue
			}
			for len(taken) < 3+3*n {
				taken = append(taken, "", int64(0), nil) // no world has the empty id
			}
			if _, err := t.exec(acquireWrites[sz], taken...); err != nil {
				return err
			}
			t.notify(store.TopicLeases)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// acquireChunk is how many worlds one statement of AcquireLeases reads or
// writes at most (a power of two: see chunkSize).
const acquireChunk = 256

// chunkSize is the statement size a chunk of n ids (1 <= n <= acquireChunk)
// is padded to, the next power of two, as its index sz into
// acquireReads and acquireWrites and as a count.
func chunkSize(n int) (sz, size int) {
	sz = bits.Len(uint(n - 1))
	return sz, 1 << sz
}

// acquireReads[sz] and acquireWrites[sz] are AcquireLeases's statements
// for chunkSize's sz.
var acquireReads, acquireWrites = sizedStatements(acquireRead), sizedStatements(acquireWrite)

func sizedStatements(build func(n int) string) []string {
	_, top := chunkSize(acquireChunk)
	var out []string
	for n := 1; n <= top; n *= 2 {
		out = append(out, build(n))
	}
	return out
}

// acquireRead reads n worlds' rows.
func acquireRead(n int) string {
	return `SELECT w.id, w.universe, w.status, ` + leaseCols + `, a.desired_worker,
			EXISTS (SELECT 1 FROM inbox i WHERE i.world = w.id AND i.seq > w.inbox_cursor),
			(SELECT min(t.deliver_at) FROM timers t WHERE t.world = w.id AND t.state IN ('scheduled', 'claimed'))
		FROM worlds w LEFT JOIN leases l ON l.world = w.id LEFT JOIN assignments a ON a.world = w.id
		WHERE w.id IN (` + placeholders(1, n) + `)`
}

// acquireWrite writes n leases: ?1 the holder, ?2 the expiry, ?3 the
// incarnation, then (world, epoch, displaced) triples: displaced is NULL
// for a lease taken free.
func acquireWrite(n int) string {
	return `INSERT INTO leases (world, holder, incarnation, took_over, displaced, epoch, expires_at)
		SELECT column1, ?1, ?3, column3 IS NOT NULL, coalesce(column3, ''), column2, ?2
		FROM (VALUES ` + triples(4, n) + `) WHERE column1 <> ''
		ON CONFLICT (world) DO UPDATE SET holder = excluded.holder, incarnation = excluded.incarnation,
			took_over = excluded.took_over, displaced = excluded.displaced, epoch = excluded.epoch, expires_at = excluded.expires_at`
}

// triples returns "(?from, ?from+1, ?from+2), (?from+3, …), …" n times.
func triples(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		k := from + 3*i
		b.WriteString("(?" + strconv.Itoa(k) + ", ?" + strconv.Itoa(k+1) + ", ?" + strconv.Itoa(k+2) + ")")
	}
	return b.String()
}

// acquireRow is what contract.Acquire decides a world on, with what an
// acquisition answers besides the lease.
type acquireRow struct {
	universe string
	status   store.WorldStatus
	assigned bool
	desired  string
	lease    contract.LeaseRow
	backlog  bool
	next     sql.NullInt64 // the earliest timer not delivered
}

// acquireRows reads the rows of a chunk of worlds with the statement of
// chunkSize's sz and size; a world missing from the map does not exist.
func (t *wtx) acquireRows(worlds []string, sz, size int) (map[string]acquireRow, error) {
	args := make([]any, size)
	for i := range args {
		args[i] = ""
		if i < len(worlds) {
			args[i] = worlds[i]
		}
	}
	rows, err := t.query(acquireReads[sz], args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]acquireRow, len(worlds))
	for rows.Next() {
		var (
			id, universe, status string
			desired              sql.NullString
			lc                   leaseCells
			r                    acquireRow
		)
		dest := append([]any{&id, &universe, &status}, lc.dest()...)
		if err := rows.Scan(append(dest, &desired, &r.backlog, &r.next)...); err != nil {
			return nil, err
		}
		r.universe, r.status = universe, store.WorldStatus(status)
		r.assigned, r.desired = desired.Valid, desired.String
		r.lease = lc.row()
		out[id] = r
	}
	return out, rows.Err()
}

// release gives one lease up inside the request, keeping its epoch and
// ending its expiry now (contract.ReleaseCheck). released is false for a
// retried release of an epoch already released.
func (t *wtx) release(op, world, worker string, epoch uint64) (released bool, err error) {
	found, _, l, err := t.worldLease(world)
	if err != nil {
		return false, err
	}
	if !found {
		return false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	noop, err := contract.ReleaseCheck(op, world, worker, epoch, l)
	if err != nil || noop {
		return false, err
	}
	_, err = t.exec(`UPDATE leases SET holder = '', incarnation = '', expires_at = MIN(expires_at, ?) WHERE world = ?`, t.nowNS, world)
	return err == nil, err
}

// RenewLeases renews many leases of one worker in one transaction. The
// leases are read renewChunk at a time and renewed with one UPDATE per
// chunk (every renewed lease gets the same expiry, now+ttl): a statement
// per lease would cost more in the driver than in SQLite. Each ref is
// still decided on its own by contract.Holder, exactly as Renew decides
// it; a world named twice is decided twice on the same row, so both answers
// are the single call's.
func (s *backend) RenewLeases(ctx context.Context, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	const op = "renew_leases"
	refs = append([]store.LeaseRef(nil), refs...)
	out := make([]store.LeaseResult, len(refs))
	err := s.write(ctx, op, "", func(t *wtx) error {
		expires := t.now.Add(ttl)
		for lo := 0; lo < len(refs); lo += renewChunk {
			chunk := refs[lo:min(lo+renewChunk, len(refs))]
			rows, err := t.worldLeases(chunk)
			if err != nil {
				return err
			}
			renewed := make([]any, 0, renewChunk+1)
			renewed = append(renewed, expires.UnixNano())
			for i, r := range chunk {
				res := store.LeaseResult{World: r.World}
				row, found := rows[r.World]
				switch {
				case !found:
					res.Err = store.Errorf("renew", store.ErrWorldNotFound, r.World, "")
				default:
					res.Err = contract.Holder("renew", r.World, worker, r.Epoch, row, t.now)
				}
				if res.Err == nil {
					row.ExpiresAt = expires
					res.Lease = leaseOf(r.World, row)
					renewed = append(renewed, r.World)
				}
				out[lo+i] = res
			}
			for len(renewed) < renewChunk+1 {
				renewed = append(renewed, "") // no world has the empty id
			}
			if _, err := t.exec(renewChunkUpdate, renewed...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// renewChunk is how many leases one statement of RenewLeases reads or
// renews; the statements always take that many ids (padded with the empty
// id, which names no world), so each is prepared once.
const renewChunk = 256

var (
	renewChunkSelect = `SELECT w.id, ` + leaseCols + ` FROM worlds w LEFT JOIN leases l ON l.world = w.id WHERE w.id IN (` +
		placeholders(1, renewChunk) + `)`
	renewChunkUpdate = `UPDATE leases SET expires_at = ?1 WHERE world IN (` + placeholders(2, renewChunk) + `)`
)

// placeholders returns "?from, ?from+1, …" n times.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?" + strconv.Itoa(from+i))
	}
	return b.String()
}

// worldLeases reads the lease rows of up to renewChunk worlds; a world
// missing from the map does not exist.
func (t *wtx) worldLeases(refs []store.LeaseRef) (map[string]contract.LeaseRow, error) {
	args := make([]any, renewChunk)
	for i := range args {
		args[i] = ""
		if i < len(refs) {
			args[i] = refs[i].World
		}
	}
	rows, err := t.query(renewChunkSelect, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]contract.LeaseRow, len(refs))
	for rows.Next() {
		var (
			world string
			lc    leaseCells
		)
		if err := rows.Scan(append([]any{&world}, lc.dest()...)...); err != nil {
			return nil, err
		}
		out[world] = lc.row()
	}
	return out, rows.Err()
}

// ReleaseLeases releases many leases of one worker in one transaction (a
// planned drain).
func (s *backend) ReleaseLeases(ctx context.Context, worker string, refs []store.LeaseRef) ([]store.LeaseResult, error) {
	const op = "release_leases"
	// Each ref is decided and released in turn inside one request. A ref's
	// typed failure is its result, not the call's: each ref decides before
	// it writes, so one that fails wrote nothing and the others go on. A
	// database failure fails the whole call.
	refs = append([]store.LeaseRef(nil), refs...)
	out := make([]store.LeaseResult, len(refs))
	err := s.write(ctx, op, "", func(t *wtx) error {
		for i, r := range refs {
			out[i] = store.LeaseResult{World: r.World}
			released, err := t.release("release", r.World, worker, r.Epoch)
			if err != nil {
				if !isOutcome(err) {
					return err
				}
				out[i].Err = err
				continue
			}
			if released {
				t.notify(store.TopicLeases)
			}
			_, _, l, err := t.worldLease(r.World)
			if err != nil {
				return err
			}
			out[i].Lease = leaseOf(r.World, l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetLease reads the lease record (ok=false if the world was never leased).
func (s *backend) GetLease(ctx context.Context, world string) (store.Lease, bool, error) {
	const op = "get_lease"
	if err := s.read(ctx, op); err != nil {
		return store.Lease{}, false, err
	}
	var lc leaseCells
	found, err := s.queryRow(ctx, `SELECT `+leaseCols+` FROM worlds w LEFT JOIN leases l ON l.world = w.id WHERE w.id = ?`,
		[]any{world}, lc.dest()...)
	if err != nil {
		return store.Lease{}, false, dbErr(op, world, err)
	}
	if !found {
		return store.Lease{}, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	if !lc.epoch.Valid {
		return store.Lease{}, false, nil
	}
	return lc.row().Lease(world), true, nil
}

// upsertAssignment writes a world's assignment (world, desired worker,
// priority, reason).
const upsertAssignment = `INSERT INTO assignments (world, desired_worker, priority, reason) VALUES (?, ?, ?, ?)
	ON CONFLICT (world) DO UPDATE SET desired_worker = excluded.desired_worker, priority = excluded.priority, reason = excluded.reason`

// Assign writes the world's desired placement.
func (s *backend) Assign(ctx context.Context, world string, a store.Assignment, by *store.Fence) error {
	const op = "assign"
	return s.write(ctx, op, world, func(t *wtx) error {
		if err := t.authority(op, by); err != nil {
			return err
		}
		if _, err := t.worldStatus(op, world); err != nil {
			return err
		}
		if _, err := t.exec(upsertAssignment,
			world, a.DesiredWorker, int64(a.Priority), a.Reason); err != nil {
			return err
		}
		t.notify(store.TopicAssignments)
		return nil
	})
}

// Unassign removes the desired placement (a no-op if there is none).
func (s *backend) Unassign(ctx context.Context, world string, by *store.Fence) error {
	const op = "unassign"
	return s.write(ctx, op, world, func(t *wtx) error {
		if err := t.authority(op, by); err != nil {
			return err
		}
		if _, err := t.worldStatus(op, world); err != nil {
			return err
		}
		res, err := t.exec(`DELETE FROM assignments WHERE world = ?`, world)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			t.notify(store.TopicAssignments)
		}
		return nil
	})
}

// CompareAndAssign writes (or removes) the desired placement if it is
// still what the caller read; the write transaction is the only writer, so
// the read and the write cannot interleave with another's.
func (s *backend) CompareAndAssign(ctx context.Context, world string, prev, next *store.Assignment, by *store.Fence) error {
	const op = "compare_and_assign"
	return s.write(ctx, op, world, func(t *wtx) error {
		if err := t.authority(op, by); err != nil {
			return err
		}
		if _, err := t.worldStatus(op, world); err != nil {
			return err
		}
		var (
			a        store.Assignment
			priority int64
			cur      *store.Assignment
		)
		found, err := t.queryRow(`SELECT desired_worker, priority, reason FROM assignments WHERE world = ?`, []any{world},
			&a.DesiredWorker, &priority, &a.Reason)
		if err != nil {
			return err
		}
		if found {
			a.Priority, cur = int(priority), &a
		}
		write, err := contract.Reassign(op, world, cur, prev, next)
		if err != nil || !write {
			return err
		}
		if next == nil {
			_, err = t.exec(`DELETE FROM assignments WHERE world = ?`, world)
		} else {
			_, err = t.exec(upsertAssignment,
				world, next.DesiredWorker, int64(next.Priority), next.Reason)
		}
		if err != nil {
			return err
		}
		t.notify(store.TopicAssignments)
		return nil
	})
}

// GetAssignment reads the desired placement.
func (s *backend) GetAssignment(ctx context.Context, world string) (store.Assignment, bool, error) {
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

// workerWorldsQuery pages a worker's worlds by id: each side walks its own
// index (leases_by_holder, assignments_by_worker) from `after`, at most
// limit rows, and the union keeps the first limit ids; the lease and the
// assignment of those are primary-key lookups. A page costs O(limit), not
// O(worlds).
const workerWorldsQuery = `
	WITH ids (world) AS (
		SELECT world FROM (SELECT world FROM leases WHERE holder = ?1 AND world > ?3 AND expires_at > ?2 ORDER BY world LIMIT ?4)
		UNION
		SELECT world FROM (SELECT world FROM assignments WHERE desired_worker = ?1 AND world > ?3 ORDER BY world LIMIT ?4)
		ORDER BY world LIMIT ?4
	)
	SELECT ids.world, ` + leaseCols + `, a.desired_worker, a.priority, a.reason,
		EXISTS (SELECT 1 FROM worlds w JOIN inbox i ON i.world = w.id AND i.seq > w.inbox_cursor WHERE w.id = ids.world)
	FROM ids LEFT JOIN leases l ON l.world = ids.world LEFT JOIN assignments a ON a.world = ids.world
	ORDER BY ids.world`

// ListWorkerWorlds lists one page of a worker's worlds (leased or assigned).
func (s *backend) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	const op = "list_worker_worlds"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	if limit == 0 {
		return nil, nil
	}
	rows, err := s.query(ctx, workerWorldsQuery, worker, s.cfg.clock().UnixNano(), after, limit)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []store.WorkerWorld
	for rows.Next() {
		var (
			ww              store.WorkerWorld
			lc              leaseCells
			desired, reason sql.NullString
			prio            sql.NullInt64
		)
		if err := rows.Scan(append(append([]any{&ww.World}, lc.dest()...), &desired, &prio, &reason, &ww.Backlog)...); err != nil {
			return nil, dbErr(op, "", err)
		}
		if lc.epoch.Valid {
			l := lc.row().Lease(ww.World)
			ww.Lease = &l
		}
		if desired.Valid {
			ww.Assignment = &store.Assignment{DesiredWorker: desired.String, Priority: int(prio.Int64), Reason: reason.String}
		}
		out = append(out, ww)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, "", err)
	}
	return out, nil
}

// authority checks an assignment writer's fence in the write transaction.
func (t *wtx) authority(op string, by *store.Fence) error {
	if by == nil {
		return nil
	}
	return t.fence(op, by.World, by.Epoch)
}
