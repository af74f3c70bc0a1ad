//go:build unix

package main

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// pgProxy is a TCP proxy between the children and PostgreSQL. Its blip is
// what a client sees of a database restart: every connection drops at
// once, new ones are refused for a while (nothing listens), then accepted
// again. Its cut drops every connection but keeps accepting; its black
// hole is a silent partition: connections stay open (new ones are
// accepted) but no byte passes either way until it heals, when what was
// held flows on, as TCP would deliver it after a partition. The real
// server is never touched; other packages' tests share it.
type pgProxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	servers map[net.Conn]struct{} // the server sides of conns
	down    bool                  // refusing: no listener, and a connection that races in is closed
	hole    chan struct{}         // non-nil while black-holed; closed when it heals
	closed  bool
	wg      sync.WaitGroup
}

func newPGProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}, servers: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

func (p *pgProxy) serve(ln net.Listener) {
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

// track registers c, or closes it at once while the proxy is down.
func (p *pgProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *pgProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		delete(p.servers, c)
		c.Close()
	}
}

func (p *pgProxy) pipe(client net.Conn) {
	if !p.track(client) {
		return
	}
	p.await() // a connection accepted in a black hole reaches nobody yet
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
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
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
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

// blip drops every connection and refuses new ones for d.
func (p *pgProxy) blip(d time.Duration) error {
	p.mu.Lock()
	p.down = true
	ln := p.ln
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
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

// await returns at once unless the proxy is black-holed, and then when it
// heals.
func (p *pgProxy) await() {
	p.mu.Lock()
	h := p.hole
	p.mu.Unlock()
	if h != nil {
		<-h
	}
}

// cut drops every connection at once; new ones are accepted as before.
func (p *pgProxy) cut() int {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		p.untrack(c)
	}
	return len(conns) / 2
}

// blackhole holds every byte, both ways, on every connection (new ones
// included) for d, then lets it all through.
func (p *pgProxy) blackhole(d time.Duration) {
	h := make(chan struct{})
	p.mu.Lock()
	p.hole = h
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	if p.hole == h { // close may have healed it already
		p.hole = nil
		close(h)
	}
	p.mu.Unlock()
}

// serverPorts are the local ports of the proxy's connections to the
// server: what PostgreSQL shows as its backends' client ports.
func (p *pgProxy) serverPorts() []int {
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

func (p *pgProxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	ln := p.ln
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	ln.Close()
	for _, c := range conns {
		p.untrack(c)
	}
	p.wg.Wait()
}
