// Package pgtest holds what the tests of every package that runs on
// PostgreSQL share: a schema of their own, dropped when the test ends, so
// that tests in this and other processes never see each other's rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// FreshSchema returns a schema name no other test (in this or another
// process) uses, prefix_<pid>_<random>, and drops the schema with
// everything in it when tb ends.
func FreshSchema(tb testing.TB, dsn, prefix string) string {
	tb.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	name := fmt.Sprintf("%s_%d_%x", prefix, os.Getpid(), b)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
