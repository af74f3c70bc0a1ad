//go:build unix

package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// pgProxy is a TCP proxy between the children and PostgreSQL. Its blip is
// what a client sees of a database restart: every connection drops at
// once, new ones are refused for a while (nothing listens), then accepted
// again. The real server is never touched; other packages' tests share it.
type pgProxy struct {
	target string
	addr   string

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	down   bool // refusing: no listener, and a connection that races in is closed
	closed bool
	wg     sync.WaitGroup
}

func newPGProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
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
		c.Close()
	}
}

func (p *pgProxy) pipe(client net.Conn) {
	if !p.track(client) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		p.untrack(client)
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
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

func (p *pgProxy) close() {
	p.mu.Lock()
	p.closed = true
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
