package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-run/orrery/store"
)

// The two warnings PostgreSQL sends when it stops waiting for a
// synchronous standby are recognised; an ordinary notice is not.
func TestSyncRepCutNoticeIsRecognised(t *testing.T) {
	const detail = "The transaction has already committed locally, but might not have been replicated to the standby."
	for _, n := range []*pgconn.Notice{
		{SeverityUnlocalized: "WARNING", Code: "01000", Message: "canceling wait for synchronous replication due to user request", Detail: detail},
		{SeverityUnlocalized: "WARNING", Code: "57P01", Message: "canceling the wait for synchronous replication and terminating connection due to administrator command", Detail: detail},
		{SeverityUnlocalized: "WARNING", Code: "01000", Message: "annulation de l'attente ... (translated)"},
	} {
		if !syncRepCut(n) {
			t.Errorf("%q is not taken for a commit cut short of its synchronous replication", n.Message)
		}
	}
	for _, n := range []*pgconn.Notice{
		{SeverityUnlocalized: "NOTICE", Code: "00000", Message: "relation already exists, skipping"},
		{SeverityUnlocalized: "WARNING", Code: "25P01", Message: "there is no transaction in progress"},
	} {
		if syncRepCut(n) {
			t.Errorf("%q is taken for a cut commit", n.Message)
		}
	}
}

// A server that refuses writes (25006) is unavailable, never a domain
// error: the store is on the wrong server.
func TestReadOnlyServerIsUnavailable(t *testing.T) {
	got := dbErr("append", "w", &pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"})
	if !errors.Is(got, store.ErrUnavailable) {
		t.Fatalf("25006 is %v, want ErrUnavailable", got)
	}
}

// raiseOn installs, on the store's table, a trigger that raises what a
// server says after every row written, so that every path that writes the
// table meets it.
func raiseOn(t *testing.T, s *Store, table, raise string) func() {
	t.Helper()
	conn := rawConn(t, s.Schema())
	fn := "test_raise_" + table
	if _, err := conn.Exec(bg, fmt.Sprintf(`CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN %[2]s; RETURN NULL; END $$;
CREATE TRIGGER %[1]s AFTER INSERT OR UPDATE ON %[3]s FOR EACH ROW EXECUTE FUNCTION %[1]s();`, fn, raise, table)); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.Exec(bg, fmt.Sprintf(`DROP TRIGGER %[1]s ON %[2]s; DROP FUNCTION %[1]s()`, fn, table)); err != nil {
			t.Fatal(err)
		}
	}
}

// syncRepWarning is the warning of a COMMIT whose wait for the standby was
// cancelled, as PostgreSQL words it.
const syncRepWarning = `RAISE WARNING 'canceling wait for synchronous replication due to user request' USING DETAIL = 'The transaction has already committed locally, but might not have been replicated to the standby.'`

