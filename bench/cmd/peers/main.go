// Command peers runs the five actor scenarios (tell, ping-pong, call
// p50/p99, spawn+stop, fan-out) on Orrery, with the parameters and output
// format of the peer libraries' benchmark programs, so that one script can
// print every library's row in one table (see bench/README.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/orrery-run/orrery/actor"
)

var (
	nTell   = flag.Int("tell", 1_000_000, "one-way messages")
	nPing   = flag.Int("ping", 200_000, "ping-pong round trips")
	nCall   = flag.Int("call", 50_000, "sequential request/reply calls")
	nSpawn  = flag.Int("spawn", 100_000, "actors to spawn")
	nFanA   = flag.Int("fanactors", 100, "fan-out targets")
	nFanMsg = flag.Int("fanmsgs", 10_000, "messages per fan-out target")
	mbox    = flag.Int("mailbox", actor.DefaultMailboxCapacity, "mailbox capacity")
)

func report(name string, n int, d time.Duration, unit string) {
	fmt.Printf("orrery %-12s n=%-9d %-12v %12.0f %s\n", name, n, d.Round(time.Millisecond), float64(n)/d.Seconds(), unit)
}

type counter struct {
	actor.Base
	n, target int
	done      chan struct{}
}

func (c *counter) Handle(_ *actor.Proc, _ int) error {
	c.n++
	if c.n == c.target {
		close(c.done)
	}
	return nil
}

type pingMsg struct {
	peer *actor.Ref[pingMsg]
}

type pinger struct {
	actor.Base
	left int
	self *actor.Ref[pingMsg]
	peer *actor.Ref[pingMsg]
	done chan struct{}
}

func (p *pinger) Handle(pc *actor.Proc, m pingMsg) error {
	p.left--
	if p.left == 0 {
		close(p.done)
		return nil
	}
	return p.peer.Send(pc.Ctx(), pingMsg{peer: p.self})
}

type ponger struct{ actor.Base }

func (ponger) Handle(pc *actor.Proc, m pingMsg) error {
	return m.peer.Send(pc.Ctx(), pingMsg{})
}

type echo struct{ actor.Base }

func (echo) HandleCall(_ *actor.Proc, q int, _ actor.ReplyTo[int]) (int, error) { return q, nil }
func (echo) HandleCast(*actor.Proc, struct{}) error                             { return nil }

type nop struct{ actor.Base }

func (nop) Handle(*actor.Proc, int) error { return nil }

func main() {
	flag.Parse()
	fmt.Printf("# go=%s GOMAXPROCS=%d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	ctx := context.Background()
	sys := actor.NewSystem()
	root := sys.Root()
	mb := actor.WithMailbox(*mbox)
	{
		done := make(chan struct{})
		ref, _ := actor.Spawn[int](ctx, root, &counter{target: *nTell, done: done}, mb)
		t0 := time.Now()
		for i := 0; i < *nTell; i++ {
			_ = ref.Send(ctx, i)
		}
		<-done
		report("tell", *nTell, time.Since(t0), "msg/s")
		ref.Stop(ctx)
	}
	{
		done := make(chan struct{})
		pg, _ := actor.Spawn[pingMsg](ctx, root, ponger{}, mb)
		pi := &pinger{left: *nPing, done: done, peer: pg}
		piRef, _ := actor.Spawn[pingMsg](ctx, root, pi, mb)
		pi.self = piRef
		t0 := time.Now()
		_ = pg.Send(ctx, pingMsg{peer: piRef})
		<-done
		report("pingpong", *nPing, time.Since(t0), "roundtrips/s")
		piRef.Stop(ctx)
		pg.Stop(ctx)
	}
	{
		srv, _ := actor.StartServer[int, int, struct{}](ctx, root, echo{}, mb)
		lat := make([]time.Duration, *nCall)
		t0 := time.Now()
		for i := range lat {
			s := time.Now()
			if _, err := srv.CallTimeout(ctx, i, time.Second); err != nil {
				panic(err)
			}
			lat[i] = time.Since(s)
		}
		total := time.Since(t0)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		report("call", *nCall, total, "calls/s")
		fmt.Printf("orrery call-latency p50=%v p99=%v max=%v\n", lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
		srv.Stop(ctx)
	}
	{
		refs := make([]*actor.Ref[int], *nSpawn)
		t0 := time.Now()
		for i := range refs {
			refs[i], _ = actor.Spawn[int](ctx, root, nop{}, mb)
		}
		report("spawn", *nSpawn, time.Since(t0), "spawns/s")
		t0 = time.Now()
		for _, r := range refs {
			r.PID().Cancel(actor.CancelReason{Kind: actor.CancelRequested})
		}
		for _, r := range refs {
			r.PID().Wait(ctx)
		}
		report("stop", *nSpawn, time.Since(t0), "stops/s")
	}
	{
		refs := make([]*actor.Ref[int], *nFanA)
		dones := make([]chan struct{}, *nFanA)
		for i := range refs {
			dones[i] = make(chan struct{})
			refs[i], _ = actor.Spawn[int](ctx, root, &counter{target: *nFanMsg, done: dones[i]}, mb)
		}
		t0 := time.Now()
		for m := 0; m < *nFanMsg; m++ {
			for _, r := range refs {
				_ = r.Send(ctx, m)
			}
		}
		for _, d := range dones {
			<-d
		}
		report("fanout", *nFanA**nFanMsg, time.Since(t0), "msg/s")
	}
	sys.Close(ctx)
}
