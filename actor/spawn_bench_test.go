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
