package tcpproxy

import (
	"io"
	"net"
	"testing"

	"github.com/orrery-run/orrery/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// server accepts connections on a local port and hands each to the test.
func server(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), conns
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip checks that msg, written on c, reaches s.
func roundTrip(t *testing.T, c net.Conn, s net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s, got); err != nil || string(got) != msg {
		t.Fatalf("the server read %q, %v; want %q", got, err, msg)
	}
}

// A swallowed connection stays open while every byte sent on it, either
// way, is lost: what one side wrote before it closed never reaches the
// other, which sees only the end. A connection opened afterwards passes.
func TestSwallowLosesEveryByteOfTheConnectionsOpenThenAndOnlyThose(t *testing.T) {
	addr, accepted := server(t)
	p := New(t, addr)
	// One at a time: the proxy dials the server for each on its own.
	up := dial(t, p)
	sUp := <-accepted
	down := dial(t, p)
	sDown := <-accepted
	roundTrip(t, up, sUp, "before")
	roundTrip(t, down, sDown, "before")
	if n := p.Swallow(); n != 2 {
		t.Fatalf("Swallow = %d, want 2", n)
	}
	if len(p.ServerPorts()) != 2 {
		t.Fatal("a swallowed connection was closed")
	}
	later := dial(t, p)
	roundTrip(t, later, <-accepted, "after")
	// The proxy copies each direction in order: a byte is read, and
	// dropped, before the end that follows it is seen.
	if _, err := up.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	up.Close()
	if got, err := io.ReadAll(sUp); err != nil || len(got) != 0 {
		t.Fatalf("the server read %q, %v from a swallowed connection; want nothing, then its end", got, err)
	}
	if _, err := sDown.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	sDown.Close()
	if got, err := io.ReadAll(down); err != nil || len(got) != 0 {
		t.Fatalf("the client read %q, %v from a swallowed connection; want nothing, then its end", got, err)
	}
}

// What a hold keeps is delivered when it heals, on the connections open
// then and on one opened during it.
func TestHoldDeliversWhatItHeldWhenItHeals(t *testing.T) {
	addr, accepted := server(t)
	p := New(t, addr)
	c1 := dial(t, p)
	s1 := <-accepted
	heal := p.Hold()
	if _, err := c1.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, p) // accepted by the proxy, not yet passed on
	if _, err := c2.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	heal()
	got := make([]byte, 4)
	if _, err := io.ReadFull(s1, got); err != nil || string(got) != "held" {
		t.Fatalf("after the heal the server read %q, %v; want %q", got, err, "held")
	}
	s2 := <-accepted
	got = make([]byte, 3)
	if _, err := io.ReadFull(s2, got); err != nil || string(got) != "new" {
		t.Fatalf("the connection opened during the hold delivered %q, %v; want %q", got, err, "new")
	}
}
