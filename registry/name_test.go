package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

// wantNoProc checks the shape of an unbound-name failure: an *UnboundError
// naming the name, matching every NoProc sentinel.
func wantNoProc(t *testing.T, op string, err error) {
	t.Helper()
	var ue *UnboundError
	if !errors.As(err, &ue) || ue.Name != "svc" {
		t.Fatalf("%s: %v, want *UnboundError for svc", op, err)
	}
	for _, s := range []error{ErrNotRegistered, actor.ErrNoProc, actor.ErrCallNoProc, actor.ErrCastNoProc} {
		if !errors.Is(err, s) {
			t.Fatalf("%s: %v does not match %v", op, err, s)
		}
	}
}

func TestCallByUnboundNameIsNoProc(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		ref := Server[string, string, string](reg, "svc")
		var _ actor.Target[string, string, string] = ref

		check := func(when string) {
			t.Helper()
			_, err := ref.Call(ctx, "hi")
			wantNoProc(t, when+": ref.Call", err)
			var ce *actor.CallError
			if !errors.As(err, &ce) || ce.Kind != actor.CallNoProc {
				t.Fatalf("%s: ref.Call = %v, want *actor.CallError{Kind: CallNoProc}", when, err)
			}
			_, err = actor.Call(ctx, ref, "hi")
			if !errors.As(err, &ce) || ce.Kind != actor.CallNoProc || !errors.Is(err, actor.ErrCallNoProc) {
				t.Fatalf("%s: actor.Call = %v, want CallNoProc", when, err)
			}
			_, err = ref.Resolve()
			wantNoProc(t, when+": Resolve", err)

			err = ref.Cast(ctx, "hi")
			wantNoProc(t, when+": ref.Cast", err)
			var ke *actor.CastError
			if !errors.As(err, &ke) || ke.Kind != actor.CastNoProc {
				t.Fatalf("%s: ref.Cast = %v, want *actor.CastError{Kind: CastNoProc}", when, err)
			}
			wantNoProc(t, when+": ref.TryCast", ref.TryCast("hi"))
			if err := actor.Cast(ctx, ref, "hi"); !errors.Is(err, actor.ErrCastNoProc) {
				t.Fatalf("%s: actor.Cast = %v, want ErrCastNoProc", when, err)
			}
		}

		check("never registered")

		srv := startTagServer(t, sys, reg, "svc", "v1", make(chan string, 4))
		if got, err := ref.Call(ctx, "hi"); err != nil || got != "v1:hi" {
			t.Fatalf("Call while bound = %q, %v", got, err)
		}
		reg.Unregister("svc")
		check("unregistered")

		mustRegister(t, reg, "svc", srv.PID())
		srv.Abort()
		check("holder exited")

		// A nil registry is an unbound name too, not a panic.
		_, err := Server[string, string, string](nil, "svc").Call(ctx, "hi")
		wantNoProc(t, "nil registry", err)
	})
}

func TestCallByNameReachesCurrentHolder(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		casts := make(chan string, 8)
		ref := Server[string, string, string](reg, "svc") // one reference for both lives

		v1 := startTagServer(t, sys, reg, "svc", "v1", casts)
		if got, err := ref.Call(ctx, "a"); err != nil || got != "v1:a" {
			t.Fatalf("Call = %q, %v; want v1:a", got, err)
		}
		if got, err := actor.Call(ctx, ref, "b"); err != nil || got != "v1:b" {
			t.Fatalf("actor.Call = %q, %v; want v1:b", got, err)
		}
		if err := ref.Cast(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		if got := <-casts; got != "v1:c" {
			t.Fatalf("cast reached %q, want v1:c", got)
		}
		if r, err := ref.Resolve(); err != nil || r != v1 {
			t.Fatalf("Resolve = %v, %v; want v1's ServerRef", r, err)
		}

		// The server crashes; a restart (here by hand, as a supervisor would)
		// registers the same name again from its Init.
		v1.Abort()
		if _, err := ref.Call(ctx, "gap"); !errors.Is(err, actor.ErrCallNoProc) {
			t.Fatalf("Call between lives = %v, want NoProc", err)
		}
		v2 := startTagServer(t, sys, reg, "svc", "v2", casts)

		if got, err := ref.Call(ctx, "d"); err != nil || got != "v2:d" {
			t.Fatalf("Call after restart = %q, %v; want v2:d", got, err)
		}
		if err := actor.Cast(ctx, ref, "e"); err != nil {
			t.Fatal(err)
		}
		if got := <-casts; got != "v2:e" {
			t.Fatalf("cast after restart reached %q, want v2:e", got)
		}
		if err := ref.TryCast("f"); err != nil {
			t.Fatal(err)
		}
		if got := <-casts; got != "v2:f" {
			t.Fatalf("TryCast after restart reached %q, want v2:f", got)
		}
		if r, err := ref.Resolve(); err != nil || r != v2 {
			t.Fatalf("Resolve after restart = %v, %v; want v2", r, err)
		}
	})
}

