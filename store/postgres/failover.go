package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What the store does about a PostgreSQL that fails over to a standby.
//
// The DSN may list several servers (host=a,b port=p,q, or
// postgres://u@a:p,b:q/db) with target_session_attrs=read-write: pgx then
// tries them in order on every new connection and keeps the first that
// accepts writes, so once the old primary is gone every new connection,
// the pool's and the listener's, lands on the new one. What remains is the
// connections already open:
//
//   - one to a server that went away breaks: the pool destroys it, the
//     call fails as unavailable (errors.go), the next one connects anew;
//   - one to a server that answers but no longer accepts writes (a
//     demoted primary, or a DSN without target_session_attrs pointing at a
//     standby) gets SQLSTATE 25006, read_only_sql_transaction: that is the
//     wrong server, not a domain error. The connection is closed, the
//     pool's other connections are reset (they lead to the same server),
//     and the call fails as unavailable;
//   - a COMMIT that waited for a synchronous standby and was cut short
//     (its context ended and pgx sent a cancel request, or its backend
//     was told to terminate) returns success to the client with a
//     WARNING: it committed on this server, the standby may lack it, and a
//     failover now would lose it. The store never takes that for an
//     acknowledgement: the call fails as unavailable, like a commit whose
//     answer was lost, and the connection is closed.

// cutKey marks, in a connection's CustomData, a commit on it that a
// cancel or a termination cut short of its synchronous replication. Only
// the goroutine that holds the connection reads or writes it (notices are
// read by the statement's own reader).
const cutKey = "orrery.syncrep_cut"

// errSyncRepCut is the cause of the unavailable error a commit cut short
// of its synchronous replication fails with.
var errSyncRepCut = errors.New("postgres: the commit was cut short of its synchronous replication: it committed on this server, a standby may lack it")

// readOnlyCode is a server's refusal to write, read_only_sql_transaction.
const readOnlyCode = "25006"

// syncRepCut tells the notice PostgreSQL sends when it stops waiting for
// a synchronous standby: "canceling wait for synchronous replication due
// to user request" (code 01000), or "canceling the wait for synchronous
// replication and terminating connection due to administrator command"
// (57P01), both with the detail "The transaction has already committed
// locally, but might not have been replicated to the standby." The
// messages may be translated (lc_messages), so any WARNING of those codes
// counts too: the store's SQL raises none, and taking another warning for
// a cut commit costs a retry, never a lost write.
func syncRepCut(n *pgconn.Notice) bool {
	if strings.Contains(n.Message, "synchronous replication") || strings.Contains(n.Detail, "committed locally") {
		return true
	}
	return n.SeverityUnlocalized == "WARNING" && (n.Code == "01000" || n.Code == "57P01")
}

// failoverConfig installs the handlers above on cfg (the pool's
// connections and the listener's): reset, if not nil, resets the pool.
func failoverConfig(cfg *pgconn.Config, reset func()) {
	prevNotice := cfg.OnNotice
	cfg.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if syncRepCut(n) {
			c.CustomData()[cutKey] = true
		}
		if prevNotice != nil {
			prevNotice(c, n)
		}
	}
	prevErr := cfg.OnPgError
	cfg.OnPgError = func(c *pgconn.PgConn, pe *pgconn.PgError) bool {
		if pe.Code == readOnlyCode {
			if reset != nil {
				reset()
			}
			return false // close it: the server will not take a write
		}
		if prevErr != nil {
			return prevErr(c, pe)
		}
		return !strings.EqualFold(pe.Severity, "FATAL")
	}
}

// wasCut tells, and closes, a connection on which a commit was cut short
// of its synchronous replication.
func wasCut(c *pgx.Conn) bool {
	if c == nil || c.PgConn().CustomData()[cutKey] != true {
		return false
	}
	// Closing makes the pool destroy it: the flag never outlives the call.
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_ = c.Close(ctx)
	return true
}

// ---- the pool's one-statement calls, checked for a cut commit ----

// db runs the store's one-statement calls on the pool, each on a
// connection it holds until the statement's answer is read, so that a
// commit cut short of its synchronous replication fails the call.
type db struct{ pool *atomic.Pointer[pgxpool.Pool] }

func (d db) p() *pgxpool.Pool { return d.pool.Load() }

// Exec runs sql.
func (d db) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := d.p().Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	tag, err := c.Exec(ctx, sql, args...)
	if err == nil && wasCut(c.Conn()) {
		return tag, errSyncRepCut
	}
	return tag, err
}

// QueryRow runs sql; the row's Scan reads the answer and releases the
// connection.
func (d db) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := d.p().Acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return &cutRow{c: c, row: c.QueryRow(ctx, sql, args...)}
}

// Query runs sql; the rows release the connection once read or closed.
func (d db) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := d.p().Acquire(ctx)
	if err != nil {
		return errRows{err}, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		rows.Close()
		c.Release()
		return errRows{err}, err
	}
	return &cutRows{Rows: rows, c: c}, nil
}

// SendBatch sends b; closing the results releases the connection.
func (d db) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c, err := d.p().Acquire(ctx)
	if err != nil {
		return errBatch{err}
	}
	return &cutResults{BatchResults: c.SendBatch(ctx, b), c: c}
}

type cutRow struct {
	c   *pgxpool.Conn
	row pgx.Row
}

func (r *cutRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	cut := wasCut(r.c.Conn())
	r.c.Release()
	if err == nil && cut {
		return errSyncRepCut
	}
	return err
}

type cutRows struct {
	pgx.Rows
	c   *pgxpool.Conn
	cut bool
}

func (r *cutRows) release() {
	if r.c != nil {
		r.Rows.Close()
		r.cut = wasCut(r.c.Conn())
		r.c.Release()
		r.c = nil
	}
}

func (r *cutRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *cutRows) Close() { r.release() }

func (r *cutRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	if r.cut {
		return errSyncRepCut
	}
	return nil
}

type cutResults struct {
	pgx.BatchResults
	c *pgxpool.Conn
}

func (b *cutResults) Close() error {
	if b.c == nil {
		return nil
	}
	err := b.BatchResults.Close()
	cut := wasCut(b.c.Conn())
	b.c.Release()
	b.c = nil
	if err == nil && cut {
		return errSyncRepCut
	}
	return err
}

// errRow, errRows and errBatch answer a call whose connection could not
// be acquired.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errRows struct{ err error }

func (errRows) Close()                                       {}
func (r errRows) Err() error                                 { return r.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                          { return r.err }
func (r errRows) Values() ([]any, error)                     { return nil, r.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return errRows(b), b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (errBatch) Tx() pgx.Tx                         { return nil }
