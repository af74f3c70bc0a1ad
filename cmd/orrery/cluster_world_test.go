//go:build unix

package main

import (
	"context"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// clusterUniverse is the universe of the cluster tests' worlds: their
// definition's name, as orrery.MainWith serves each definition.
const clusterUniverse = "cluster.tally"

// tally is the state of a cluster test world. Every count is kept per key
// (or per intent hash), so a duplicate anywhere on the way from an
// acknowledged request to the journal shows up as a count of 2, and a loss
// as a missing key.
type tally struct {
	Adds     map[string]int64  // Add key → times handled
	Alarms   map[string]int64  // Alarm key → times handled
	Beeps    map[string]int64  // Beep key → times the timer fired into the world
	Pays     map[string]string // Pay key → the intent hash of its http.request
	Receipts map[string]int64  // intent hash → receipts consumed
	Statuses map[string]string // intent hash → the status of its receipt
}

// The inputs. Each names its wire type, which the API sends by name.
type (
	// Add records Key.
	Add struct{ Key string }
	// Get is a call: it answers the tally's summary.
	Get struct{}
	// Alarm arms a durable timer that delivers Beep{Key} after AfterMs.
	Alarm struct {
		Key     string
		AfterMs int64
	}
	// Beep is an Alarm's timer firing.
	Beep struct{ Key string }
	// Pay POSTs Key to URL through the http.request adapter.
	Pay struct{ Key, URL string }
)

func (Add) WorldType() string   { return "cluster/Add" }
func (Get) WorldType() string   { return "cluster/Get" }
func (Alarm) WorldType() string { return "cluster/Alarm" }
func (Beep) WorldType() string  { return "cluster/Beep" }
func (Pay) WorldType() string   { return "cluster/Pay" }

// summary is Get's reply.
type summary struct {
	Adds, Alarms, Beeps, Pays, Receipts int
}

func (s *tally) summary() summary {
	return summary{Adds: len(s.Adds), Alarms: len(s.Alarms), Beeps: len(s.Beeps), Pays: len(s.Pays), Receipts: len(s.Receipts)}
}

func count(m *map[string]int64, key string) {
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[key]++
}

func clusterDef() *world.Def[tally] {
	d := world.New[tally](clusterUniverse, 1)
	world.On(d, func(c *world.Ctx, s *tally, a Add) error { return s.add(a) })
	world.On(d, func(c *world.Ctx, s *tally, _ Get) error {
		c.Reply(s.summary())
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, a Alarm) error { return s.alarm(c, a) })
	world.On(d, func(c *world.Ctx, s *tally, b Beep) error { return s.beep(b) })
	world.On(d, func(c *world.Ctx, s *tally, p Pay) error { return s.pay(c, p) })
	world.On(d, func(c *world.Ctx, s *tally, r world.Receipt) error { return s.receipt(r) })
	return d
}

// The tally's handlers, shared by every version of the definition that
// keeps their behaviour (v2 keeps them all and adds its own).

func (s *tally) add(a Add) error {
	count(&s.Adds, a.Key)
	return nil
}

func (s *tally) alarm(c *world.Ctx, a Alarm) error {
	count(&s.Alarms, a.Key)
	c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Beep{Key: a.Key})
	return nil
}

func (s *tally) beep(b Beep) error {
	count(&s.Beeps, b.Key)
	return nil
}

func (s *tally) pay(c *world.Ctx, p Pay) error {
	hash := c.Effect(world.KindHTTPRequest, world.HTTPRequest{
		Method: "POST", URL: p.URL, Body: []byte(p.Key),
		Headers: map[string][]string{"Content-Type": {"text/plain"}}, TimeoutMs: 5000,
	})
	if s.Pays == nil {
		s.Pays = map[string]string{}
	}
	s.Pays[p.Key] = hash
	return nil
}

func (s *tally) receipt(r world.Receipt) error {
	count(&s.Receipts, r.IntentHash)
	if s.Statuses == nil {
		s.Statuses = map[string]string{}
	}
	s.Statuses[r.IntentHash] = string(r.Status)
	return nil
}

// clusterErrand is the cluster tests' workflow: the load starts runs of it
// through the API, and the checker requires every acknowledged one to end
// once, having done each of its steps once.
const clusterErrand = "cluster.errand"

// errand is an errand run's input: Key names the run's POST to URL (the
// pay target), after a durable sleep of SleepMs.
type errand struct {
	Key     string
	URL     string
	SleepMs int64
}

// errandDone is an errand's output.
type errandDone struct {
	Note   string
	Status int // the target's answer to the POST
}

// errandPost is the name of an errand's effect step.
const errandPost = "post"

// errandDef is one of each durable step a run has that a failover can
// interrupt: a plain step, a durable sleep (a timer) and an effect (an
// http.request to the pay target, whose receipt the run waits for).
func errandDef() *workflow.Def[errand, errandDone] {
	return workflow.New(clusterErrand, 1, errandV1)
}

// errandV1 is v1's body, which v2 runs before its own step.
func errandV1(c *workflow.Ctx, in errand) (errandDone, error) {
	note, err := workflow.Step(c, "prepare", func(context.Context) (string, error) { return "errand " + in.Key, nil })
	if err != nil {
		return errandDone{}, err
	}
	if err := workflow.Sleep(c, time.Duration(in.SleepMs)*time.Millisecond); err != nil {
		return errandDone{}, err
	}
	resp, err := workflow.Effect[world.HTTPResponse](c, errandPost, world.KindHTTPRequest, world.HTTPRequest{
		Method: "POST", URL: in.URL, Body: []byte(in.Key),
		Headers: map[string][]string{"Content-Type": {"text/plain"}}, TimeoutMs: 5000,
	})
	if err != nil {
		return errandDone{}, err
	}
	return errandDone{Note: note, Status: resp.Status}, nil
}

// testKernels is the worlds of the binary carrying every version, by
// universe: what the test process restores and replays with, so that a
// journal replays record by record with the definition that wrote it.
func testKernels() plane.Kernels {
	ks := plane.Kernels{}
	for _, k := range testAppFor(carried{v1: true, v2: true}).Worlds {
		ks[k.Name()] = k
	}
	return ks
}
