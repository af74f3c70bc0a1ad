package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// RenewLeases, ReleaseLeases and AcquireLeases lock their lease rows in
// world order, the order in which the append committer locks the lease
// rows of a batch. A transaction that holds world a's row, as a group
// commit over a and b would, therefore makes a bulk call over [b, a] wait
// for a without holding b, and its own lock of b is granted: no deadlock,
// and both finish. (With
// the rows locked in argument order, the renewal held b while waiting for
// a, and PostgreSQL broke the deadlock by failing one side.)
func TestBulkLeaseCallsLockInTheAppendCommittersOrder(t *testing.T) {
	for _, call := range []string{"renew", "release", "acquire"} {
		t.Run(call, func(t *testing.T) {
			s := openStore(t, "", &clock{}, WithMaxConns(4))
			for _, w := range []string{"a", "b"} {
				if _, err := s.CreateWorld(bg, "u", w, nil); err != nil {
					t.Fatal(err)
				}
			}
			la, err := s.Acquire(bg, "a", "w", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			lb, err := s.Acquire(bg, "b", "w", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			conn := rawConn(t, s.Schema())
			tx, err := conn.Begin(bg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(bg) }()
			if _, err := tx.Exec(bg, `SET LOCAL lock_timeout = '20s'`); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(bg, `SELECT 1 FROM leases WHERE world = 'a' FOR SHARE`); err != nil {
				t.Fatal(err)
			}
			refs := []store.LeaseRef{{World: "b", Epoch: lb.Epoch}, {World: "a", Epoch: la.Epoch}}
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(bg, time.Minute)
				defer cancel()
				var res []store.LeaseResult
				var err error
				switch call {
				case "renew":
					res, err = s.RenewLeases(ctx, "w", refs, time.Minute)
				case "release":
					res, err = s.ReleaseLeases(ctx, "w", refs)
				default:
					var got []store.AcquireResult
					got, err = s.AcquireLeases(ctx, "w", []string{"b", "a"}, time.Minute)
					for _, r := range got {
						res = append(res, store.LeaseResult{World: r.World, Lease: r.Lease, Err: r.Err})
					}
				}
				for _, r := range res {
					if err == nil {
						err = r.Err
					}
				}
				done <- err
			}()
			// Wait until the bulk call is blocked on a's row.
			for {
				var waiting bool
				if err := s.b.pool.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%_leases(%' AND pid <> pg_backend_pid())`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				select {
				case err := <-done:
					t.Fatalf("the %s finished while a's row was held: %v", call, err)
				case <-time.After(5 * time.Millisecond):
				}
			}
			// The blocked call holds no lock on b: another session takes
			// b's row at once (NOWAIT fails if the call held it).
			probe := rawConn(t, s.Schema())
			ptx, err := probe.Begin(bg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ptx.Exec(bg, `SELECT 1 FROM leases WHERE world = 'b' FOR SHARE NOWAIT`); err != nil {
				t.Fatalf("b's row, while the %s waits for a: %v (%s)", call, err, sqlState(err))
			}
			if err := ptx.Rollback(bg); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(bg, `SELECT 1 FROM leases WHERE world = 'b' FOR SHARE`); err != nil {
				t.Fatalf("locking b after a, as the append committer does: %v", err)
			}
			if err := tx.Commit(bg); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the %s: %v", call, err)
			}
		})
	}
}
