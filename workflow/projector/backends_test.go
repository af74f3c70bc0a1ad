package projector_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/postgres/pgtest"
	"github.com/orrery-run/orrery/store/sqlite"
)

// dsnEnv names the PostgreSQL test database; when it is set the
// PostgreSQL tests run, never skip.
const dsnEnv = "ORRERY_TEST_POSTGRES_DSN"

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(bg, filepath.Join(t.TempDir(), "projector.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// openPostgres opens a schema of its own, dropped when t ends.
func openPostgres(t *testing.T) store.Store {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping PostgreSQL", dsnEnv)
	}
	schema := pgtest.FreshSchema(t, dsn, "orrery_projector")
	st, err := postgres.Open(bg, dsn, postgres.WithSchema(schema), postgres.WithMaxConns(4), postgres.WithWarmConns(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestRunnerOnSQLite: the restart and the two-runner race on the embedded
// store, whose watermarks are rows of its file.
func TestRunnerOnSQLite(t *testing.T) {
	t.Run("restart", func(t *testing.T) { restartScenario(t, openSQLite(t)) })
	t.Run("two runners", func(t *testing.T) { twoRunnersScenario(t, openSQLite(t)) })
}

// TestRunnerOnPostgres: the same on PostgreSQL (when the DSN is set).
func TestRunnerOnPostgres(t *testing.T) {
	t.Run("restart", func(t *testing.T) { restartScenario(t, openPostgres(t)) })
	t.Run("two runners", func(t *testing.T) { twoRunnersScenario(t, openPostgres(t)) })
}
