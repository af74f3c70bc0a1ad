package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// counterUniverse is the universe of the generated counters.
const counterUniverse = "gen.counter"

// counterKernels are the definitions a verification of the generated
// counters replays them with.
func counterKernels() plane.Kernels {
	return plane.Kernels{counterUniverse: testworlds.CounterDef().Kernel()}
}

// How the generated counters differ, by index i: every keepEvery-th
// (from 1) still awaits an echo's receipt, the one after it a timer
// (both asked for in the second round, after the generator's own
// adapter and timer passes, so they are open in the copy); every
// snapEvery-th has a snapshot of its first round as its baseline, and
// every compactEvery-th of those is compacted to it; every failEvery-th
// has a step whose handler failed; every relayEvery-th relays a fabric
// message to the next world; every archiveEvery-th is archived.
const (
	keepEvery    = 500
	snapEvery    = 3
	compactEvery = 6
	failEvery    = 5
	relayEvery   = 13
	archiveEvery = 7
)

// genWorld is what the generator knows of a counter it made.
type genWorld struct {
	id       string
	archived bool
	n        int64  // the counter's N: what a Get answers
	echo     string // the intent hash of the echo still pending ("": none)
	alarm    string // the key of the alarm still armed ("": none)
}

// counters is a generated store of counters: its worlds by index.
type counters struct {
	worlds []genWorld
}

// generateCounters makes n counters as a host would: each world's inbox
// filled by a client's sends and calls, stepped by the counter's real
// kernel (world.Instance.Step) and committed one cycle per round
// (store.Commit: journal, cursor, intents, timers, snapshot); the echoes
// completed with the receipts an adapter writes, the fabric messages
// sent by the fabric adapter itself, the timers claimed and fired as the
// timer worker fires them; then compactions and archives. The store is a
// memstore on a manual clock a day behind the machine's (so the open
// timers are due wherever the copy is served), exported into dst through
// its importer (store.PortCopy): dst holds only what the kernel and the
// store made. It returns the counters and the records copied.
func generateCounters(t testing.TB, ctx context.Context, dst store.Store, n int) (*counters, int) {
	t.Helper()
	clock := memstore.NewManualClock(time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond))
	mem := memstore.New(memstore.WithClock(clock.Now))
	defer func() { _ = mem.Close() }()
	g := &counters{worlds: make([]genWorld, n)}
	if err := g.run(ctx, mem, clock); err != nil {
		t.Fatalf("generating %d counters: %v", n, err)
	}
	// A schedule, paused so that it never adds to what serveCopy counts:
	// the copy must carry every kind of record the store keeps.
	if _, err := schedule.Create(ctx, mem, "gen-hourly", schedule.Spec{Every: schedule.Duration(time.Hour),
		Target: schedule.Target{Workflow: "gen.none"}}); err != nil {
		t.Fatalf("generating a schedule: %v", err)
	}
	if _, err := schedule.Pause(ctx, mem, "gen-hourly"); err != nil {
		t.Fatalf("pausing the schedule: %v", err)
	}
	if err := genQueue(ctx, mem, n); err != nil {
		t.Fatalf("generating a queue: %v", err)
	}
	records, err := store.PortCopy(ctx, mem, dst.(store.Importer), 4000, nil)
	if err != nil {
		t.Fatalf("importing %d counters: %v", n, err)
	}
	return g, records
}

// genQueue gives st a queue of one slot whose first world holds it (an
// admitted entry and the admission its rate window counts) while the
// second waits, so a copy carries every queue record kind. Archived
// worlds are in no queue: the first two active ones are queued.
func genQueue(ctx context.Context, st store.Store, n int) error {
	if err := st.PutQueue(ctx, store.QueueSpec{Name: "gen-q", Concurrency: 1, RateLimit: 10, RatePeriod: time.Hour}); err != nil {
		return err
	}
	for i, queued := 0, 0; i < n && queued < 2; i++ {
		_, _, err := st.EnqueueRun(ctx, store.QueuedRun{Queue: "gen-q", Run: counterID(i)})
		switch {
		case err == nil:
			queued++
		case !errors.Is(err, store.ErrWorldArchived):
			return err
		}
	}
	_, err := st.AdmitRuns(ctx, "gen-q", "generator", 1)
	return err
}

