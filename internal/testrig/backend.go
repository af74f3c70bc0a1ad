package testrig

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/postgres/pgtest"
	"github.com/orrery-run/orrery/store/sqlite"
)

// Backend names.
const (
	Memstore = "memstore"
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Backends are the stores every integration test runs on. PostgreSQL runs
// when ORRERY_TEST_POSTGRES_DSN is set (CI always sets it; .ci/run) and is
// skipped otherwise.
func Backends() []string { return []string{Memstore, SQLite, Postgres} }

// DSNEnv names the PostgreSQL test database's DSN.
const DSNEnv = "ORRERY_TEST_POSTGRES_DSN"

// Clock is a store clock: the machine's clock plus an offset a test moves
// forward, so leases, claims and timers expire without waiting.
type Clock struct{ off atomic.Int64 }

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// Offset is how far the clock has been moved.
func (c *Clock) Offset() time.Duration { return time.Duration(c.off.Load()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	if d > 0 {
		c.off.Add(int64(d))
	}
}

// Open opens a fresh real store (sqlite, or postgres in a schema of its
// own, dropped at the end) whose clock is clock's; it is closed when t
// ends.
func Open(t testing.TB, ctx context.Context, backend string, clock *Clock) store.Store {
	t.Helper()
	switch backend {
	case Postgres:
		dsn := os.Getenv(DSNEnv)
		if dsn == "" {
			t.Skipf("%s is not set: skipping PostgreSQL (.ci/run sets it)", DSNEnv)
		}
		schema := pgtest.FreshSchema(t, dsn, "orrery_test")
		st, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema), postgres.WithClockOffset(clock.Offset), postgres.WithMaxConns(8), postgres.WithWarmConns(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	case SQLite:
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "orrery.db"), sqlite.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	t.Fatalf("testrig: unknown backend %q", backend)
	return nil
}
