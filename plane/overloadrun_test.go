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

// TestOverloadRun measures shedding on one node with an inbox bound:
// its capacity (closed loop, as many callers per world as the bound lets
// wait, so none is refused), then that rate offered open loop (nominal
// load), then three times it (overload). It checks correctness only (CI
// runs it at 2 s a phase): every acknowledged call applied exactly once,
// every refused one left no trace (each world's state counts exactly its
// acknowledged calls and its inbox holds exactly them). The figures are
// bench/README.md's: ORRERY_OVERLOAD_SECONDS sets the phase length (60
// there), ORRERY_OVERLOAD_BACKEND the store (memstore; sqlite; postgres),
// ORRERY_OVERLOAD_MAX_INBOX the bound (default 16). The unbounded
// baseline beside it is a measurement, not a check CI runs (its backlog
// takes minutes to clear on a busy box): it is built with -tags
// overloadbench (overloadbaseline_test.go).
func TestOverloadRun(t *testing.T) {
	bound := 16
	if v, err := strconv.Atoi(os.Getenv("ORRERY_OVERLOAD_MAX_INBOX")); err == nil && v > 0 {
		bound = v
	}
	phases := overloadRun(t, plane.Limits{MaxInbox: bound}, bound)
	t.Logf("\n%s\n%s\n%s", phases[0], phases[1], phases[2])
	if phases[2].refused == 0 {
		t.Log("no call was refused at 3x: the bound was never reached")
	}
}

// The overload run's shape: worlds, and the open loop's pool of callers.
const olWorlds, olOpenCallers = 8, 512

// olDue is an open-loop call: its number and when it was due.
type olDue struct {
	i  int
	at time.Time
}

// overloadRun runs the three phases on a node of its own with limits,
// perWorld closed-loop callers to each world, and checks the outcome
// exactly (see TestOverloadRun).
func overloadRun(t *testing.T, limits plane.Limits, perWorld int) [3]*olPhase {
	secs := 2
	if v, err := strconv.Atoi(os.Getenv("ORRERY_OVERLOAD_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	phase := time.Duration(secs) * time.Second
	const worlds = olWorlds
	ids := make([]string, worlds)
	for i := range ids {
		ids[i] = fmt.Sprintf("ol-%d", i)
	}
	// The host snapshots as a production host does (the rig's default of
	// every 2 heights would make each step a snapshot write).
	opts := testrig.NodeOptions{Kernels: plane.Kernels{olUniverse: olKernel()}, Universes: []string{olUniverse}, Limits: limits,
		Host: func(c *plane.HostConfig) { c.SnapshotEvery = 0 },
		// Three phases and the check after them: the rig's default
		// lifetime (3 minutes) would end 60 s phases at their close.
		Lifetime: 3*phase + 3*time.Minute}
	if b := os.Getenv("ORRERY_OVERLOAD_BACKEND"); b != "" && b != testrig.Memstore {
		opts.Store = testrig.Open(t, t.Context(), b, &testrig.Clock{})
	}
	n := testrig.NewNode(t, opts)
	for _, id := range ids {
		n.Create(id, olUniverse)
	}
	ctx := n.Ctx
	var admitted [worlds]atomic.Int64
	var mu sync.Mutex
	// call makes call i and counts it in p; its latency runs from start,
	// when it was due (open loop: a call launched late waited all the
	// same, so the lateness is the node's to answer for, not hidden).
	call := func(p *olPhase, i int, start time.Time) {
		_, err := n.PlaneClient.Call(ctx, ids[i%worlds], olInc{})
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		p.offered++
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
	// Capacity: perWorld callers to each world, each waiting for its
	// answer before the next call, so no inbox holds more than perWorld.
	capacity := &olPhase{name: fmt.Sprintf("capacity (closed loop, %d callers)", perWorld*worlds)}
	var wg sync.WaitGroup
	begin := time.Now()
	for k := range perWorld * worlds {
		wg.Go(func() {
			for time.Since(begin) < phase {
				call(capacity, k, time.Now())
			}
		})
	}
	wg.Wait()
	capacity.elapsed = time.Since(begin)
	rate := float64(capacity.admitted) / capacity.elapsed.Seconds()
	phases := [3]*olPhase{capacity, openLoop(phase, "nominal (open loop, 1x)", rate, call), openLoop(phase, "3x offered (open loop)", 3*rate, call)}
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
	return phases
}

// openLoop offers calls at rate for d: call i is due at begin + i/rate.
// A pacer hands the due calls to a pool of callers (a goroutine per call
// would cost the two cores more than the node's refusals do); a call no
// caller was free for waits in the queue, and its latency counts from
// when it was due all the same.
func openLoop(d time.Duration, name string, rate float64, call func(p *olPhase, i int, start time.Time)) *olPhase {
	p := &olPhase{name: name}
	every := time.Duration(float64(time.Second) / max(rate, 1))
	due := make(chan olDue, olOpenCallers)
	var wg sync.WaitGroup
	for range olOpenCallers {
		wg.Go(func() {
			for c := range due {
				call(p, c.i, c.at)
			}
		})
	}
	begin := time.Now()
	for i := 0; ; {
		now := time.Now()
		if now.Sub(begin) >= d {
			break
		}
		for ; begin.Add(time.Duration(i) * every).Before(now); i++ {
			due <- olDue{i: i, at: begin.Add(time.Duration(i) * every)}
		}
		time.Sleep(time.Millisecond) // pacing the offered load, not waiting for a result
	}
	close(due)
	wg.Wait()
	p.elapsed = time.Since(begin)
	return p
}
