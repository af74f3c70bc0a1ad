// Package testworlds holds the world definitions the tests of the layers
// above the kernel share, so that a test world is written once: Counter,
// the counter every plane, api and web test drives.
//
// It is test support: only _test.go files import it, never the code they
// test. Its definitions are deterministic reducers like any user's; what
// each handler does is part of what the tests assert, so a change here is
// a change to those tests.
package testworlds

import (
	"errors"
	"time"

	"github.com/orrery-run/orrery/world"
)

// CounterName is Counter's definition name.
const CounterName = "test.counter"

// KindEcho is the effect kind Echo asks for; the tests that send Echo
// serve it with an in-process adapter.
const KindEcho = "test.echo"

// Counter is the test world: it adds, answers Get, refuses on Fail, arms
// timers that tick, asks for effects, sends fabric messages, and records
// what it consumed.
type Counter struct {
	N        int64
	Ticks    int64
	Seen     []string // the keys of the adds, echoes, relays and alarms, in order
	Fired    []string // the keys of the timers that fired (Beep)
	Got      []string // the keys of the fabric messages received (Msg)
	Receipts []string // the intent hashes of the receipts consumed
	Statuses []string // the statuses of those receipts, in the same order
}

// The counter's inputs.
type (
	// Add adds By and records Key.
	Add struct {
		By  int64
		Key string
	}
	// Get replies with N.
	Get struct{}
	// Fail is refused: the step ends in an error naming Why.
	Fail struct{ Why string }
	// Pay asks for an http.request effect.
	Pay struct{}
	// Arm arms a timer that delivers Tick after AfterMs.
	Arm struct{ AfterMs int64 }
	// Tick counts a fired Arm timer.
	Tick struct{}
	// Echo asks for a KindEcho effect with Key.
	Echo struct{ Key string }
	// EchoParams are a KindEcho effect's parameters.
	EchoParams struct{ Key string }
	// Relay sends Msg with Key to the world To through fabric.send.
	Relay struct{ To, Key string }
	// Msg is a fabric message between counters.
	Msg struct{ Key string }
	// Alarm arms a timer that delivers Beep with Key after AfterMs.
	Alarm struct {
		AfterMs int64
		Key     string
	}
	// Beep is a fired Alarm.
	Beep struct{ Key string }
)

// CounterDef returns a fresh definition of the counter, so a test may add
// handlers to its own copy.
func CounterDef() *world.Def[Counter] {
	d := world.New[Counter](CounterName, 1)
	world.On(d, func(c *world.Ctx, s *Counter, a Add) error {
		s.N += a.By
		s.Seen = append(s.Seen, a.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, _ Get) error {
		c.Reply(s.N)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, f Fail) error {
		return errors.New("refused: " + f.Why)
	})
	world.On(d, func(c *world.Ctx, s *Counter, a Arm) error {
		c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Tick{})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, _ Tick) error {
		s.Ticks++
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, _ Pay) error {
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: "https://pay.example"})
		return nil
	})
	world.EffectKind[EchoParams](d, KindEcho)
	world.On(d, func(c *world.Ctx, s *Counter, e Echo) error {
		s.Seen = append(s.Seen, e.Key)
		c.Effect(KindEcho, EchoParams(e))
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, r Relay) error {
		s.Seen = append(s.Seen, r.Key)
		c.Send(r.To, Msg{Key: r.Key})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, m Msg) error {
		s.Got = append(s.Got, m.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, a Alarm) error {
		s.Seen = append(s.Seen, a.Key)
		c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Beep{Key: a.Key})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, b Beep) error {
		s.Fired = append(s.Fired, b.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counter, r world.Receipt) error {
		s.Receipts = append(s.Receipts, r.IntentHash)
		s.Statuses = append(s.Statuses, string(r.Status))
		return nil
	})
	return d
}
