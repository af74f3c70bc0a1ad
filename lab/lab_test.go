package lab

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

type pinger struct {
	actor.Base
	got []int
}

func (p *pinger) HandleCall(_ *actor.Proc, q int, _ actor.ReplyTo[int]) (int, error) {
	p.got = append(p.got, q)
	return q * 2, nil
}
func (p *pinger) HandleCast(*actor.Proc, int) error { return nil }

// racy: several client processes call one server concurrently; the order in
// which the server sees them depends on the schedule.
func racy(env *Env) error {
	srv, err := actor.StartServer[int, int, int](env.Ctx, env.Root, &pinger{})
	if err != nil {
		return err
	}
	var pids []actor.PID
	for i := 1; i <= 4; i++ {
		i := i
		pid, err := env.Root.Go("client", func(ctx context.Context) error {
			for j := 0; j < 3; j++ {
				if _, err := srv.Call(ctx, i*10+j); err != nil {
					return err
				}
				if err := actor.Sleep(ctx, env.Lab, time.Duration(i)*time.Millisecond); err != nil {
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
			return errors.Join(err, o.AsError())
		}
	}
	return nil
}

func TestSameSeedSameFingerprintSmoke(t *testing.T) {
	a := Run(Config{Seed: 7}, racy)
	b := Run(Config{Seed: 7}, racy)
	if a.Failure != nil {
		t.Fatalf("run failed: %v", a.Failure)
	}
	if a.Fingerprint != b.Fingerprint {
		t.Fatalf("same seed, different fingerprints: %s vs %s", a.Fingerprint, b.Fingerprint)
	}
	c := Run(Config{Seed: 8}, racy)
	t.Logf("events=%d steps=%d virtual=%v fp7=%s fp8=%s", len(a.Events), a.Steps, a.VirtualTime, a.Fingerprint[:12], c.Fingerprint[:12])
}

func TestSameSeedSameFingerprintRepeated(t *testing.T) {
	want := Run(Config{Seed: 42}, racy).Fingerprint
	for i := 0; i < 20; i++ {
		if got := Run(Config{Seed: 42}, racy).Fingerprint; got != want {
			t.Fatalf("repetition %d: fingerprint %s, want %s", i, got, want)
		}
	}
}