func counterID(i int) string { return fmt.Sprintf("w%06d", i) }

func (g *counters) run(ctx context.Context, st store.Store, clock *memstore.ManualClock) error {
	kern := testworlds.CounterDef().Kernel()
	n := len(g.worlds)
	insts := make([]world.Instance, n)
	epochs := make([]uint64, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = counterID(i)
		g.worlds[i].id = ids[i]
		if _, err := st.CreateWorld(ctx, counterUniverse, ids[i], nil); err != nil {
			return err
		}
		inst, err := kern.Load(ids[i], world.Snapshot{})
		if err != nil {
			return err
		}
		insts[i] = inst
	}
	const page = 500
	for lo := 0; lo < n; lo += page {
		res, err := st.AcquireLeases(ctx, "generator", ids[lo:min(lo+page, n)], 24*time.Hour)
		if err != nil {
			return err
		}
		for k, r := range res {
			if r.Err != nil {
				return r.Err
			}
			epochs[lo+k] = r.Lease.Epoch
		}
	}
	send := func(i int, v any, key string) error {
		p, err := world.EncodeEvent(v)
		if err == nil {
			_, _, err = st.Enqueue(ctx, ids[i], store.InboxItem{Kind: vocab.KindEvent, Payload: p, DedupeKey: key})
		}
		return err
	}
	call := func(i int, v any, callID string) error {
		p, err := world.EncodeCall(callID, v)
		if err == nil {
			_, _, err = st.Enqueue(ctx, ids[i], store.InboxItem{Kind: vocab.KindCall, Payload: p, DedupeKey: plane.CallKey(callID)})
		}
		return err
	}
	cursors := make([]uint64, n)
	// cycle steps world i's inbox after its cursor with the kernel and
	// commits the cycle, as a host's world process does.
	cycle := func(i int, snapshot bool) error {
		items, err := st.ReadInbox(ctx, ids[i], cursors[i], 1000)
		if err != nil || len(items) == 0 {
			return err
		}
		inst := insts[i]
		b := store.CommitBatch{ExpectedCursor: cursors[i], NewCursor: cursors[i], ExpectedHead: inst.Height()}
		for _, it := range items {
			in := world.Input{Seq: it.Seq, Kind: it.Kind, Payload: it.Payload, EnqueuedAt: it.EnqueuedAt}
			if it.Kind == vocab.KindReceipt {
				in.ReceiptFor, _ = store.ReceiptKeyIntent(it.DedupeKey)
			}
			res, err := inst.Step(in, clock.Now())
			if err != nil {
				return err
			}
			b.Entries = append(b.Entries, res.Record)
			b.Intents = append(b.Intents, res.Intents...)
			b.Timers = append(b.Timers, res.TimerSets...)
			b.CancelTimers = append(b.CancelTimers, res.TimerCancels...)
			b.NewCursor = it.Seq
		}
		if snapshot {
			b.Snapshot = &store.Snapshot{World: ids[i], Height: inst.Height(), State: inst.State(), StateHash: inst.StateHash()}
		}
		_, err = st.Commit(ctx, ids[i], epochs[i], b)
		cursors[i] = b.NewCursor
		return err
	}

	// Round 1: an add, a call, an echo and an alarm; a failed step, a
	// relay.
	for i := range n {
		if err := send(i, testworlds.Add{By: int64(i%97 + 1), Key: "first"}, "add-1"); err != nil {
			return err
		}
		if err := call(i, testworlds.Get{}, "get-"+ids[i]); err != nil {
			return err
		}
		if i%keepEvery != 1 {
			if err := send(i, testworlds.Echo{Key: "echo-1"}, "echo-1"); err != nil {
				return err
			}
		}
		if i%keepEvery != 2 {
			if err := send(i, testworlds.Alarm{AfterMs: 1000, Key: "alarm-1"}, "alarm-1"); err != nil {
				return err
			}
		}
		if i%failEvery == 0 {
			if err := send(i, testworlds.Fail{Why: "generated"}, "fail-1"); err != nil {
				return err
			}
		}
		if i%relayEvery == 0 && n > 1 {
			if err := send(i, testworlds.Relay{To: ids[(i+1)%n], Key: "relay-1"}, "relay-1"); err != nil {
				return err
			}
		}
	}
	for i := range n {
		if err := cycle(i, i%snapEvery == 0); err != nil {
			return fmt.Errorf("world %s, round 1: %w", ids[i], err)
		}
	}

	// The adapters' and the timer worker's passes: every echo and relay
	// completed with its receipt, every alarm fired.
	clock.Advance(2 * time.Second)
	fabric := adapter.NewFabric(st)
	for {
		items, err := st.Claim(ctx, "generator/effects", []string{testworlds.KindEcho, world.KindFabricSend}, 2000, time.Hour)
		if err != nil {
			return err
		}
		if len(items) == 0 {
			break
		}
		cs := make([]vocab.Completion, 0, len(items))
		for _, it := range items {
			res := effect.OK(testworlds.EchoParams{Key: "done"})
			if it.Kind == world.KindFabricSend {
				if res, err = fabric.Execute(ctx, it); err != nil {
					return err
				}
			}
			r, err := receiptOf(it, res)
			if err != nil {
				return err
			}
			cs = append(cs, vocab.Completion{IntentHash: it.IntentHash, Claim: it.ClaimOf(), Receipt: r})
		}
		done, err := st.CompleteMany(ctx, cs)
		if err != nil {
			return err
		}
		for _, d := range done {
			if d.Err != nil {
				return d.Err
			}
		}
	}
	for {
		due, err := st.ClaimDue(ctx, "generator/timers", 2000, time.Hour)
		if err != nil {
			return err
		}
		if len(due) == 0 {
			break
		}
		for _, d := range due {
			if _, _, err := st.Fire(ctx, d.IntentHash, d.ClaimOf()); err != nil {
				return err
			}
		}
	}

	// Round 2: the receipts, the firings and the messages, one more add;
	// the echo and the alarm left open in the copy.
	for i := range n {
		if err := send(i, testworlds.Add{By: 1, Key: "second"}, "add-2"); err != nil {
			return err
		}
		switch i % keepEvery {
		case 1:
			if err := send(i, testworlds.Echo{Key: "echo-open"}, "echo-open"); err != nil {
				return err
			}
		case 2:
			if err := send(i, testworlds.Alarm{AfterMs: 1000, Key: "alarm-open"}, "alarm-open"); err != nil {
				return err
			}
		}
	}
	for i := range n {
		if err := cycle(i, false); err != nil {
			return fmt.Errorf("world %s, round 2: %w", ids[i], err)
		}
		g.worlds[i].n = int64(i%97+1) + 1
		switch i % keepEvery {
		case 1:
			open := insts[i].Awaiting()
			if len(open) != 1 {
				return fmt.Errorf("world %s awaits %d receipts, want 1", ids[i], len(open))
			}
			g.worlds[i].echo = open[0].Hash
		case 2:
			g.worlds[i].alarm = "alarm-open"
		}
	}
	for i := 0; i < n; i += compactEvery {
		if _, err := st.Compact(ctx, ids[i], epochs[i], 0); err != nil {
			return fmt.Errorf("world %s, compaction: %w", ids[i], err)
		}
	}
	for i := 0; i < n; i += archiveEvery {
		if _, err := st.SetWorldStatus(ctx, ids[i], store.WorldArchived, "generated"); err != nil {
			return err
		}
		g.worlds[i].archived = true
	}
	return nil
}