// A write whose connection got the warning of a commit cut short of its
// synchronous replication is never acknowledged: every path (the append
// committer, the delivery committer, a one-statement function, a
// one-statement Exec, a function returning rows) fails it as unavailable,
// although it committed here, and the connection is not used again (the
// next call, once the warning stops, succeeds). The real cut, by a
// standby that stops answering, is TestPostgresFailover's (cmd/orrery).
func TestACommitCutShortOfSyncReplicationIsNotAnAck(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	raw := rawConn(t, s.Schema())
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := raw.QueryRow(bg, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, w := range []string{"w", "l0", "l1", "l2"} {
		if _, err := s.CreateWorld(bg, "u", w, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		table  string
		write  func(i int) error
		landed func(i int) bool
	}{
		{"events", func(i int) error {
			_, err := s.Append(bg, "free", []store.Record{rec(fmt.Sprint("k", i))}, store.AppendOptions{Kind: store.FreeStream})
			return err
		}, func(i int) bool {
			return count(`SELECT count(*) FROM events WHERE stream = 'free' AND idempotency_key = $1`, fmt.Sprint("key-k", i)) == 1
		}},
		{"inbox", func(i int) error {
			_, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("d", i)})
			return err
		}, func(i int) bool {
			return count(`SELECT count(*) FROM inbox WHERE world = 'w' AND dedupe_key = $1`, fmt.Sprint("d", i)) == 1
		}},
		{"worlds", func(i int) error {
			_, err := s.CreateWorld(bg, "u", fmt.Sprint("new", i), nil)
			return err
		}, func(i int) bool {
			return count(`SELECT count(*) FROM worlds WHERE world = $1`, fmt.Sprint("new", i)) == 1
		}},
		{"leases", func(i int) error {
			_, err := s.Acquire(bg, fmt.Sprint("l", i), "worker", time.Minute)
			return err
		}, func(i int) bool {
			return count(`SELECT count(*) FROM leases WHERE world = $1 AND holder = 'worker'`, fmt.Sprint("l", i)) == 1
		}},
		{"watermarks", func(i int) error {
			return s.CASWatermark(bg, "p", fmt.Sprint("s", i), 0, 1)
		}, func(i int) bool {
			return count(`SELECT count(*) FROM watermarks WHERE projector = 'p' AND stream = $1`, fmt.Sprint("s", i)) == 1
		}},
	} {
		stop := raiseOn(t, s, tc.table, syncRepWarning)
		// Twice: the first append takes the checked path, the second the
		// speculative one (its stream's head is known).
		for i := range 2 {
			err := tc.write(i)
			if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, errSyncRepCut) {
				t.Fatalf("%s: a write whose commit was cut short of its synchronous replication answered %v, want ErrUnavailable", tc.table, err)
			}
			if !tc.landed(i) {
				t.Fatalf("%s: (err %v) the write is not there: the test no longer shows a commit that landed unacknowledged", tc.table, err)
			}
		}
		stop()
		if err := tc.write(2); err != nil {
			t.Fatalf("%s: after the warnings stopped: %v (a flagged connection was used again?)", tc.table, err)
		}
	}
}

// A server that refuses writes (a demoted primary, a standby) fails the
// call as unavailable, and the pool's connections to it are dropped: the
// next call, on a server that writes again, succeeds.
func TestReadOnlyAnswerDropsTheConnection(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	stop := raiseOn(t, s, "worlds", `RAISE EXCEPTION 'cannot execute INSERT in a read-only transaction' USING ERRCODE = '25006'`)
	before := s.b.pool.Stat().NewConnsCount()
	_, err := s.CreateWorld(bg, "u", "a", nil)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a read-only server's refusal answered %v, want ErrUnavailable", err)
	}
	stop()
	if _, err := s.CreateWorld(bg, "u", "a", nil); err != nil {
		t.Fatal(err)
	}
	if after := s.b.pool.Stat().NewConnsCount(); after == before {
		t.Fatal("no new connection after a server refused a write: the connection to it was kept")
	}
}

