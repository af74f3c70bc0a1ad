package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Warm connections.
//
// A new server process pays, on the first use of a statement, for its
// parse and plan, and on the first call of a PL/pgSQL function, for its
// compilation and the plans of every statement inside it. Measured on the
// workflow e2e scenario, the first end Commit on each new connection took
// 5–17 ms against 1.7 ms warm, and since a lane commits one batch at a
// time, the requests queued behind it paid too: the first few dozen runs
// after a start made most of the p99. So the pool opens its connections
// at Open, and each is warmed before it serves a request: the statements
// of the hot paths (a Spawn, a Commit, a lone Enqueue, a renewal, a held
// timer's firing) are prepared by their text, which pgx looks up before
// its own statement cache, and those paths' functions are called once, in
// a transaction rolled back, on a world no caller can name.

// The hot paths' statements, named so that warming prepares exactly the
// text the paths send.
const (
	// guardBatchSQL calls guard_batch (a speculative Commit's assertions).
	guardBatchSQL = `SELECT guard_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
	// enqueueOneSQL calls enqueue_one (a delivery batch of one Enqueue).
	enqueueOneSQL = `SELECT * FROM enqueue_one($1, $2, $3, $4, $5)`
	// guardEndSQL calls guard_end (a speculative Commit that ends its
	// world's lease, alone in its batch).
	guardEndSQL = `SELECT guard_end($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
	// renewLeasesSQL calls renew_leases.
	renewLeasesSQL = `SELECT * FROM renew_leases($1, $2, $3, $4, $5)`
	// statusEndSQL is a speculative Commit's status change that ends the
	// world's lease: the world's row and its lease's end at one clock read.
	statusEndSQL = `WITH w AS (
			UPDATE worlds SET status = $2, status_reason = $3, status_changed_at_ns = now_ns($4) WHERE world = $1
			RETURNING status_changed_at_ns AS t)
		UPDATE leases l SET holder = '', expires_at_ns = least(l.expires_at_ns, w.t) FROM w WHERE l.world = $1`
	// notifySQL hints the topics of a transaction at its commit.
	notifySQL = `SELECT notify_topic(t) FROM unnest($1::text[]) AS t`
)

// hotSQL is what warmConn prepares on every pool connection.
var hotSQL = []string{"BEGIN", "COMMIT", deferHintsSQL, flushHintsSQL, spawnWorldSQL, writeSQL, drainSQL, guardBatchSQL, guardEndSQL, statusEndSQL, notifySQL,
	enqueueOneSQL, renewLeasesSQL, fireHeldSQL}

// warmKey marks a warmed connection (pgconn's CustomData).
const warmKey = "orrery.warm"

// warmed reports whether conn was warmed.
func warmed(conn *pgx.Conn) bool {
	_, ok := conn.PgConn().CustomData()[warmKey]
	return ok
}

// warmConn warms conn (see the top of this file), once. It is best
// effort: a failure leaves the connection as pgx made it (its statements
// are then prepared on first use, as without warming), never unusable,
// and never changes a row: every call runs in one transaction, rolled
// back, on a world whose id holds a control character, which no id a
// caller passes may (the front refuses it, store.CheckID), and the server process's pid, so
// that connections warming at once never wait on each other's rows.
func warmConn(ctx context.Context, conn *pgx.Conn, off int64) error {
	if warmed(conn) {
		return nil
	}
	for _, q := range hotSQL {
		if _, err := conn.Prepare(ctx, q, q); err != nil {
			return err
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const who = "\x01warm"
	w := fmt.Sprintf("%s-%d", who, conn.PgConn().PID())
	ttl := int64(60e9)
	one, zero := int64(1), int64(0)
	calls := []struct {
		sql  string
		args []any
	}{
		// Hints deferred, as every pipelined transaction defers them.
		{deferHintsSQL, nil},
		// A Spawn: the world, one item, its stream at head 1 and its lease.
		{spawnWorldSQL, []any{who, w, who, ttl, one, []string{who}, [][]byte{{}}, []string{""}, off, who}},
		// Its first event, and a drain of its item.
		{writeSQL, []any{[]string{w}, []int64{1}, []string{who}, []string{who}, []string{who}, []int64{0},
			[]string{""}, []int64{1}, []int64{1}, []string{who}, []int64{1}, [][]byte{{}}, off,
			[][]byte{make([]byte, 32)}}},
		{drainSQL, []any{[]string{w}, []int64{0}, []int64{1}, off}},
		// A lone Enqueue to it.
		{enqueueOneSQL, []any{w, who, []byte{}, who, off}},
		// A speculative Commit's assertions, every branch taken.
		{guardBatchSQL, []any{[]string{w}, []string{w}, []int64{1}, true, []string{w}, []int64{1}, []int64{1},
			[]*int64{&zero}, []*int64{&one}, []*int64{&one}, []string{w}, []string{who}, off}},
		{renewLeasesSQL, []any{who, []string{w}, []int64{1}, ttl, off}},
		// The Commit that ends it (guard_end), a status change, and their
		// hints (never sent: rolled back).
		{guardEndSQL, []any{w, one, one, one, one, one, one, []string{who}, "archived", who, off}},
		{statusEndSQL, []any{w, "archived", who, off}},
		{notifySQL, []any{[]string{who}}},
		// The deferred hints sent (inside this transaction: rolled back).
		{flushHintsSQL, nil},
	}
	for _, c := range calls {
		rows, err := tx.Query(ctx, c.sql, c.args...)
		if err != nil {
			return err
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		return err
	}
	conn.PgConn().CustomData()[warmKey] = true
	return nil
}

// warmTimeout bounds one connection's warming.
const warmTimeout = 10 * time.Second

// errWarmLeftConn refuses a new connection that warming left unusable.
var errWarmLeftConn = errors.New("postgres: warming left the connection unusable")

// warmConnOK warms conn, on a context of its own (a request's
// cancellation must not cut a warming short: a rollback that fails closes
// the connection), and reports whether conn can serve: open and outside
// any transaction. A warming that failed otherwise leaves conn as pgx
// made it, which serves.
func warmConnOK(ctx context.Context, conn *pgx.Conn, off int64) bool {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), warmTimeout)
	defer cancel()
	_ = warmConn(wctx, conn, off)
	return !conn.IsClosed() && conn.PgConn().TxStatus() == 'I'
}

// warmPool opens n of the pool's connections at once, each warmed by the
// pool's hooks (or here, for one opened before the schema was current),
// and puts them back idle.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int, off int64) {
	conns := make(chan *pgxpool.Conn, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if c, err := pool.Acquire(ctx); err == nil {
				// Acquire warmed it (PrepareConn) unless the schema was
				// not current when it opened: then, at the latest, here.
				_ = warmConnOK(ctx, c.Conn(), off)
				conns <- c
			}
		})
	}
	wg.Wait()
	close(conns)
	for c := range conns {
		c.Release()
	}
}
