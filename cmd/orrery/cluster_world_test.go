//go:build unix

package main

import (
	"time"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// clusterUniverse is the universe of the cluster tests' worlds.
const clusterUniverse = "cluster"

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
	d := world.New[tally]("cluster.tally", 1)
	world.On(d, func(c *world.Ctx, s *tally, a Add) error {
		count(&s.Adds, a.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, _ Get) error {
		c.Reply(s.summary())
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, a Alarm) error {
		count(&s.Alarms, a.Key)
		c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Beep{Key: a.Key})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, b Beep) error {
		count(&s.Beeps, b.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, p Pay) error {
		hash := c.Effect(world.KindHTTPRequest, world.HTTPRequest{
			Method: "POST", URL: p.URL, Body: []byte(p.Key),
			Headers: map[string][]string{"Content-Type": {"text/plain"}}, TimeoutMs: 5000,
		})
		if s.Pays == nil {
			s.Pays = map[string]string{}
		}
		s.Pays[p.Key] = hash
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, r world.Receipt) error {
		count(&s.Receipts, r.IntentHash)
		if s.Statuses == nil {
			s.Statuses = map[string]string{}
		}
		s.Statuses[r.IntentHash] = string(r.Status)
		return nil
	})
	return d
}

// testKernels is what the child processes serve and what the test process
// replays with: the cluster tests' tally worlds and the ledger example's
// accounts and transfers (the chaos checker's money).
func testKernels() plane.Kernels {
	return plane.Kernels{
		clusterUniverse:         clusterDef().Kernel(),
		ledger.UniverseAccount:  ledger.AccountDef().Kernel(),
		ledger.UniverseTransfer: ledger.TransferDef().Kernel(),
	}
}