// deadAddr returns a local address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// A multi-host DSN, in the URL form and the key/value form, whose first
// host is down and whose second is the primary, opens and writes
// (target_session_attrs=read-write): the store follows the DSN's primary.
func TestMultiHostDSNWithADeadHostFirst(t *testing.T) {
	t.Parallel()
	live := testDSN(t)
	u, err := url.Parse(live)
	if err != nil {
		t.Fatal(err)
	}
	dead := deadAddr(t)
	withDead := *u
	withDead.Host = dead + "," + u.Host
	q := withDead.Query()
	q.Set("target_session_attrs", "read-write")
	withDead.RawQuery = q.Encode()

	host, port, _ := net.SplitHostPort(u.Host)
	dHost, dPort, _ := net.SplitHostPort(dead)
	pw, _ := u.User.Password()
	kv := fmt.Sprintf("host=%s,%s port=%s,%s user=%s password=%s dbname=%s target_session_attrs=read-write",
		dHost, host, dPort, port, u.User.Username(), pw, strings.TrimPrefix(u.Path, "/"))
	if sm := u.Query().Get("sslmode"); sm != "" {
		kv += " sslmode=" + sm
	}
	for name, dsn := range map[string]string{"url": withDead.String(), "key/value": kv} {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(cfg.Fallbacks) != 1 || cfg.Host != dHost || cfg.Fallbacks[0].Host != host || cfg.ValidateConnect == nil {
			t.Fatalf("%s: parsed as %s plus %d fallbacks (validate %v): want the dead host, then the live one, checked for writes", name, cfg.Host, len(cfg.Fallbacks), cfg.ValidateConnect != nil)
		}
		st, err := Open(bg, dsn, WithSchema(freshSchema(t, live)), WithMaxConns(2), WithWarmConns(1))
		if err != nil {
			t.Fatalf("%s: Open with a dead host first: %v", name, err)
		}
		if _, err := st.CreateWorld(bg, "u", "w", nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := st.Append(bg, "free", []store.Record{rec("k")}, store.AppendOptions{Kind: store.FreeStream}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = st.Close()
	}
}

// haEnv names the script that sets up a primary and a streaming standby
// on this machine (.ci/pg-ha; it runs as root). .ci/run sets it for its
// failover step; the tests that need the pair skip without it.
const haEnv = "ORRERY_TEST_PG_HA"

// haPair sets up the pair (sync or async), tears it down when tb ends, and
// returns its script and its multi-host DSN.
func haPair(tb testing.TB, mode string) (func(args ...string), string) {
	tb.Helper()
	script := os.Getenv(haEnv)
	if script == "" {
		tb.Skipf("%s is not set: the failover tests need a primary and a standby of their own (.ci/run's failover step sets it)", haEnv)
	}
	run := func(args ...string) {
		tb.Helper()
		out, err := exec.Command(script, args...).CombinedOutput()
		if err != nil {
			tb.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
		}
	}
	run("up", mode)
	tb.Cleanup(func() { run("down") })
	out, err := exec.Command(script, "dsn", "postgres").Output()
	if err != nil {
		tb.Fatal(err)
	}
	return run, strings.TrimSpace(string(out))
}

// The real trap: with a synchronous standby that stopped answering, a
// commit waits; its context ends, pgx sends a cancel request, and
// PostgreSQL answers the COMMIT with success and a warning: it committed
// on the primary only. The store reports such a write as unavailable
// (outcome unknown), never as acknowledged, though the row is there.
func TestSyncCommitCancelledWaitingForTheStandbyIsNotAnAck(t *testing.T) {
	run, dsn := haPair(t, "sync")
	s, err := Open(bg, dsn, WithMaxConns(4), WithWarmConns(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateWorld(bg, "u", "before", nil); err != nil {
		t.Fatal(err)
	}
	run("stall-standby")
	resumed := false
	defer func() {
		if !resumed {
			run("resume-standby")
		}
	}()
	for _, w := range []string{"cut-a", "cut-b"} {
		// The commit waits for the standby for ever: only the deadline
		// ends it. It is generous so that connecting anew (the first cut
		// closed its connection) fits in it on a busy machine.
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		_, err := s.CreateWorld(ctx, "u", w, nil)
		cancel()
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, errSyncRepCut) {
			t.Fatalf("CreateWorld %s, cancelled while its commit waited for the stalled standby: %v, want ErrUnavailable (a cut commit)", w, err)
		}
	}
	run("resume-standby")
	resumed = true
	// The cut commits are on the primary (they are what a failover would
	// lose), and the store writes again once the standby answers.
	for _, w := range []string{"cut-a", "cut-b"} {
		if _, err := s.GetWorld(bg, w); err != nil {
			t.Fatalf("the cut commit of %s is not on the primary: %v (the test no longer shows the trap)", w, err)
		}
	}
	if _, err := s.CreateWorld(bg, "u", "after", nil); err != nil {
		t.Fatal(err)
	}
}
