// Package tcpproxy is a TCP proxy for tests that fault the path between a
// client and a server (PostgreSQL, for the store's and the cluster's
// tests) without touching the server, which other tests may share.
//
// The faults are what a client sees of a network or a server in trouble:
//
//   - Blip: every connection drops at once and new ones are refused for a
//     while (nothing listens), as in a database restart;
//   - Cut: every connection drops; new ones are accepted as before;
//   - Hold (and Blackhole, a Hold of a set duration): a silent partition.
//     Connections stay open and new ones are accepted, but no byte passes
//     either way until it heals, when what was held flows on, as TCP would
//     deliver it after a partition;
//   - Swallow: the connections open now lead nowhere for good. They stay
//     open, and every byte either side sends them is lost, as on a path
//     black-holed for longer than any retransmission (a firewall that drops
//     a stale flow, a peer gone without a reset); new connections pass.
//
// Only tests import it.
package tcpproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards every connection accepted on Addr to its target.
type Proxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]*pair // both sides of every pair
	servers map[net.Conn]struct{}
	down    bool          // refusing: no listener, and a connection that races in is closed
	hole    chan struct{} // non-nil while held; closed when it heals
	closed  bool
	wg      sync.WaitGroup
}

// pair is one proxied connection: client and server sides.
type pair struct {
	swallowed atomic.Bool
}

// New starts a proxy to target (host:port) on a free local port; it
// closes when tb ends.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]*pair{}, servers: map[net.Conn]struct{}{}}
	p.serve(ln)
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port, the one clients dial.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // the listener was closed: a blip or the end
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.pipe(c)
			}()
		}
	}()
}

// track registers c as a side of pr, or closes it at once while the proxy
// is down.
func (p *Proxy) track(c net.Conn, pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		c.Close()
		return false
	}
	p.conns[c] = pr
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		delete(p.servers, c)
		c.Close()
	}
}

func (p *Proxy) pipe(client net.Conn) {
	pr := &pair{}
	if !p.track(client, pr) {
		return
	}
	p.await() // a connection accepted in a hole reaches nobody yet
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server, pr) {
		p.untrack(client)
		return
	}
	p.mu.Lock()
	p.servers[server] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.await()
				// Checked after the hold: what a swallow finds held is lost.
				if !pr.swallowed.Load() {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						break
					}
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go cp(server, client)
	go cp(client, server)
	<-done
	p.untrack(client, server) // unblocks the other copy
	<-done
}

// Blip drops every connection and refuses new ones for d.
func (p *Proxy) Blip(d time.Duration) error {
	p.mu.Lock()
	p.down = true
	ln := p.ln
	conns := p.allLocked()
	p.mu.Unlock()
	ln.Close()
	for _, c := range conns {
		p.untrack(c)
	}
	time.Sleep(d)
	// Listen again on the same port; Go sets SO_REUSEADDR, so the port's
	// closed connections do not hold it.
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return errors.Join(errors.New("the proxy could not listen again on "+p.addr), err)
	}
	p.mu.Lock()
	p.ln, p.down = ln, false
	p.mu.Unlock()
	p.serve(ln)
	return nil
}

func (p *Proxy) allLocked() []net.Conn {
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// await returns at once unless the proxy holds, and then when it heals.
func (p *Proxy) await() {
	p.mu.Lock()
	h := p.hole
	p.mu.Unlock()
	if h != nil {
		<-h
	}
}

// Cut drops every connection at once and returns how many; new ones are
// accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := p.allLocked()
	p.mu.Unlock()
	for _, c := range conns {
		p.untrack(c)
	}
	return len(conns) / 2
}

// Hold holds every byte, both ways, on every connection (new ones
// included) until heal is called (at most once counts; Close heals too).
func (p *Proxy) Hold() (heal func()) {
	h := make(chan struct{})
	p.mu.Lock()
	p.hole = h
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.hole == h { // Close may have healed it already
			p.hole = nil
			close(h)
		}
	}
}

// Blackhole holds every byte for d (see Hold), then lets it all through.
func (p *Proxy) Blackhole(d time.Duration) {
	heal := p.Hold()
	time.Sleep(d)
	heal()
}

// Swallow makes every connection open now lead nowhere, for good, and
// returns how many: each stays open, and every byte either side sends is
// lost. Connections accepted afterwards pass.
func (p *Proxy) Swallow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.conns {
		pr.swallowed.Store(true)
	}
	return len(p.servers)
}

// ServerPorts are the local ports of the proxy's connections to the
// server: what PostgreSQL shows as its backends' client ports.
func (p *Proxy) ServerPorts() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for c := range p.servers {
		if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
			out = append(out, a.Port)
		}
	}
	return out
}

// Close heals any hold, drops every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	ln := p.ln
	conns := p.allLocked()
	p.mu.Unlock()
	ln.Close()
	for _, c := range conns {
		p.untrack(c)
	}
	p.wg.Wait()
}
