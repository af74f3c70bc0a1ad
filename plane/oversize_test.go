package plane_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// The spill world journals what it is told (Jot), fails with an error of
// any length (Shout) and asks for any number of effects (Spew).
type (
	spill struct{ Seen []string }
	Jot   struct{ Key string }
	Shout struct{ Bytes int }
	Spew  struct{ N int }
)

func spillDef() *world.Def[spill] {
	d := world.New[spill]("test.spill", 1)
	world.On(d, func(c *world.Ctx, s *spill, j Jot) error {
		s.Seen = append(s.Seen, j.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *spill, sh Shout) error {
		s.Seen = append(s.Seen, "shout")
		return errors.New(strings.Repeat("!", sh.Bytes))
	})
	world.On(d, func(c *world.Ctx, s *spill, sp Spew) error {
		s.Seen = append(s.Seen, "spew")
		for range sp.N {
			c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://spill.example/"})
		}
		return nil
	})
	return d
}

// swellKernel wraps a kernel so that a step of an input that mentions
// "poison" asks for more intents than the store takes in one commit, as a
// kernel without bounds, or a store with narrower ones, would: the store
// refuses the commit whatever the host does with it.
type swellKernel struct{ world.Kernel }

func (k swellKernel) wrap(i world.Instance, err error) (world.Instance, error) {
	if err != nil {
		return nil, err
	}
	return swellInstance{i}, nil
}

func (k swellKernel) Load(id string, s world.Snapshot) (world.Instance, error) {
	return k.wrap(k.Kernel.Load(id, s))
}

func (k swellKernel) Replay(id string, base world.Snapshot, tail []event.Envelope) (world.Instance, error) {
	return k.wrap(k.Kernel.Replay(id, base, tail))
}

type swellInstance struct{ world.Instance }

func (i swellInstance) Step(in world.Input, at time.Time) (world.StepResult, error) {
	res, err := i.Instance.Step(in, at)
	if err == nil && bytes.Contains(in.Payload, []byte("poison")) {
		for n := range store.MaxBatch + 1 {
			res.Intents = append(res.Intents, vocab.Intent{IntentHash: fmt.Sprintf("swell-%d", n), Kind: world.KindHTTPRequest,
				Params: []byte{0xa0}, Origin: vocab.Origin{World: i.ID(), Height: res.Height}.String()})
		}
	}
	return res, err
}

// events collects a host's events from any goroutine.
type events struct {
	mu  sync.Mutex
	evs []plane.HostEvent
}

func (e *events) observe(ev plane.HostEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) of(kind string) []plane.HostEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []plane.HostEvent
	for _, ev := range e.evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// runSpill enqueues msgs into a fresh world of the spill definition (as
// kern serves it) before a host starts, so that its first cycle reads
// them all; it waits until the host has drained them, runs then (if
// any) with a client that has no in-process replies, and returns the
// journal, the host's events, and the state replayed from the journal,
// which it checks equals the host's restore byte for byte.
func runSpill(r *rig, kern world.Kernel, then func(c *plane.Client) error, msgs ...any) ([]event.Envelope, *events, spill, error) {
	const id = "spill"
	if err := createAssigned(r.Ctx, r.Store, id, "A"); err != nil {
		return nil, nil, spill{}, err
	}
	kernels := plane.Kernels{universe: kern}
	c, err := plane.NewClient(plane.ClientConfig{Store: r.Store, Kernels: kernels, Executor: r.Ex})
	if err != nil {
		return nil, nil, spill{}, err
	}
	for i, m := range msgs {
		if _, err := c.Send(r.Ctx, id, m, fmt.Sprint("k", i)); err != nil {
			return nil, nil, spill{}, err
		}
	}
	evs := &events{}
	cfg := r.hostConfig("A", r.Store, nil)
	cfg.Kernels, cfg.Observe = kernels, evs.observe
	h, err := plane.StartHost(r.Ctx, r.Root, cfg)
	if err != nil {
		return nil, nil, spill{}, err
	}
	defer h.Stop(r.Ctx)
	if err := r.drained(id); err != nil {
		return nil, evs, spill{}, fmt.Errorf("%w (crashes: %d)", err, len(evs.of(plane.EvCrash)))
	}
	if then != nil {
		if err := then(c); err != nil {
			return nil, evs, spill{}, err
		}
	}
	journal, err := journalOf(r.Ctx, r.Store, id)
	if err != nil {
		return nil, nil, spill{}, err
	}
	full, err := world.Replay(spillDef(), id, world.Snapshot{}, journal)
	if err != nil {
		return nil, nil, spill{}, fmt.Errorf("replay: %w", err)
	}
	inst, _, err := plane.Restore(r.Ctx, r.Store, kernels, id)
	if err != nil {
		return nil, nil, spill{}, err
	}
	if string(inst.State()) != string(full.State()) {
		return nil, nil, spill{}, errors.New("the replayed journal and the restored world differ")
	}
	s, err := full.Value()
	return journal, evs, s, err
}

type spillRecord struct {
	Outcome string `cbor:"outcome"`
	Error   string `cbor:"error"`
	Refused bool   `cbor:"refused"`
}

func spillRecordOf(e event.Envelope) (spillRecord, error) {
	var r spillRecord
	dec, err := event.NewDecoder(event.DecoderOptions{MaxSize: event.MaxPayloadBytes})
	if err != nil {
		return r, err
	}
	return r, dec.Unmarshal(e.Payload, &r)
}

func noEffects(r *rig, id string) error {
	effs, err := r.Store.ListEffects(r.Ctx, id, 0, 0)
	if err != nil {
		return err
	}
	if len(effs) != 0 {
		return fmt.Errorf("%d effects published by failed steps", len(effs))
	}
	return nil
}

// TestOversizedStepsAreConsumedAndTheNextInputRuns: a handler that returns
// a 5 MiB error, and one that asks for 10,001 effects, no longer make every
// commit fail: each is journaled as an error outcome (the error text cut to
// its bound, the effects discarded, nothing published), its input is
// consumed, the inputs queued behind it run, the host never crashes, and
// the journal replays to the host's state byte for byte.
func TestOversizedStepsAreConsumedAndTheNextInputRuns(t *testing.T) {
	forEachBackend(t, 81, "oversize", func(r *rig) error {
		journal, evs, s, err := runSpill(r, spillDef().Kernel(), nil,
			Jot{Key: "a"}, Shout{Bytes: 5 << 20}, Spew{N: 10_001}, Jot{Key: "b"})
		if err != nil {
			return err
		}
		if got := strings.Join(s.Seen, ","); got != "a,b" {
			return fmt.Errorf("state saw %q, want a,b: the failed steps' states were kept or the last input lost", got)
		}
		if len(journal) != 4 {
			return fmt.Errorf("%d records, want 4", len(journal))
		}
		shout, err := spillRecordOf(journal[1])
		if err != nil {
			return err
		}
		if shout.Outcome != string(world.OutcomeError) || len(shout.Error) > world.MaxErrorBytes || !strings.Contains(shout.Error, "kept]") {
			return fmt.Errorf("the 5 MiB error's record: %s with %d bytes of error, want error cut to %d", shout.Outcome, len(shout.Error), world.MaxErrorBytes)
		}
		spew, err := spillRecordOf(journal[2])
		if err != nil {
			return err
		}
		if spew.Outcome != string(world.OutcomeError) || !strings.Contains(spew.Error, "intents limit: 10001") {
			return fmt.Errorf("the 10,001 effects' record: %s %q", spew.Outcome, spew.Error)
		}
		if err := noEffects(r, "spill"); err != nil {
			return err
		}
		if n := len(evs.of(plane.EvCrash)) + len(evs.of(plane.EvRefused)); n != 0 {
			return fmt.Errorf("%d crashes or refusals: the kernel let through a step the store refused", n)
		}
		return nil
	})
}

// TestStoreRefusedStepIsConsumedAsAnErrorOutcome: a step the store refuses
// although the kernel let it through (here a kernel that swells one step
// past the store's batch limit) is not retried for ever. The host finds
// it by committing the refused cycle's steps one at a time, journals it as
// a refused error outcome that consumes its input, and runs the inputs
// queued behind it; nothing of the refused step is published, and replay
// (which runs no handler for a refused step) gives the host's state.
func TestStoreRefusedStepIsConsumedAsAnErrorOutcome(t *testing.T) {
	forEachBackend(t, 82, "refused", func(r *rig) error {
		// A call the store refuses: its caller, which re-derives the
		// reply from the journal, is told so.
		call := func(c *plane.Client) error {
			_, err := c.Call(r.Ctx, "spill", Jot{Key: "poison call"})
			if !errors.Is(err, plane.ErrCallFailed) || !errors.Is(err, world.ErrRefused) {
				return fmt.Errorf("a refused call answered %v, want ErrCallFailed and ErrRefused", err)
			}
			return nil
		}
		journal, evs, s, err := runSpill(r, swellKernel{spillDef().Kernel()}, call,
			Jot{Key: "a"}, Jot{Key: "poison"}, Jot{Key: "b"}, Jot{Key: "c"})
		if err != nil {
			return err
		}
		if got := strings.Join(s.Seen, ","); got != "a,b,c" {
			return fmt.Errorf("state saw %q, want a,b,c", got)
		}
		if len(journal) != 5 {
			return fmt.Errorf("%d records, want 5", len(journal))
		}
		for i, e := range journal {
			rec, err := spillRecordOf(e)
			if err != nil {
				return err
			}
			poisoned := i == 1 || i == 4
			if rec.Refused != poisoned || (rec.Outcome == string(world.OutcomeError)) != poisoned {
				return fmt.Errorf("record %d: %+v", i+1, rec)
			}
			if poisoned && !strings.Contains(rec.Error, "refused") {
				return fmt.Errorf("the refused step's error %q does not say so", rec.Error)
			}
		}
		if err := noEffects(r, "spill"); err != nil {
			return err
		}
		refusals := evs.of(plane.EvRefused)
		if len(refusals) == 0 || !errors.Is(refusals[0].Err, store.ErrInvalid) ||
			!slices.ContainsFunc(refusals, func(ev plane.HostEvent) bool { return ev.N == 1 }) {
			return fmt.Errorf("refusals %+v: want the store's ErrInvalid, the last of one step", refusals)
		}
		if n := len(evs.of(plane.EvCrash)); n != 0 {
			return fmt.Errorf("%d crashes: a refused commit restarted the world", n)
		}
		if !r.Real() {
			// Under the lab the first cycle steps a and the poison, and
			// stops there: no room is left for another step's intents.
			var ns []int
			for _, ev := range refusals {
				ns = append(ns, ev.N)
			}
			if !slices.Equal(ns, []int{2, 1, 1}) {
				return fmt.Errorf("refused commits of %v steps, want [2 1 1]: the two-step cycle, the poison alone, the call", ns)
			}
		}
		return nil
	})
}
