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
	nominal, over := overloadRun(t, plane.Limits{MaxInbox: 2 * olClosedCallers / olWorlds})
	t.Logf("\n%s\n%s", nominal, over)
	if over.refused == 0 {
		t.Log("no call was refused at 3x: the bound was never reached")
	}
}

// The overload run's shape: worlds, and the closed loop's callers.
const olWorlds, olClosedCallers = 8, 16

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
	n := testrig.NewNode(t, testrig.NodeOptions{Kernels: plane.Kernels{olUniverse: olKernel()}, Universes: []string{olUniverse}, Limits: limits})
	for _, id := range ids {
		n.Create(id, olUniverse)
	}
	ctx := n.Ctx
	var admitted [worlds]atomic.Int64
	call := func(p *olPhase, mu *sync.Mutex, i int) {
		start := time.Now()
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
				call(nominal, &mu, int(next.Add(1)))
				mu.Lock()
				nominal.offered++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	nominal.elapsed = time.Since(begin)
	rate := float64(nominal.admitted) / nominal.elapsed.Seconds()
	// Open loop at 3x: a call every 1/(3*rate), each on its own.
	over = &olPhase{name: "3x offered (open loop)"}
	every := time.Duration(float64(time.Second) / (3 * max(rate, 1)))
	begin = time.Now()
	for i := 0; time.Since(begin) < phase; i++ {
		over.offered++
		wg.Go(func() { call(over, &mu, i) })
		if wait := time.Until(begin.Add(time.Duration(i+1) * every)); wait > 0 {
			time.Sleep(wait) // pacing the offered load, not waiting for a result
		}
	}
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