// receiptOf is the receipt an adapter pool writes for res.
func receiptOf(it vocab.EffectItem, res effect.Result) (vocab.Receipt, error) {
	body, err := event.Marshal(res.Body)
	if err != nil {
		return vocab.Receipt{}, err
	}
	p, err := world.EncodeReceipt(world.Receipt{IntentHash: it.IntentHash, Kind: it.Kind, Status: res.Status, Body: body})
	return vocab.Receipt{Status: res.Status, Payload: p}, err
}

// open returns the indexes of the generated counters that are not
// archived and hold an open echo (echo) or alarm.
func (g *counters) open(echo bool) []int {
	var out []int
	for i, w := range g.worlds {
		if !w.archived && (echo && w.echo != "" || !echo && w.alarm != "") {
			out = append(out, i)
		}
	}
	return out
}

// counterOf reads counter id's state from a snapshot of it.
func counterOf(id string, s world.Snapshot) (testworlds.Counter, error) {
	w, err := world.Load(testworlds.CounterDef(), id, s)
	if err != nil {
		return testworlds.Counter{}, err
	}
	return w.Value()
}

// served records the intents the serving node's echo adapter executed.
type served struct {
	mu  sync.Mutex
	ran map[string]int
}

func (s *served) count(hash string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran[hash]
}

