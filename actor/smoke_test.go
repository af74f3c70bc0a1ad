package actor

import (
	"context"
	"testing"
)

type counter struct {
	Base
	n    int
	done chan struct{}
	want int
}

func (c *counter) Handle(p *Proc, m int) error {
	c.n++
	if c.n == c.want {
		close(c.done)
	}
	return nil
}

type echo struct{ Base }

func (echo) HandleCall(p *Proc, q int, _ ReplyTo[int]) (int, error) { return q * 2, nil }
func (echo) HandleCast(p *Proc, m string) error                     { return nil }

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	sys := NewSystem()
	c := &counter{done: make(chan struct{}), want: 1000}
	ref, err := Spawn[int](ctx, sys.Root(), c)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if err := ref.Send(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	<-c.done
	srv, err := StartServer[int, int, string](ctx, sys.Root(), echo{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		v, err := srv.Call(ctx, i)
		if err != nil || v != 2*i {
			t.Fatal(v, err)
		}
	}
	v, err := Call(ctx, srv, 21)
	if v != 42 || err != nil {
		t.Fatal(v, err)
	}
	o, err := sys.Close(ctx)
	if err != nil || !o.IsOk() {
		t.Fatal(o, err)
	}
	if _, err := srv.Call(ctx, 1); err == nil {
		t.Fatal("call after close succeeded")
	}
}
