package actor

import (
	"context"
	"testing"
)

type nopActor struct{ Base }

func (nopActor) Handle(*Proc, int) error { return nil }

func BenchmarkSpawn(b *testing.B) {
	ctx := context.Background()
	sys := NewSystem()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Spawn[int](ctx, sys.Root(), nopActor{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sys.Close(ctx)
}

type sink struct {
	Base
	n, want int
	done    chan struct{}
}

func (s *sink) Handle(*Proc, int) error {
	s.n++
	if s.n == s.want {
		close(s.done)
	}
	return nil
}

// BenchmarkTell measures the one-way send path: it should not allocate.
func BenchmarkTell(b *testing.B) {
	ctx := context.Background()
	sys := NewSystem()
	s := &sink{want: b.N, done: make(chan struct{})}
	ref, _ := Spawn[int](ctx, sys.Root(), s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ref.Send(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	<-s.done
	b.StopTimer()
	sys.Close(ctx)
}
