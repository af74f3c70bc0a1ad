package actor

import (
	"context"
	"testing"
	"time"
)

type echoSrv struct{ Base }

func (echoSrv) HandleCall(_ *Proc, q int, _ ReplyTo[int]) (int, error) { return q, nil }
func (echoSrv) HandleCast(*Proc, struct{}) error                       { return nil }

func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	sys := NewSystem()
	srv, _ := StartServer[int, int, struct{}](ctx, sys.Root(), echoSrv{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := srv.Call(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sys.Close(ctx)
}

func BenchmarkCallWithTimeout(b *testing.B) {
	ctx := context.Background()
	sys := NewSystem()
	srv, _ := StartServer[int, int, struct{}](ctx, sys.Root(), echoSrv{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if _, err := srv.Call(cctx, i); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	b.StopTimer()
	sys.Close(ctx)
}

func BenchmarkCallTimeout(b *testing.B) {
	ctx := context.Background()
	sys := NewSystem()
	srv, _ := StartServer[int, int, struct{}](ctx, sys.Root(), echoSrv{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := srv.CallTimeout(ctx, i, time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sys.Close(ctx)
}
