package postgres

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/storetest"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// dsnEnv names the variable CI sets (see .ci/run).
const dsnEnv = "ORRERY_TEST_POSTGRES_DSN"

var bg = context.Background()

// hintBound bounds a wait for a notification (p50 well under a
// millisecond): only a hang guard, as generous as a database shared with
// other packages' tests under a loaded machine needs, never a timing claim.
const hintBound = time.Minute

// testDSN returns the test database's DSN, or skips: CI always sets it,
// so there these tests never skip.
func testDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		tb.Skipf("%s is not set: skipping the PostgreSQL store tests (.ci/run starts PostgreSQL and sets it)", dsnEnv)
	}
	return dsn
}

var schemaSeq atomic.Int64

// freshSchema returns a schema name no other test (in this or another
// process) uses, and drops the schema when tb ends.
func freshSchema(tb testing.TB, dsn string) string {
	tb.Helper()
	name := fmt.Sprintf("orrery_t%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, schemaSeq.Add(1))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// clock is a test's offset of the store clock.
type clock struct{ off atomic.Int64 }

func (c *clock) offset() time.Duration { return time.Duration(c.off.Load()) }
func (c *clock) advance(d time.Duration) {
	if d > 0 {
		c.off.Add(int64(d))
	}
}

// openStore opens a store on schema (fresh when ""), closed when tb ends.
func openStore(tb testing.TB, schema string, c *clock, opts ...Option) *Store {
	tb.Helper()
	dsn := testDSN(tb)
	if schema == "" {
		schema = freshSchema(tb, dsn)
	}
	if c == nil {
		c = &clock{}
	}
	all := append([]Option{WithSchema(schema), WithClockOffset(c.offset), WithMaxConns(4), WithWarmConns(1)}, opts...)
	s, err := Open(bg, dsn, all...)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// factory is the conformance suite's: a fresh schema per test, and a clock
// the harness moves.
func factory(t *testing.T) storetest.Harness {
	c := &clock{}
	s := openStore(t, "", c)
	return storetest.Harness{Store: s, Advance: c.advance}
}

func TestConformance(t *testing.T) {
	testDSN(t)
	storetest.Run(t, factory)
}

// FuzzSpawn fuzzes Spawn's spec on PostgreSQL (the seeds run with every
// go test).
func FuzzSpawn(f *testing.F) {
	testDSN(f)
	storetest.FuzzSpawn(f, factory)
}

// FuzzFireHeld fuzzes a lease holder's firing on PostgreSQL (the seeds run
// with every go test).
func FuzzFireHeld(f *testing.F) {
	testDSN(f)
	storetest.FuzzFireHeld(f, factory)
}

// FuzzAcquireLeases fuzzes AcquireLeases's arguments on PostgreSQL (the
// seeds run with every go test).
func FuzzAcquireLeases(f *testing.F) {
	testDSN(f)
	storetest.FuzzAcquireLeases(f, factory)
}

// ---- helpers shared by this package's tests ----

func rec(key string) store.Record {
	return store.Record{
		EventID: "ev-" + key, IdempotencyKey: "key-" + key, EventType: "StepCompleted",
		StepID: "s1", LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: "p", PlanVersion: 1,
		Payload: []byte{0xa0},
	}
}

// leased creates world w and acquires its lease for worker.
func leased(tb testing.TB, s *Store, w, worker string) store.Lease {
	tb.Helper()
	if _, err := s.CreateWorld(bg, "u", w, nil); err != nil {
		tb.Fatal(err)
	}
	l, err := s.Acquire(bg, w, worker, time.Minute)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
