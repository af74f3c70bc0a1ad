package api_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/sqlite"
)

// dsnEnv names the PostgreSQL test database; when it is set the
// PostgreSQL tests run, never skip (.ci/run sets it).
const dsnEnv = "ORRERY_TEST_POSTGRES_DSN"

// TestCreateSendCallStateOnSQLite runs the create, send, call and state
// subset over the embedded default, in a temporary file.
func TestCreateSendCallStateOnSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	createSendCallState(t, newRig(t, rigOptions{store: st}))
}

// TestCreateSendCallStateOnPostgres runs the same subset over PostgreSQL,
// in a schema of its own that is dropped afterwards.
func TestCreateSendCallStateOnPostgres(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping PostgreSQL (.ci/run sets it)", dsnEnv)
	}
	ctx := context.Background()
	schema := freshSchema(t, dsn)
	st, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema), postgres.WithMaxConns(8))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	createSendCallState(t, newRig(t, rigOptions{store: st}))
}

// freshSchema returns a schema name no other test uses, dropped when t
// ends.
func freshSchema(t *testing.T, dsn string) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("orrery_api_%d_%x", os.Getpid(), b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}
