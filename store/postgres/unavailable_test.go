package postgres

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-run/orrery/store"
)

// A lost or refused connection is ErrUnavailable (the outcome is unknown:
// retry), and the driver's error stays reachable; the server's definite
// answers keep their kinds.
func TestLostConnectionsAreUnavailable(t *testing.T) {
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, err := range []error{
		io.ErrUnexpectedEOF,
		netErr,
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		&pgconn.PgError{Code: "08006", Message: "connection failure"},
		&pgconn.PgError{Code: "53300", Message: "too many connections"},
	} {
		got := dbErr("append", "w", err)
		if !errors.Is(got, store.ErrUnavailable) || !errors.Is(got, err) {
			t.Fatalf("dbErr(%v) = %v: want ErrUnavailable, with the driver's error reachable", err, got)
		}
		var se *store.Error
		if !errors.As(got, &se) || se.World != "w" {
			t.Fatalf("dbErr(%v) = %#v, want a *store.Error for world w", err, got)
		}
	}
	var ne *net.OpError
	if !errors.As(dbErr("append", "w", netErr), &ne) {
		t.Fatal("errors.As no longer reaches the driver's *net.OpError")
	}
	for _, tc := range []struct {
		err  error
		want error
	}{
		{&pgconn.PgError{Code: "OR010"}, store.ErrFenced},
		{&pgconn.PgError{Code: "54000"}, store.ErrInvalid},
	} {
		if got := dbErr("append", "w", tc.err); !errors.Is(got, tc.want) || errors.Is(got, store.ErrUnavailable) {
			t.Fatalf("dbErr(%v) = %v, want %v and not unavailable", tc.err, got, tc.want)
		}
	}
	if got := dbErr("append", "w", &pgconn.PgError{Code: "23505"}); errors.Is(got, store.ErrUnavailable) {
		t.Fatalf("a unique violation is %v: the server answered, it is not unavailable", got)
	}
}
