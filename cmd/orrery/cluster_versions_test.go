//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// The second version of the cluster tests' world and workflow, for the
// rolling upgrade: a binary carries v1, v1 and v2, or v2 (versionsEnv).
//
// v2 of the tally changes its state's shape (it adds Marks) and its
// behaviour (it takes a new input, Mark, and its Get reply counts the
// marks); every v1 input keeps its v1 behaviour, so the checks of the
// acknowledged v1 inputs hold across the upgrade. v2 of the errand adds a
// step (confirm) after the effect, so a run's version shows in its steps
// and its output.

// tallyV2 is v2's state: v1's, with the marks beside it. The embedded v1
// state encodes as v1's fields, flat, so a v2 state is a v1 state plus
// one key.
type tallyV2 struct {
	tally
	Marks map[string]int64 // Mark key → times handled
}

// Mark is v2's new input: it records Key among the marks. A world still
// on v1 has no handler for it.
type Mark struct{ Key string }

func (Mark) WorldType() string { return "cluster/Mark" }

// summaryV2 is v2's Get reply: v1's, plus the marks.
type summaryV2 struct {
	summary
	Marks int
}

func (s *tallyV2) summary() summaryV2 {
	return summaryV2{summary: s.tally.summary(), Marks: len(s.Marks)}
}

// migrateTally is the v1 → v2 state migration: the v1 state as it is,
// with no marks yet.
func migrateTally(old tally) (tallyV2, error) {
	return tallyV2{tally: old}, nil
}

func clusterDefV2() *world.Def[tallyV2] {
	d := world.New[tallyV2](clusterUniverse, 2)
	world.On(d, func(c *world.Ctx, s *tallyV2, a Add) error { return s.add(a) })
	world.On(d, func(c *world.Ctx, s *tallyV2, _ Get) error {
		c.Reply(s.summary())
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tallyV2, a Alarm) error { return s.alarm(c, a) })
	world.On(d, func(c *world.Ctx, s *tallyV2, b Beep) error { return s.beep(b) })
	world.On(d, func(c *world.Ctx, s *tallyV2, p Pay) error { return s.pay(c, p) })
	world.On(d, func(c *world.Ctx, s *tallyV2, r world.Receipt) error { return s.receipt(r) })
	world.On(d, func(c *world.Ctx, s *tallyV2, m Mark) error {
		count(&s.Marks, m.Key)
		return nil
	})
	return d
}

// errandConfirm is the step v2 of the errand adds.
const errandConfirm = "confirm"

// errandStepsOf are the step ids a completed run of version v has.
func errandStepsOf(v uint64) []string {
	if v >= 2 {
		return append(slices.Clone(errandSteps), errandConfirm)
	}
	return errandSteps
}

// errandNote is the note a completed run of version v answers.
func errandNote(v uint64, key string) string {
	if v >= 2 {
		return "errand " + key + " confirmed"
	}
	return "errand " + key
}

// errandDefV2 is v1's errand with a confirm step after the effect.
func errandDefV2() *workflow.Def[errand, errandDone] {
	return workflow.New(clusterErrand, 2, func(c *workflow.Ctx, in errand) (errandDone, error) {
		out, err := errandV1(c, in)
		if err != nil {
			return errandDone{}, err
		}
		note, err := workflow.Step(c, errandConfirm, func(context.Context) (string, error) { return out.Note + " confirmed", nil })
		if err != nil {
			return errandDone{}, err
		}
		out.Note = note
		return out, nil
	})
}

// errandDefs are the errand's versions, by version, for the checks: a
// run replays on the version that started it.
func errandDefs() map[uint64]*workflow.Def[errand, errandDone] {
	return map[uint64]*workflow.Def[errand, errandDone]{1: errandDef(), 2: errandDefV2()}
}

// carried is a set of definition versions a binary carries.
type carried struct{ v1, v2 bool }

// parseVersions reads versionsEnv's value: "" is v1 alone.
func parseVersions(s string) (carried, error) {
	if s == "" {
		return carried{v1: true}, nil
	}
	var c carried
	for f := range strings.SplitSeq(s, ",") {
		switch n, err := strconv.Atoi(strings.TrimSpace(f)); {
		case err != nil:
			return carried{}, fmt.Errorf("%s=%q: %w", versionsEnv, s, err)
		case n == 1:
			c.v1 = true
		case n == 2:
			c.v2 = true
		default:
			return carried{}, fmt.Errorf("%s=%q: no version %d", versionsEnv, s, n)
		}
	}
	return c, nil
}

// childApp is what a child serves: testAppFor the versions its
// environment names.
func childApp() (orrery.App, error) {
	vs, err := parseVersions(os.Getenv(versionsEnv))
	if err != nil {
		return orrery.App{}, err
	}
	return withOrders(testAppFor(vs)), nil
}

// testAppFor is the shipped binary's app plus the versions vs of the
// cluster tests' world and workflow. A binary of v1 and v2 carries the
// tally's lineage (v1, v2 and the migration between them): it runs each
// world on the version its journal says and moves it on by an upgrade.
func testAppFor(vs carried) orrery.App {
	a := app()
	switch {
	case vs.v1 && vs.v2:
		a.Worlds = append(a.Worlds, tallyLineage())
	case vs.v2:
		a.Worlds = append(a.Worlds, clusterDefV2().Kernel())
	default:
		a.Worlds = append(a.Worlds, clusterDef().Kernel())
	}
	if vs.v1 {
		a.Workflows = append(a.Workflows, errandDef())
	}
	if vs.v2 {
		a.Workflows = append(a.Workflows, errandDefV2())
	}
	return a
}

// tallyLineage carries both versions of the tally and the migration: the
// binary of the release in between, and what the checks replay with
// (every record by the definition that wrote it).
func tallyLineage() world.Kernel {
	return world.Versions(world.Upgrade(clusterDef(), clusterDefV2(), migrateTally))
}

// tallyState decodes a tally world's state (a snapshot's) by the version
// it is on: a v1 state has no marks.
func tallyState(id string, snap world.Snapshot) (tally, map[string]int64, error) {
	if world.StateVersion(snap.State) >= 2 {
		w, err := world.Load(clusterDefV2(), id, snap)
		if err != nil {
			return tally{}, nil, err
		}
		s, err := w.Value()
		return s.tally, s.Marks, err
	}
	w, err := world.Load(clusterDef(), id, snap)
	if err != nil {
		return tally{}, nil, err
	}
	s, err := w.Value()
	return s, nil, err
}
