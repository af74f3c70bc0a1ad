package postgres

import (
	"net/url"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/tcpproxy"
	"github.com/orrery-run/orrery/store"
)

// testListenerCheck is the listener's silence check in these tests: short,
// so that a dead path is found in well under a second; nothing asserts
// how soon.
const testListenerCheck = 250 * time.Millisecond

// proxiedStore opens a second store on b's schema whose every connection,
// the listener's included, goes through a TCP proxy, and returns both.
func proxiedStore(t *testing.T, b *Store) (*Store, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	p := tcpproxy.New(t, u.Host)
	u.Host = p.Addr()
	a, err := Open(bg, u.String(), WithSchema(b.Schema()), WithMaxConns(2), WithWarmConns(0), WithListenerCheck(testListenerCheck))
	if err != nil {
		t.Fatalf("Open through the proxy: %v", err)
	}
	// Closed before the proxy (cleanups run last first): a's connections
	// end cleanly rather than being dropped under it.
	t.Cleanup(func() { _ = a.Close() })
	return a, p
}

// awaitHint waits for a hint on c; the bound is a hang guard only.
func awaitHint(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(hintBound):
		t.Fatalf("no hint: %s", what)
	}
}

// A listener whose connection leads nowhere (black-holed: open, silent,
// every byte lost) finds out at its silence check, connects anew, and the
// other stores' commits reach its watchers again. Without the check it
// would wait on the dead connection for ever: no error comes, TCP has
// nothing to retransmit.
func TestListenerLeavesABlackHoledConnection(t *testing.T) {
	t.Parallel()
	b := openStore(t, "", &clock{})
	if _, err := b.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	// Opened after the write: no notification of it is on its way to a.
	a, p := proxiedStore(t, b)
	sig := store.NewSignal()
	stop, err := a.Watch(bg, sig, store.TopicAssignments)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Watch returned once the listener listens; now its path goes dead.
	if n := p.Swallow(); n < 1 {
		t.Fatalf("the proxy swallowed %d connections, want the listener's at least", n)
	}
	// Nothing hints assignments since a opened but a reconnect's resync
	// (it hints every watched topic but the inbox ones): this is the
	// listener back, on a new connection, listening.
	awaitHint(t, sig.C, "the listener never left its black-holed connection")
	// A commit of the other store now must reach a through that
	// connection: the resync's hint was taken above, and a itself writes
	// nothing.
	if err := b.Assign(bg, "w", store.Assignment{DesiredWorker: "B", Reason: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	awaitHint(t, sig.C, "the other store's commit after the reconnect")
}

// A notification sent while the listener was cut off is lost; the resync
// after its reconnect makes up for it: the world whose inbox got an item
// during the cut is hinted, and only that one.
func TestListenerResyncHintsWhatTheCutLost(t *testing.T) {
	t.Parallel()
	b := openStore(t, "", &clock{})
	for _, w := range []string{"idle", "w"} {
		if _, err := b.CreateWorld(bg, "u", w, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, p := proxiedStore(t, b)
	watch := func(topic string) <-chan struct{} {
		sig := store.NewSignal()
		stop, err := a.Watch(bg, sig, topic)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return sig.C
	}
	ch, idle := watch(store.TopicInbox("w")), watch(store.TopicInbox("idle"))
	// Nothing passes (a new connection waits too), then the listener's
	// path leads nowhere for good: the enqueue's notification is lost, and
	// the listener cannot reconnect before the enqueue committed.
	heal := p.Hold()
	if n := p.Swallow(); n < 1 {
		heal()
		t.Fatalf("the proxy swallowed %d connections, want the listener's at least", n)
	}
	if _, _, err := b.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		heal()
		t.Fatal(err)
	}
	heal()
	awaitHint(t, ch, "the inbox that got an item while the listener was cut")
	// The resync hints the inbox topics of one page of worlds in one call
	// of the hub, under its lock: a registration waits for that call to
	// end, after which a hint of idle's inbox would be there.
	if stop, err := a.Watch(bg, store.NewSignal(), store.TopicTimers); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	select {
	case <-idle:
		t.Fatal("the resync hinted the inbox of a world with nothing beyond its cursor")
	default:
	}
}
