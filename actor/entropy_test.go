package actor_test

import (
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
)

// Identity never comes from a deterministic source outside the lab: two
// processes that start alike (one seed, one order of draws) must still hand
// out different ids, or a call of one is answered with another's reply.
func TestUniqueIDsOfProductionExecutorsWithOneSeedDiffer(t *testing.T) {
	a, b := actor.NewExecutor(1), actor.NewExecutor(1)
	seen := map[string]bool{}
	for range 64 {
		for _, ex := range []actor.Executor{a, b} {
			id := actor.UniqueID(ex)
			if len(id) != 32 {
				t.Fatalf("UniqueID = %q, want 32 hex digits", id)
			}
			if seen[id] {
				t.Fatalf("UniqueID %s handed out twice by two executors seeded alike", id)
			}
			seen[id] = true
		}
	}
}

// The default executor of a system (and of every production default) is
// seeded from entropy: two systems do not draw jitter in lockstep.
func TestDefaultExecutorsOfTwoSystemsDrawDifferently(t *testing.T) {
	a, b := actor.NewSystem().Executor(), actor.NewSystem().Executor()
	same := 0
	for range 8 {
		if a.Uint64() == b.Uint64() {
			same++
		}
	}
	if same == 8 {
		t.Fatal("two systems' default executors drew the same eight numbers: seeded alike")
	}
	// Two executors, one draw each: the calls look alike but draw from
	// different sources.
	first, second := actor.NewEntropyExecutor(), actor.NewEntropyExecutor()
	if first.Uint64() == second.Uint64() {
		t.Fatal("two entropy executors drew the same first number")
	}
}

// Under the lab, ids come from the seed so a run replays.
func TestUniqueIDUnderTheLabIsSeeded(t *testing.T) {
	draw := func() []string {
		var ids []string
		res := lab.Run(lab.Config{Seed: 7, Name: t.Name()}, func(env *lab.Env) error {
			for range 4 {
				ids = append(ids, actor.UniqueID(env.Lab))
			}
			return nil
		})
		if res.Failure != nil {
			t.Fatal(res.Failure)
		}
		return ids
	}
	a, b := draw(), draw()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("lab run 1 drew %v, run 2 %v: not reproducible", a, b)
		}
	}
	if a[0] == a[1] {
		t.Fatalf("one lab run drew one id twice: %v", a)
	}
}
