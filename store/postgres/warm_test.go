package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Open leaves WithWarmConns connections open, each warmed: the hot statements prepared
// and the hot functions run once, in a transaction rolled back, so no row
// of any table holds anything.
func TestOpenWarmsEveryConnectionAndWritesNothing(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil, WithMaxConns(6), WithWarmConns(DefaultWarmConns))
	conns := s.b.pool.AcquireAllIdle(bg)
	for _, c := range conns {
		if !warmed(c.Conn()) {
			t.Errorf("connection %d not warmed", c.Conn().PgConn().PID())
		}
		c.Release()
	}
	// The migration's connection may be among them.
	if len(conns) < DefaultWarmConns {
		t.Fatalf("%d idle connections after Open, want at least %d", len(conns), DefaultWarmConns)
	}
	conn := rawConn(t, s.Schema())
	for _, table := range []string{"worlds", "inbox", "streams", "events", "leases", "inbox_drains", "effects", "timers"} {
		var n int
		if err := conn.QueryRow(bg, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s holds %d rows after Open, want none", table, n)
		}
	}
}

// warmConn's every statement succeeds on the current schema (Open ignores
// its error, so a statement broken by a migration would otherwise go
// unnoticed), it prepares each hot statement by its text, and a second
// call does nothing.
func TestWarmConnRunsEveryHotPath(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	conn := rawConn(t, s.Schema())
	if err := warmConn(bg, conn, s.b.off()); err != nil {
		t.Fatalf("warmConn: %v", err)
	}
	if !warmed(conn) {
		t.Fatal("warmConn succeeded, the connection is not marked warmed")
	}
	var prepared int
	if err := conn.QueryRow(bg, `SELECT count(*) FROM pg_prepared_statements WHERE statement = ANY($1) AND name LIKE 'stmt\_%'`, hotSQL).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != len(hotSQL) {
		t.Fatalf("%d of the %d hot statements prepared by their text", prepared, len(hotSQL))
	}
	if err := warmConn(bg, conn, s.b.off()); err != nil {
		t.Fatalf("warmConn again: %v", err)
	}
	var n int
	if err := conn.QueryRow(bg, `SELECT count(*) FROM worlds`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("worlds after warming: %d rows, %v; want none", n, err)
	}
}

// A request's cancellation does not cut a warming short (a rollback that
// fails closes the connection): a connection warmed under a cancelled
// context is warmed, open and outside any transaction.
func TestWarmingOutlivesTheRequestsCancellation(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	conn := rawConn(t, s.Schema())
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if !warmConnOK(ctx, conn, s.b.off()) {
		t.Fatal("warmConnOK under a cancelled context left the connection unusable")
	}
	if !warmed(conn) {
		t.Fatal("the connection is not warmed")
	}
	var one int
	if err := conn.QueryRow(bg, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("the connection after warming: %d, %v", one, err)
	}
}
