package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/registry"
	"github.com/orrery-run/orrery/supervisor"
)

// busy is a racy scenario touching most of the runtime: concurrent callers,
// a supervised worker that crashes and is restarted, monitors, timers, and
// a registry collision. Its trace depends on the schedule.
func busy(env *Env) error {
	reg := registry.New(env.Lab)
	srv, err := actor.StartServer[int, int, int](env.Ctx, env.Root, &pinger{})
	if err != nil {
		return err
	}
	crashes := 0
	sup, err := supervisor.Start(env.Ctx, env.Root, supervisor.Spec{
		Strategy: supervisor.OneForOne, MaxRestarts: 10, Window: time.Minute,
		Children: []supervisor.ChildSpec{{
			ID: "worker", Restart: supervisor.Permanent,
			Start: func(ctx context.Context, s *actor.Scope) (actor.PID, error) {
				return s.Go("worker", func(ctx context.Context) error {
					if err := actor.Sleep(ctx, env.Lab, 3*time.Millisecond); err != nil {
						return err
					}
					if crashes < 2 {
						crashes++
						return fmt.Errorf("worker crash %d", crashes)
					}
					<-ctx.Done()
					return ctx.Err()
				})
			},
		}},
	})
	if err != nil {
		return err
	}
	var pids []actor.PID
	for i := 1; i <= 3; i++ {
		i := i
		pid, err := env.Root.Go("client", func(ctx context.Context) error {
			_, _ = reg.Register("leader", actor.PID{}) // rejected: zero PID
			for j := 0; j < 3; j++ {
				if _, err := srv.Call(ctx, i*10+j); err != nil {
					return err
				}
				if err := actor.Sleep(ctx, env.Lab, time.Duration(env.Lab.Uint64()%3)*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		pids = append(pids, pid)
	}
	for _, p := range pids {
		if o, err := p.Wait(env.Ctx); err != nil || !o.IsOk() {
			return fmt.Errorf("client %v: %v %v", p, o, err)
		}
	}
	if _, err := sup.Stop(env.Ctx); err != nil {
		return err
	}
	return nil
}

// TestSameSeedSameFingerprint: 20 repetitions of one seed give one
// fingerprint, and so do GOMAXPROCS 1 and 8 in this process.
func TestSameSeedSameFingerprint(t *testing.T) {
	first := Run(Config{Seed: 99, Name: "busy"}, busy)
	if first.Failure != nil {
		t.Fatalf("run failed: %v", first.Failure)
	}
	for i := 0; i < 20; i++ {
		if got := Run(Config{Seed: 99}, busy); got.Fingerprint != first.Fingerprint {
			t.Fatalf("repetition %d diverged: %s vs %s", i, got.Fingerprint, first.Fingerprint)
		}
	}
	for _, procs := range []int{1, 8} {
		prev := runtime.GOMAXPROCS(procs)
		got := Run(Config{Seed: 99}, busy)
		runtime.GOMAXPROCS(prev)
		if got.Fingerprint != first.Fingerprint {
			t.Fatalf("GOMAXPROCS=%d: fingerprint %s, want %s", procs, got.Fingerprint, first.Fingerprint)
		}
	}
}

// TestFingerprintStableAcrossProcesses runs the same seed in fresh
// processes (each with its own map hash seed) under GOMAXPROCS 1 and 8, and
// compares the fingerprints with this process's.
func TestFingerprintStableAcrossProcesses(t *testing.T) {
	if os.Getenv("ORRERY_LAB_CHILD") == "1" {
		fmt.Printf("fingerprint=%s\n", Run(Config{Seed: 99}, busy).Fingerprint)
		return
	}
	want := Run(Config{Seed: 99}, busy).Fingerprint
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, procs := range []string{"1", "8"} {
		cmd := exec.Command(exe, "-test.run=^TestFingerprintStableAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "ORRERY_LAB_CHILD=1", "GOMAXPROCS="+procs)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child GOMAXPROCS=%s: %v\n%s", procs, err, out)
		}
		if !strings.Contains(string(out), "fingerprint="+want) {
			t.Fatalf("child GOMAXPROCS=%s printed a different fingerprint (want %s):\n%s", procs, want, out)
		}
	}
}

// TestDifferentSeedsGiveDifferentInterleavings: the schedule really is drawn
// from the seed: over 20 seeds the racy scenario takes many distinct paths.
func TestDifferentSeedsGiveDifferentInterleavings(t *testing.T) {
	seen := map[string]uint64{}
	for seed := uint64(1); seed <= 20; seed++ {
		res := Run(Config{Seed: seed}, busy)
		if res.Failure != nil {
			t.Fatalf("seed %d: %v", seed, res.Failure)
		}
		seen[res.Fingerprint] = seed
	}
	if len(seen) < 10 {
		t.Fatalf("20 seeds produced only %d distinct traces", len(seen))
	}
}

// TestVirtualTimeJumpsToNextTimer: with nothing runnable the clock jumps,
// so an hour of sleeping costs no waiting; timers due at the same instant
// fire in the order they were set.
func TestVirtualTimeJumpsToNextTimer(t *testing.T) {
	var order []int
	res := Run(Config{Seed: 1}, func(env *Env) error {
		start := env.Lab.Now()
		for i := 0; i < 5; i++ {
			i := i
			env.Lab.AfterFunc(time.Hour, func() { order = append(order, i) })
		}
		if err := actor.Sleep(env.Ctx, env.Lab, time.Hour+time.Second); err != nil {
			return err
		}
		if got := env.Lab.Now().Sub(start); got != time.Hour+time.Second {
			return fmt.Errorf("virtual clock advanced %v, want 1h0m1s", got)
		}
		return nil
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Fatalf("same-instant timers fired in order %v, want set order", order)
	}
	if res.VirtualTime < time.Hour {
		t.Fatalf("virtual time %v, want at least an hour", res.VirtualTime)
	}
}

// TestFaultsAreDrawnFromTheSeed: injected crashes and mailbox-full pressure
// appear in the trace, the same ones for the same seed, and the option set
// is reported.
func TestFaultsAreDrawnFromTheSeed(t *testing.T) {
	faults := Faults{Crash: 0.2, MailboxFull: 0.3}
	scenario := func(env *Env) error {
		crashed := 0
		for i := 0; i < 20; i++ {
			srv, err := actor.StartServer[int, int, int](env.Ctx, env.Root, &pinger{})
			if err != nil {
				return err
			}
			_ = srv.TryCast(1)
			if _, err := srv.Call(env.Ctx, i); err != nil {
				crashed++
			}
			_, _ = srv.Stop(env.Ctx)
		}
		if crashed == 0 {
			return fmt.Errorf("no injected crash in 20 calls at p=0.2")
		}
		return nil
	}
	a := Run(Config{Seed: 5, Faults: faults}, scenario)
	b := Run(Config{Seed: 5, Faults: faults}, scenario)
	if a.Failure != nil {
		t.Fatal(a.Failure)
	}
	if a.Fingerprint != b.Fingerprint {
		t.Fatal("the same seed injected different faults")
	}
	var crash, full int
	for _, ev := range a.Events {
		if ev.Kind == "fault" && ev.Detail == "crash" {
			crash++
		}
		if ev.Kind == "fault" && ev.Detail == "mailbox-full" {
			full++
		}
	}
	if crash == 0 || full == 0 {
		t.Fatalf("trace has %d crash and %d mailbox-full faults, want both", crash, full)
	}
	if s := faults.String(); !strings.Contains(s, "crash=0.200") || !strings.Contains(s, "mailbox-full=0.300") {
		t.Fatalf("option set %q does not print the probabilities", s)
	}
	if FaultsFromSeed(3) != FaultsFromSeed(3) {
		t.Fatal("FaultsFromSeed is not a function of the seed")
	}
}

// TestBuggifyIsSeededAndTraced is the hook the durable plane will use.
func TestBuggifyIsSeededAndTraced(t *testing.T) {
	fired := func(seed uint64) (n int, res *Result) {
		res = Run(Config{Seed: seed, Faults: Faults{Buggify: 0.5}}, func(env *Env) error {
			for i := 0; i < 40; i++ {
				if env.Lab.Buggify("store.append") {
					n++
				}
			}
			return nil
		})
		return n, res
	}
	n1, r1 := fired(11)
	n2, r2 := fired(11)
	if n1 != n2 || r1.Fingerprint != r2.Fingerprint {
		t.Fatalf("same seed: %d vs %d buggify hits", n1, n2)
	}
	if n1 == 0 || n1 == 40 {
		t.Fatalf("p=0.5 fired %d of 40 times", n1)
	}
	hits := 0
	for _, ev := range r1.Events {
		if ev.Kind == "fault" && ev.Detail == "buggify store.append" {
			hits++
		}
	}
	if hits != n1 {
		t.Fatalf("trace records %d buggify hits, %d happened", hits, n1)
	}
}

// BenchmarkLabStep reports the wall-clock cost of one scheduled turn (a
// park/unpark hand-off through the lab scheduler), the lab's unit of work:
// two servers call each other in turn for 2,000 round trips.
func BenchmarkLabStep(b *testing.B) {
	b.ReportAllocs()
	var steps int
	for i := 0; i < b.N; i++ {
		res := Run(Config{Seed: uint64(i)}, func(env *Env) error {
			srv, err := actor.StartServer[int, int, int](env.Ctx, env.Root, &pinger{})
			if err != nil {
				return err
			}
			for j := 0; j < 2000; j++ {
				if _, err := srv.Call(env.Ctx, j); err != nil {
					return err
				}
			}
			return nil
		})
		if res.Failure != nil {
			b.Fatal(res.Failure)
		}
		steps += res.Steps
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(float64(steps)/float64(b.N), "steps/run")
}

// BenchmarkLabVirtualHour: a supervisor restarting a crashing child every
// minute for an hour of virtual time; reports wall time per run.
func BenchmarkLabVirtualHour(b *testing.B) {
	for i := 0; i < b.N; i++ {
		res := Run(Config{Seed: uint64(i)}, func(env *Env) error {
			sup, err := supervisor.Start(env.Ctx, env.Root, supervisor.Spec{
				Strategy: supervisor.OneForOne, MaxRestarts: 100, Window: time.Hour,
				Children: []supervisor.ChildSpec{{ID: "tick", Restart: supervisor.Permanent,
					Start: func(ctx context.Context, s *actor.Scope) (actor.PID, error) {
						return s.Go("tick", func(ctx context.Context) error {
							if err := actor.Sleep(ctx, env.Lab, time.Minute); err != nil {
								return err
							}
							return fmt.Errorf("tick")
						})
					}}},
			})
			if err != nil {
				return err
			}
			if err := actor.Sleep(env.Ctx, env.Lab, time.Hour); err != nil {
				return err
			}
			_, err = sup.Stop(env.Ctx)
			return err
		})
		if res.Failure != nil || res.VirtualTime < time.Hour {
			b.Fatalf("virtual hour run: %v (virtual %v)", res.Failure, res.VirtualTime)
		}
	}
}
