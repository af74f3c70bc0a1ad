package actor

import (
	"context"
	"testing"
)

type ppMsg struct{ peer *Ref[ppMsg] }

type ppActor struct {
	Base
	peer *Ref[ppMsg]
	left int
	self *Ref[ppMsg]
	done chan struct{}
}

func (a *ppActor) Handle(p *Proc, m ppMsg) error {
	if a.done == nil { // ponger
		return m.peer.Send(p.Ctx(), ppMsg{})
	}
	a.left--
	if a.left == 0 {
		close(a.done)
		return nil
	}
	return a.peer.Send(p.Ctx(), ppMsg{peer: a.self})
}

func BenchmarkPingPong(b *testing.B) {
	ctx := context.Background()
	sys := NewSystem()
	pg, _ := Spawn[ppMsg](ctx, sys.Root(), &ppActor{})
	pa := &ppActor{left: b.N, done: make(chan struct{}), peer: pg}
	pi, _ := Spawn[ppMsg](ctx, sys.Root(), pa)
	pa.self = pi
	b.ReportAllocs()
	b.ResetTimer()
	_ = pg.Send(ctx, ppMsg{peer: pi})
	<-pa.done
	b.StopTimer()
	sys.Close(ctx)
}
