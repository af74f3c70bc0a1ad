package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

const kindTest = "test.effect"

// env is one memstore with one leased world, inside a synctest bubble (or
// on the real clock for the loopback HTTP tests): the store's clock is
// time.Now, which synctest makes virtual.
type env struct {
	t      *testing.T
	ctx    context.Context
	st     store.Store
	ex     actor.Executor
	world  string
	epoch  uint64
	height uint64
}

func newEnv(t *testing.T, opts ...memstore.Option) *env {
	t.Helper()
	ctx := context.Background()
	st := memstore.New(append([]memstore.Option{memstore.WithClock(time.Now)}, opts...)...)
	e := &env{t: t, ctx: ctx, st: st, ex: actor.NewExecutor(7), world: "w1"}
	e.createWorld("w1")
	l, err := st.Acquire(ctx, "w1", "host-1", store.MaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	e.epoch = l.Epoch
	return e
}

func (e *env) createWorld(id string) {
	e.t.Helper()
	if _, err := e.st.CreateWorld(e.ctx, "u1", id, nil); err != nil {
		e.t.Fatal(err)
	}
}

// publish queues one intent of kind with params (a Go value, encoded as
// canonical CBOR) as the world's next step would, and returns its hash.
func (e *env) publish(kind string, params any) string {
	e.t.Helper()
	b, err := event.Marshal(params)
	if err != nil {
		e.t.Fatal(err)
	}
	e.height++
	h := world.IntentHash(e.world, e.height, 0, kind, b)
	origin := vocab.Origin{World: e.world, Height: e.height}.String()
	if _, err := e.st.Publish(e.ctx, e.world, e.epoch, []vocab.Intent{{IntentHash: h, Kind: kind, Params: b, Origin: origin}}); err != nil {
		e.t.Fatal(err)
	}
	return h
}

// receipts decodes every receipt in world's inbox, in inbox order.
func receipts(t *testing.T, st store.Store, worldID string) []world.Receipt {
	t.Helper()
	items, err := st.ReadInbox(context.Background(), worldID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []world.Receipt
	for _, it := range items {
		if it.Kind != vocab.KindReceipt {
			continue
		}
		var r world.Receipt
		if err := world.Decode(it.Payload, &r); err != nil {
			t.Fatalf("receipt %d does not decode: %v", it.Seq, err)
		}
		out = append(out, r)
	}
	return out
}

// oneReceiptEach asserts that every hash has exactly one receipt and that
// there are no others, and returns them by hash.
func oneReceiptEach(t *testing.T, st store.Store, worldID string, hashes ...string) map[string]world.Receipt {
	t.Helper()
	got := map[string]world.Receipt{}
	for _, r := range receipts(t, st, worldID) {
		if _, dup := got[r.IntentHash]; dup {
			t.Fatalf("intent %s has two receipts", r.IntentHash[:8])
		}
		got[r.IntentHash] = r
	}
	for _, h := range hashes {
		if _, ok := got[h]; !ok {
			t.Fatalf("intent %s has no receipt (receipts: %d)", h[:8], len(got))
		}
	}
	if len(got) != len(hashes) {
		t.Fatalf("%d receipts, want %d", len(got), len(hashes))
	}
	return got
}

// running is a pool's Run in its own goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func run(p *adapter.Pool) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	return r
}

// stop cancels the pool and returns what Run returned.
func (r *running) stop() error {
	r.cancel()
	return <-r.done
}

// call is one Execute call a fake adapter saw.
type call struct {
	hash    string
	attempt int // the claim's attempt
	worker  string
	at      time.Time
}

// fake is an Adapter whose behaviour a test scripts, recording every call.
type fake struct {
	kinds []string
	do    func(ctx context.Context, item vocab.EffectItem, n int) (effect.Result, error)

	mu      sync.Mutex
	calls   []call
	running int
	peak    int
}

func (f *fake) Kinds() []string {
	if f.kinds == nil {
		return []string{kindTest}
	}
	return f.kinds
}

func (f *fake) Execute(ctx context.Context, item vocab.EffectItem) (effect.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{hash: item.IntentHash, attempt: item.Attempt, worker: item.ClaimedBy, at: time.Now()})
	n := 0
	for _, c := range f.calls {
		if c.hash == item.IntentHash {
			n++
		}
	}
	f.running++
	f.peak = max(f.peak, f.running)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	if f.do == nil {
		return effect.OK(map[string]string{"echo": item.IntentHash[:8]}), nil
	}
	return f.do(ctx, item, n)
}

func (f *fake) snapshot() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// perClaim counts the calls of each claim (intent hash, claim attempt,
// worker).
func perClaim(calls []call) map[string]int {
	m := map[string]int{}
	for _, c := range calls {
		m[fmt.Sprintf("%s/%d/%s", c.hash[:8], c.attempt, c.worker)]++
	}
	return m
}

// atMostOncePerClaim asserts that no claim was executed twice.
func atMostOncePerClaim(t *testing.T, calls []call) {
	t.Helper()
	for k, n := range perClaim(calls) {
		if n > 1 {
			t.Fatalf("claim %s executed %d times", k, n)
		}
	}
}

var errTransient = errors.New("transient failure")

func newPool(t *testing.T, st adapter.Store, cfg adapter.Config, regs ...adapter.Registration) *adapter.Pool {
	t.Helper()
	p, err := adapter.NewPool(st, cfg, regs...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func decodeFailure(t *testing.T, r world.Receipt) effect.Failure {
	t.Helper()
	var f effect.Failure
	if err := r.Decode(&f); err != nil {
		t.Fatalf("receipt body is not a Failure: %v", err)
	}
	return f
}

func newEnvExecutor() actor.Executor { return actor.NewExecutor(1) }

func eventMarshal(v any) ([]byte, error) { return event.Marshal(v) }
