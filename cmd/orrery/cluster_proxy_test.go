//go:build unix

package main

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/tcpproxy"
)

// pgProxy is a TCP proxy between the children and PostgreSQL
// (internal/tcpproxy, shared with the store's tests). Its blip is what a
// client sees of a database restart; its cut drops every connection but
// keeps accepting; its black hole is a silent partition, healed after a
// while. The real server is never touched; other packages' tests share it.
type pgProxy struct {
	*tcpproxy.Proxy
	addr string
}

func newPGProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	p := tcpproxy.New(t, target)
	return &pgProxy{Proxy: p, addr: p.Addr()}
}

func (p *pgProxy) blip(d time.Duration) error { return p.Blip(d) }
func (p *pgProxy) cut() int                   { return p.Cut() }
func (p *pgProxy) blackhole(d time.Duration)  { p.Blackhole(d) }
func (p *pgProxy) serverPorts() []int         { return p.ServerPorts() }