// collector is a plain actor that forwards what it receives, tagged.
type collector struct {
	actor.Base
	tag string
	out chan string
}

func (c *collector) Handle(_ *actor.Proc, msg string) error {
	c.out <- c.tag + ":" + msg
	return nil
}

func TestSendByNameReachesCurrentHolderOrIsNoProc(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		out := make(chan string, 8)
		ref := Actor[string](reg, "sink")
		if ref.Name() != "sink" {
			t.Fatalf("Name() = %q", ref.Name())
		}

		for _, err := range []error{ref.Send(ctx, "x"), ref.TrySend("x"), second(ref.Resolve())} {
			var ue *UnboundError
			if !errors.As(err, &ue) || ue.Name != "sink" || !errors.Is(err, actor.ErrNoProc) || !errors.Is(err, ErrNotRegistered) {
				t.Fatalf("send by unbound name = %v, want *UnboundError matching actor.ErrNoProc", err)
			}
		}

		for _, tag := range []string{"v1", "v2"} {
			r, err := actor.Spawn[string](ctx, sys.Root(), &collector{tag: tag, out: out})
			if err != nil {
				t.Fatal(err)
			}
			mustRegister(t, reg, "sink", r.PID())
			if err := ref.Send(ctx, "s"); err != nil {
				t.Fatal(err)
			}
			if err := ref.TrySend("t"); err != nil {
				t.Fatal(err)
			}
			if a, b := <-out, <-out; a != tag+":s" || b != tag+":t" {
				t.Fatalf("received %q, %q; want %s:s, %s:t", a, b, tag, tag)
			}
			r.Abort()
			if err := ref.Send(ctx, "late"); !errors.Is(err, actor.ErrNoProc) {
				t.Fatalf("Send after the holder died = %v, want NoProc", err)
			}
		}
	})
}

func second[T any](_ T, err error) error { return err }

func TestNameBoundToOtherTypeIsWrongType(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		srv := startTagServer(t, sys, reg, "svc", "v1", nil)
		sink := spawnIdle(t, sys, "sink")
		mustRegister(t, reg, "sink", sink)

		check := func(err error, holder actor.PID) {
			t.Helper()
			var we *WrongTypeError
			if !errors.As(err, &we) || !errors.Is(err, ErrWrongType) {
				t.Fatalf("got %v, want *WrongTypeError", err)
			}
			if we.Holder != holder || we.Want == "" || we.Got == "" || we.Want == we.Got {
				t.Fatalf("WrongTypeError = %+v", we)
			}
			if errors.Is(err, actor.ErrNoProc) || errors.Is(err, actor.ErrCallNoProc) {
				t.Fatalf("a type mismatch must not pass for NoProc: %v", err)
			}
		}
		_, err := Server[int, int, int](reg, "svc").Call(ctx, 1)
		check(err, srv.PID())
		check(Server[int, int, int](reg, "svc").Cast(ctx, 1), srv.PID())
		_, err = actor.Call(ctx, Server[string, int, string](reg, "svc"), "x")
		check(err, srv.PID())
		check(Actor[string](reg, "svc").Send(ctx, "x"), srv.PID())
		_, err = Server[string, string, string](reg, "sink").Call(ctx, "x")
		check(err, sink)
		check(Actor[int](reg, "sink").TrySend(1), sink)
	})
}
