package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// AcquireLeases creates the lease rows of never leased worlds. When
// another transaction creates one of those rows between the call's read
// and its insert, the insert waits for that transaction and then finds
// the row taken: the function decides that world again on the row as it
// now is (here: held by Z, so ErrLeaseHeld, and Z's lease untouched),
// while the other worlds of the call are taken as decided, in the same
// round trip.
func TestAcquireLeasesDecidesAgainAWorldWhoseLeaseRowAppearedMeanwhile(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", &clock{}, WithMaxConns(4))
	for _, w := range []string{"x", "y"} {
		if _, err := s.CreateWorld(bg, "u", w, nil); err != nil {
			t.Fatal(err)
		}
	}
	conn := rawConn(t, s.Schema())
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	// Z's lease of x, not yet committed: AcquireLeases's insert of x waits.
	if _, err := tx.Exec(bg, `INSERT INTO leases (world, holder, epoch, expires_at_ns)
		VALUES ('x', 'Z', 1, now_ns(0) + 3600000000000)`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res []store.AcquireResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.AcquireLeases(bg, "A", []string{"y", "x"}, time.Minute)
		done <- answer{res, err}
	}()
	for {
		var waiting bool
		if err := s.b.pool.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%acquire_leases(%' AND pid <> pg_backend_pid())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("AcquireLeases finished while x's row was being created: %+v, %v", a.res, a.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if r := a.res[0]; r.Err != nil || r.Lease.Holder != "A" || r.Lease.Epoch != 1 {
		t.Fatalf("y = %+v", r)
	}
	if r := a.res[1]; !errors.Is(r.Err, store.ErrLeaseHeld) {
		t.Fatalf("x = %+v, want ErrLeaseHeld (Z created its lease first)", r)
	}
	if l, _, err := s.GetLease(bg, "x"); err != nil || l.Holder != "Z" || l.Epoch != 1 {
		t.Fatalf("x's lease = %+v, %v; want Z's, untouched", l, err)
	}
}
