package plane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// The test world is the shared counter (internal/testworlds), by short
// names; kindEcho's effects are served by the simulation's in-process
// adapter.
type (
	Add        = testworlds.Add
	Alarm      = testworlds.Alarm
	Arm        = testworlds.Arm
	Beep       = testworlds.Beep
	counter    = testworlds.Counter
	Echo       = testworlds.Echo
	EchoParams = testworlds.EchoParams
	Get        = testworlds.Get
	Msg        = testworlds.Msg
	Pay        = testworlds.Pay
	Relay      = testworlds.Relay
)

func counterDef() *world.Def[counter] { return testworlds.CounterDef() }

const kindEcho = testworlds.KindEcho

const universe = "u"

func kernels() plane.Kernels { return plane.Kernels{universe: counterDef().Kernel()} }

func sleep(env *lab.Env, d time.Duration) error { return actor.Sleep(env.Ctx, env.Lab, d) }

func newStore(env *lab.Env, opts ...memstore.Option) *memstore.Store {
	return memstore.New(append([]memstore.Option{memstore.WithClock(env.Lab.Now)}, opts...)...)
}

func hostConfig(worker string, st store.Store, replies *plane.Replies) plane.HostConfig {
	return plane.HostConfig{Worker: worker, Store: st, Kernels: kernels(), Replies: replies,
		LeaseTTL: 2 * time.Second, IdleAfter: 500 * time.Millisecond, SnapshotEvery: 4}
}

func createAssigned(ctx context.Context, st store.Store, id, worker string) error {
	if _, err := st.CreateWorld(ctx, universe, id, nil); err != nil && !errors.Is(err, store.ErrWorldExists) {
		return err
	}
	return st.Assign(ctx, id, store.Assignment{DesiredWorker: worker, Reason: "test"}, nil)
}

// journalOf reads a world's whole journal.
func journalOf(ctx context.Context, st store.Store, id string) ([]event.Envelope, error) {
	return plane.ReadTail(ctx, st, id, 0)
}

// parity checks replay parity: the world's state replayed from its
// baseline and journal equals want, byte for byte, and every inbox item up
// to the cursor has exactly one journal record.
func parity(ctx context.Context, st store.Store, id string) (world.Snapshot, error) {
	return parityOf(ctx, st, id, counterDef())
}

// parityOf is parity for a world of def (the counter with more handlers).
func parityOf(ctx context.Context, st store.Store, id string, def *world.Def[counter]) (world.Snapshot, error) {
	inst, cursor, err := plane.Restore(ctx, st, plane.Kernels{universe: def.Kernel()}, id)
	if err != nil {
		return world.Snapshot{}, err
	}
	journal, err := journalOf(ctx, st, id)
	if err != nil {
		return world.Snapshot{}, err
	}
	steps := map[string]int{}
	for _, e := range journal {
		steps[e.StepID]++
	}
	rec, err := st.GetWorld(ctx, id)
	if err != nil {
		return world.Snapshot{}, err
	}
	if rec.ParentWorld == "" {
		// A plain world's whole journal replays from genesis to the same
		// state as its baseline plus tail.
		full, err := world.Replay(def, id, world.Snapshot{}, journal)
		if err != nil {
			return world.Snapshot{}, fmt.Errorf("replay from genesis: %w", err)
		}
		if string(full.State()) != string(inst.State()) {
			return world.Snapshot{}, fmt.Errorf("genesis replay and restore differ")
		}
		items, err := st.ReadInbox(ctx, id, 0, 0)
		if err != nil {
			return world.Snapshot{}, err
		}
		for _, it := range items {
			if it.Seq > cursor {
				break
			}
			if n := steps[world.StepID(it.Seq)]; n != 1 {
				return world.Snapshot{}, fmt.Errorf("inbox item %d has %d journal records", it.Seq, n)
			}
		}
		// The other records are timer firings stepped by their holders
		// without an inbox item, one per timer (its stepId names it).
		direct := 0
		for id, n := range steps {
			if strings.HasPrefix(id, "timer/") {
				if n != 1 {
					return world.Snapshot{}, fmt.Errorf("direct firing %s has %d journal records", id, n)
				}
				direct++
			}
		}
		if uint64(len(journal)-direct) != cursor {
			return world.Snapshot{}, fmt.Errorf("%d records (%d direct firings) for cursor %d", len(journal), direct, cursor)
		}
	}
	return inst.Snapshot(), nil
}

func value(s world.Snapshot, id string) (counter, error) {
	w, err := world.Load(counterDef(), id, s)
	if err != nil {
		return counter{}, err
	}
	return w.Value()
}

// timerRuns counts, by timer, the firings world id's journal holds that
// ran (not dropped as stale), whether stepped from the inbox or directly
// by the world's holder.
func timerRuns(ctx context.Context, st store.Store, id string) (map[string]int, error) {
	journal, err := journalOf(ctx, st, id)
	if err != nil {
		return nil, err
	}
	ran := map[string]int{}
	for _, e := range journal {
		var rec stepRecord
		if err := event.Unmarshal(e.Payload, &rec); err != nil {
			return nil, err
		}
		h, ok, err := rec.firedTimer()
		if err != nil {
			return nil, err
		}
		if ok {
			ran[h]++
		}
	}
	return ran, nil
}