// echoAdapter serves the counters' echoes on the node that serves the
// copy.
type echoAdapter struct{ s *served }

func (echoAdapter) Kinds() []string { return []string{testworlds.KindEcho} }

func (a echoAdapter) Execute(_ context.Context, it vocab.EffectItem) (effect.Result, error) {
	a.s.mu.Lock()
	a.s.ran[it.IntentHash]++
	a.s.mu.Unlock()
	return effect.OK(testworlds.EchoParams{Key: "served"}), nil
}

// serveCopy starts a node on st, the copy of the counters g made, as
// `orrery serve` does (plane/node: orchestrator, host, adapter pool,
// timer worker), and checks that it serves them from their copied state:
// a call to each of 20 worlds drawn at random answers the N the
// generator left there; each open echo of an active world is executed
// once by the node's adapter and its receipt consumed by the world, and
// each armed alarm fires and is stepped; no effect of an archived world
// runs.
func serveCopy(t *testing.T, ctx context.Context, st store.Store, g *counters) {
	t.Helper()
	ran := &served{ran: map[string]int{}}
	nd, err := node.Start(ctx, node.Config{Worker: "served", Store: st, Kernels: counterKernels(),
		Adapters: []adapter.Registration{adapter.Register(echoAdapter{ran}, adapter.NoRetry())}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := nd.Stop(sctx); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	}()
	c := nd.Client()
	seed := uint64(time.Now().UnixNano())
	rnd := rand.New(rand.NewPCG(seed, 25))
	var active []int
	for i, w := range g.worlds {
		if !w.archived {
			active = append(active, i)
		}
	}
	rnd.Shuffle(len(active), func(a, b int) { active[a], active[b] = active[b], active[a] })
	for _, i := range active[:min(20, len(active))] {
		w := g.worlds[i]
		got, err := plane.CallAs[int64](ctx, c, w.id, testworlds.Get{})
		if err != nil {
			t.Fatalf("a call to %s (seed %d): %v", w.id, seed, err)
		}
		if got != w.n {
			t.Fatalf("%s answers N = %d, its copied state has %d (seed %d)", w.id, got, w.n, seed)
		}
	}
	// state reads a world's state as the node's client sees it.
	state := func(id string) (testworlds.Counter, error) {
		s, err := c.State(ctx, id)
		if err != nil {
			return testworlds.Counter{}, err
		}
		return counterOf(id, s)
	}
	echoes, alarms := g.open(true), g.open(false)
	if len(echoes) == 0 || len(alarms) == 0 {
		t.Fatalf("the copy holds %d open echoes and %d armed alarms of active worlds: nothing to serve", len(echoes), len(alarms))
	}
	for _, i := range echoes {
		w := g.worlds[i]
		testrig.WaitFor(t, "the receipt of "+w.id+"'s open echo", 2*time.Minute, 5*time.Millisecond, func() (bool, error) {
			v, err := state(w.id)
			return slices.Contains(v.Receipts, w.echo), err
		})
		if k := ran.count(w.echo); k != 1 {
			t.Errorf("%s's open echo ran %d times, want once", w.id, k)
		}
	}
	for _, i := range alarms {
		w := g.worlds[i]
		testrig.WaitFor(t, w.id+"'s armed alarm", 2*time.Minute, 5*time.Millisecond, func() (bool, error) {
			v, err := state(w.id)
			return slices.Contains(v.Fired, w.alarm), err
		})
	}
	for i, w := range g.worlds {
		if w.archived && w.echo != "" && ran.count(w.echo) != 0 {
			t.Errorf("the echo of %s, archived, ran on the copy", g.worlds[i].id)
		}
	}
	t.Logf("served: 20 calls answered, %d echoes executed, %d alarms fired", len(echoes), len(alarms))
}
