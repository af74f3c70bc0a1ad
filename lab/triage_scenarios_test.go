package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Deliberately broken scenarios, one per oracle, and a racy one whose check
// fails only under some schedules. Names carry a "triage" prefix so they
// cannot collide with other test files of the package.

// triageDropper takes every call's reply obligation out of the handler and
// drops it: nobody will ever reply.
type triageDropper struct{ actor.Base }

func (triageDropper) HandleCall(_ *actor.Proc, _ int, from actor.ReplyTo[int]) (int, error) {
	_ = from.Defer() // the bug: the Deferred is dropped unresolved
	return 0, nil
}
func (triageDropper) HandleCast(*actor.Proc, int) error { return nil }

// triageDroppedReply: a caller waits (with a timeout longer than the run)
// on a server that dropped its reply obligation; the system close has to
// abort the obligation → reply-obligation-leak.
func triageDroppedReply(env *Env) error {
	srv, err := actor.StartServer[int, int, int](env.Ctx, env.Root, triageDropper{})
	if err != nil {
		return err
	}
	if _, err := env.Root.Go("caller", func(context.Context) error {
		// env.Ctx, not the process's context: the caller keeps waiting
		// through the shutdown, so the obligation is still pending when the
		// server stops and aborts it. The timeout only guarantees the
		// scenario can never hang.
		_, err := srv.CallTimeout(env.Ctx, 1, time.Hour)
		if !errors.Is(err, actor.ErrServerStopped) {
			return fmt.Errorf("want ServerStopped, got %v", err)
		}
		return nil
	}); err != nil {
		return err
	}
	// Virtual time only moves once everyone is parked: after this the call
	// has been handled and the obligation dropped.
	return actor.Sleep(env.Ctx, env.Lab, time.Millisecond)
}

// triageStubborn's handler parks for an hour ignoring its context.
type triageStubborn struct {
	actor.Base
	lab *Executor
}

func (s *triageStubborn) Handle(*actor.Proc, int) error {
	return actor.Sleep(context.Background(), s.lab, time.Hour)
}

// triageChildOutlivesScope closes a sub-scope with a one-second budget
// while its child is stuck → quiescence.
func triageChildOutlivesScope(env *Env) error {
	sub, err := env.Root.Sub("jobs")
	if err != nil {
		return err
	}
	ref, err := actor.Spawn[int](env.Ctx, sub, &triageStubborn{lab: env.Lab})
	if err != nil {
		return err
	}
	if err := ref.Send(env.Ctx, 1); err != nil {
		return err
	}
	if err := actor.Sleep(env.Ctx, env.Lab, time.Millisecond); err != nil {
		return err
	}
	ctx, cancel := actor.WithTimeout(env.Ctx, env.Lab, time.Second)
	defer cancel()
	_, _ = sub.Close(ctx) // a *NotQuiescentError, which the scenario ignores
	return nil
}

// triageRestartedPanic plays a buggy supervisor that restarts a panicked
// child → monotone-outcome.
func triageRestartedPanic(env *Env) error {
	env.System.Emit(actor.TraceEvent{Kind: actor.TraceSupervision, Outcome: actor.PanickedOutcome("boom", nil), Detail: "restart child"})
	return nil
}

type triageSink struct {
	actor.Base
	got []int
}

func (s *triageSink) Handle(_ *actor.Proc, m int) error {
	s.got = append(s.got, m)
	return nil
}

// triageLeakedPermit reserves a mailbox slot and neither sends nor aborts
// → unreleased-permit.
func triageLeakedPermit(env *Env) error {
	ref, err := actor.Spawn[int](env.Ctx, env.Root, &triageSink{})
	if err != nil {
		return err
	}
	if err := ref.Send(env.Ctx, 1); err != nil {
		return err
	}
	if _, err := ref.Reserve(env.Ctx); err != nil { // the bug: the permit is dropped
		return err
	}
	return ref.Send(env.Ctx, 2)
}

// ---- a schedule-dependent bug ----

var errInsufficient = errors.New("insufficient funds")

// triageBank answers calls: q > 0 deposits q, q < 0 withdraws -q, 0 reads
// the balance. A withdrawal larger than the balance fails.
type triageBank struct {
	actor.Base
	balance int
}

func (b *triageBank) HandleCall(_ *actor.Proc, q int, _ actor.ReplyTo[int]) (int, error) {
	if b.balance+q < 0 {
		return b.balance, errInsufficient
	}
	b.balance += q
	return b.balance, nil
}
func (b *triageBank) HandleCast(*actor.Proc, int) error { return nil }

// triageRacyBank: a depositor (which first reads the balance twice) and a
// withdrawer race; the withdrawer's check — its withdrawal must succeed —
// fails when the schedule lets it reach the bank before the deposit. Three
// auditors keep reading the balance meanwhile, and everything is shut down
// properly afterwards, so a failing trace goes on well past the failure.
func triageRacyBank(env *Env) error {
	bank, err := actor.StartServer[int, int, int](env.Ctx, env.Root, &triageBank{})
	if err != nil {
		return err
	}
	var pids []actor.PID
	spawn := func(name string, f func(ctx context.Context) error) error {
		pid, err := env.Root.Go(name, f)
		if err == nil {
			pids = append(pids, pid)
		}
		return err
	}
	if err := spawn("depositor", func(ctx context.Context) error {
		for i := 0; i < 2; i++ {
			if _, err := bank.Call(ctx, 0); err != nil {
				return err
			}
		}
		_, err := bank.Call(ctx, 10)
		return err
	}); err != nil {
		return err
	}
	if err := spawn("withdrawer", func(ctx context.Context) error {
		for i := 0; i < 3; i++ {
			if _, err := bank.Call(ctx, 0); err != nil {
				return err
			}
		}
		if _, err := bank.Call(ctx, -10); err != nil {
			return fmt.Errorf("withdraw 10: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	for a := 1; a <= 3; a++ {
		a := a
		if err := spawn("auditor", func(ctx context.Context) error {
			for j := 0; j < 3; j++ {
				if _, err := bank.Call(ctx, 0); err != nil {
					return err
				}
				if err := actor.Sleep(ctx, env.Lab, time.Duration(a)*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, p := range pids {
		if _, err := p.Wait(env.Ctx); err != nil {
			return err
		}
	}
	_, err = bank.Stop(env.Ctx)
	return err
}

// triageChatty: a relay forwards each cast to a sink. With extra set, the
// relay's handler is "changed": it sends one extra message on the second
// cast. Used to show replay divergence.
type triageRelay struct {
	actor.Base
	sink  *actor.Ref[int]
	extra bool
	n     int
}

func (r *triageRelay) Handle(p *actor.Proc, m int) error {
	r.n++
	if err := r.sink.Send(p.Ctx(), m); err != nil {
		return err
	}
	if r.extra && r.n == 2 {
		return r.sink.Send(p.Ctx(), -m)
	}
	return nil
}

func triageChatty(extra bool) Scenario {
	return func(env *Env) error {
		sink, err := actor.Spawn[int](env.Ctx, env.Root, &triageSink{})
		if err != nil {
			return err
		}
		relay, err := actor.Spawn[int](env.Ctx, env.Root, &triageRelay{sink: sink, extra: extra})
		if err != nil {
			return err
		}
		for i := 1; i <= 4; i++ {
			if err := relay.Send(env.Ctx, i); err != nil {
				return err
			}
			if err := actor.Sleep(env.Ctx, env.Lab, time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	}
}
