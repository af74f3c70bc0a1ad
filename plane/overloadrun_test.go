package plane_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// The overload run's world: each call increments and replies, so a
// call's answer is the applied work and its latency is end to end.
type (
	olState struct{ N int64 }
	olInc   struct{}
)

const olUniverse = "overload"

func olKernel() world.Kernel { return olDef().Kernel() }

func olDef() *world.Def[olState] {
	d := world.New[olState]("test.overload", 1)
	world.On(d, func(c *world.Ctx, s *olState, _ olInc) error {
		s.N++
		c.Reply(s.N)
		return nil
	})
	return d
}

// olPhase is one phase's outcome.
type olPhase struct {
	name               string
	offered, admitted  int
	refused, otherErrs int
	lat                []time.Duration
	elapsed            time.Duration
}

func (p *olPhase) pct(q float64) time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	slices.Sort(p.lat)
	return p.lat[min(len(p.lat)-1, int(q*float64(len(p.lat))))]
}

func (p *olPhase) String() string {
	return fmt.Sprintf("| %s | %d | %.0f/s | %d | %d | %s | %s |", p.name, p.offered,
		float64(p.admitted)/p.elapsed.Seconds(), p.refused, p.otherErrs, p.pct(0.5).Round(100*time.Microsecond), p.pct(0.99).Round(100*time.Microsecond))
}

// TestOverloadRun measures shedding: one node's sustainable call rate
// (closed loop), then 3x that rate offered open loop, with the inbox
// bound. It checks correctness only (CI runs it at 2 s a phase): every
// acknowledged call applied exactly once, every refused one left no trace
// (each world's state counts exactly its acknowledged calls and its inbox
// holds exactly them). ORRERY_OVERLOAD_SECONDS sets the phase length
// (bench/README.md's table: 60). The unbounded baseline beside it is a
// measurement, not a check CI runs (its backlog takes minutes to clear on
// a busy box): it is built with -tags overloadbench
// (overloadbaseline_test.go).
func TestOverloadRun(t *testing.T) {
	bound := olClosedCallers
	if v, err := strconv.Atoi(os.Getenv("ORRERY_OVERLOAD_MAX_INBOX")); err == nil && v > 0 {
		bound = v
	}
	nominal, over := overloadRun(t, plane.Limits{MaxInbox: bound})
	t.Logf("\n%s\n%s", nominal, over)
	if over.refused == 0 {
		t.Log("no call was refused at 3x: the bound was never reached")
	}
}

// The overload run's shape: worlds, the closed loop's callers, and the
// open loop's pool of callers.
const olWorlds, olClosedCallers, olOpenCallers = 8, 16, 512

// olDue is an open-loop call: its number and when it was due.
type olDue struct {
	i  int
	at time.Time
}

// overloadRun runs the two phases on a node of its own with limits and
// checks the outcome exactly (see TestOverloadRun).
func overloadRun(t *testing.T, limits plane.Limits) (nominal, over *olPhase) {
	secs := 2
	if v, err := strconv.Atoi(os.Getenv("ORRERY_OVERLOAD_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	phase := time.Duration(secs) * time.Second
	const worlds, closedCallers = olWorlds, olClosedCallers
	ids := make([]string, worlds)
	for i := range ids {
		ids[i] = fmt.Sprintf("ol-%d", i)
	}
	// The host snapshots as a production host does (the rig's default of
	// every 2 heights would make each step a snapshot write). The store is
	// memstore unless ORRERY_OVERLOAD_BACKEND names another (sqlite, the
	// default of `orrery serve`; postgres).
	opts := testrig.NodeOptions{Kernels: plane.Kernels{olUniverse: olKernel()}, Universes: []string{olUniverse}, Limits: limits,
		Host: func(c *plane.HostConfig) { c.SnapshotEvery = 0 }}
	if b := os.Getenv("ORRERY_OVERLOAD_BACKEND"); b != "" && b != testrig.Memstore {
		opts.Store = testrig.Open(t, t.Context(), b, nil)
	}
	n := testrig.NewNode(t, opts)
	for _, id := range ids {
		n.Create(id, olUniverse)
	}
	ctx := n.Ctx
	var admitted [worlds]atomic.Int64
	// call makes call i and counts it in p; its latency runs from start,
	// when it was due (open loop: a call launched late waited all the
	// same, so the lateness is the node's to answer for, not hidden).
	call := func(p *olPhase, mu *sync.Mutex, i int, start time.Time) {
		_, err := n.PlaneClient.Call(ctx, ids[i%worlds], olInc{})
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			p.admitted++
			admitted[i%worlds].Add(1)
			p.lat = append(p.lat, d)
		case errors.Is(err, plane.ErrOverloaded):
			p.refused++
		default:
			p.otherErrs++
			t.Errorf("call: %v", err)
		}
	}
	// Closed loop: the node's sustainable rate.
	nominal = &olPhase{name: "nominal (closed loop)"}
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := time.Now()
	var next atomic.Int64
	for range closedCallers {
		wg.Go(func() {
			for time.Since(begin) < phase {
				call(nominal, &mu, int(next.Add(1)), time.Now())
				mu.Lock()
				nominal.offered++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	nominal.elapsed = time.Since(begin)
	rate := float64(nominal.admitted) / nominal.elapsed.Seconds()
	// Open loop at 3x: call i is due at begin + i/(3*rate). A pacer hands
	// the due calls to a pool of callers (a goroutine per call would cost
	// the two cores more than the node's refusals do); a call no caller
	// was free for waits in the queue, and its latency counts from when it
	// was due all the same.
	over = &olPhase{name: "3x offered (open loop)"}
	every := time.Duration(float64(time.Second) / (3 * max(rate, 1)))
	due := make(chan olDue, olOpenCallers)
	for range olOpenCallers {
		wg.Go(func() {
			for d := range due {
				call(over, &mu, d.i, d.at)
			}
		})
	}
	begin = time.Now()
	for i := 0; ; {
		now := time.Now()
		if now.Sub(begin) >= phase {
			break
		}
		for ; begin.Add(time.Duration(i) * every).Before(now); i++ {
			over.offered++
			due <- olDue{i: i, at: begin.Add(time.Duration(i) * every)}
		}
		time.Sleep(time.Millisecond) // pacing the offered load, not waiting for a result
	}
	close(due)
	wg.Wait()
	over.elapsed = time.Since(begin)
	// Exactly once, and no trace of the refused.
	for i, id := range ids {
		want := admitted[i].Load()
		s, err := n.PlaneClient.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		w, err := world.Load(olDef(), id, s)
		if err != nil {
			t.Fatal(err)
		}
		v, err := w.Value()
		if err != nil {
			t.Fatal(err)
		}
		items, err := n.Store.ReadInbox(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if v.N != want || int64(len(items)) != want {
			t.Fatalf("%s: state counts %d, inbox holds %d, %d calls acknowledged", id, v.N, len(items), want)
		}
	}
	return nominal, over
}
