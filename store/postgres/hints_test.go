package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// nextNotice returns the payload of the next notification conn receives
// (conn LISTENs), failing the test after hintBound.
func nextNotice(t *testing.T, listener interface {
	WaitForNotification(context.Context) (string, error)
}) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, hintBound)
	defer cancel()
	p, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return p
}

// TestHintsOfADeferringTransactionGoOutAfterItsCommit: inside a
// transaction that deferred its hints, notify_topic sends nothing, not
// even at the COMMIT; flush_hints sends them afterwards; a rolled-back
// transaction's hints are never sent; without the deferral notify_topic
// notifies at the commit, as before. Notifications arrive in commit
// order, so a sentinel sent after a step proves what that step sent.
func TestHintsOfADeferringTransactionGoOutAfterItsCommit(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", &clock{})
	listen := rawConn(t, s.Schema())
	ch := channelName(s.Schema())
	if _, err := listen.Exec(bg, `LISTEN "`+ch+`"`); err != nil {
		t.Fatal(err)
	}
	l := listenerFunc(func(ctx context.Context) (string, error) {
		n, err := listen.WaitForNotification(ctx)
		if err != nil {
			return "", err
		}
		return n.Payload, nil
	})
	c := rawConn(t, s.Schema())
	exec := func(sql ...string) {
		t.Helper()
		for _, q := range sql {
			if _, err := c.Exec(bg, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	sentinel := func(n int) {
		t.Helper()
		exec(fmt.Sprintf(`SELECT pg_notify('%s', 'sentinel-%d')`, ch, n))
		if got := nextNotice(t, l); got != fmt.Sprint("sentinel-", n) {
			t.Fatalf("got hint %q before sentinel %d", got, n)
		}
	}
	exec("BEGIN", deferHintsSQL, `SELECT notify_topic('a')`, `SELECT notify_topic('a')`, `SELECT notify_topic('b')`, "COMMIT")
	sentinel(1) // nothing was sent at the commit
	exec(flushHintsSQL)
	got := []string{nextNotice(t, l), nextNotice(t, l)}
	if !(got[0] == "a" && got[1] == "b") {
		t.Fatalf("flush sent %v, want a then b (the duplicate coalesced)", got)
	}
	sentinel(2) // and nothing else
	exec(flushHintsSQL)
	sentinel(3) // a second flush sends nothing
	exec("BEGIN", deferHintsSQL, `SELECT notify_topic('c')`, "ROLLBACK", flushHintsSQL)
	sentinel(4) // the rolled-back transaction's hint is gone
	exec("BEGIN", `SELECT notify_topic('d')`, "COMMIT")
	if got := nextNotice(t, l); got != "d" {
		t.Fatalf("without the deferral, the commit sent %q, want d", got)
	}
}

type listenerFunc func(context.Context) (string, error)

func (f listenerFunc) WaitForNotification(ctx context.Context) (string, error) { return f(ctx) }

// TestWritesLeaveNoHintPendingOnTheirConnections: after the store's
// pipelined writes (a Spawn, enqueues alone and in a batch, a Commit, an
// Assign), every connection of its pool has sent what it deferred, and
// another store's watcher got the hints.
func TestWritesLeaveNoHintPendingOnTheirConnections(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	sig := store.NewSignal()
	stop, err := b.Watch(bg, sig, store.TopicInbox("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := a.Spawn(bg, store.SpawnSpec{Universe: "u", World: "w", Holder: "A", TTL: time.Minute,
		Items: []store.InboxItem{{Kind: "event"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sig.C:
	case <-time.After(hintBound):
		t.Fatal("the other store got no hint of the spawn")
	}
	for i := range 20 {
		if _, _, err := a.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("k", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Assign(bg, "w", store.Assignment{DesiredWorker: "A", Reason: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sig.C:
	case <-time.After(hintBound):
		t.Fatal("the other store got no hint of the enqueues")
	}
	conns := a.b.pool.AcquireAllIdle(bg)
	if len(conns) == 0 {
		t.Fatal("no idle connection to look at")
	}
	for _, c := range conns {
		var pending string
		err := c.QueryRow(bg, `SELECT coalesce(current_setting('orrery.hints', true), '')`).Scan(&pending)
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
		if pending != "" {
			t.Fatalf("a connection still holds deferred hints %q", pending)
		}
	}
}
