package memstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

var errInjected = errors.New("injected store failure")

// storeChaos runs under the lab: every store call may fail (BUGGIFY at
// "store.<op>"), and the process may crash between two calls (BUGGIFY at
// "crash-between"), after which it restarts on the durable state. The
// writer retries until each append is acknowledged; the check is that every
// acknowledged event is there exactly once after all the crashes.
func storeChaos(env *lab.Env) error {
	hook := func(op string) error {
		if env.Lab.Buggify("store." + op) {
			return errInjected
		}
		return nil
	}
	s := memstore.New(memstore.WithClock(env.Lab.Now), memstore.WithHook(hook))
	acked := map[string]uint64{}
	crashes := 0
	for i := 0; i < 30; i++ {
		r := store.Record{EventID: fmt.Sprint("ev-", i), IdempotencyKey: fmt.Sprint("k-", i), EventType: "StepCompleted",
			StepID: "s", LogicalAttemptID: 1, EngineAttemptID: 1, Payload: []byte{0xa0}}
		for {
			got, err := s.Append(env.Ctx, "run", []store.Record{r}, store.AppendOptions{})
			if env.Lab.Buggify("crash-between") {
				// The process dies here: whatever it did not see acknowledged
				// is unknown to it, and it restarts on the durable state.
				s.Crash()
				s = s.Restart(memstore.WithHook(hook))
				crashes++
				continue // retry: idempotency makes a committed append safe to repeat
			}
			if errors.Is(err, errInjected) {
				continue
			}
			if err != nil {
				return err
			}
			if prev, ok := acked[r.IdempotencyKey]; ok && prev != got[0].RunSeq {
				return fmt.Errorf("%s acknowledged at runSeq %d and %d", r.IdempotencyKey, prev, got[0].RunSeq)
			}
			acked[r.IdempotencyKey] = got[0].RunSeq
			break
		}
	}
	var evs []store.Record
	for {
		var err error
		if evs, err = s.Read(env.Ctx, "run", 0, 0); !errors.Is(err, errInjected) {
			if err != nil {
				return err
			}
			break
		}
	}
	if len(evs) != len(acked) {
		return fmt.Errorf("%d events stored, %d acknowledged (after %d crashes)", len(evs), len(acked), crashes)
	}
	for _, e := range evs {
		if acked[e.IdempotencyKey] != e.RunSeq {
			return fmt.Errorf("%s stored at runSeq %d, acknowledged at %d", e.IdempotencyKey, e.RunSeq, acked[e.IdempotencyKey])
		}
	}
	return nil
}

// TestLabBuggifyDrivesStoreFaults: the lab's seeded BUGGIFY fails store
// calls and crashes the process between two calls; the same seed injects
// the same faults (same fingerprint), and no acknowledged append is lost or
// duplicated across the crashes.
func TestLabBuggifyDrivesStoreFaults(t *testing.T) {
	cfg := lab.Config{Seed: 3, Faults: lab.Faults{Buggify: 0.2}, Name: "store-chaos"}
	a := lab.Run(cfg, storeChaos)
	if a.Failure != nil {
		t.Fatalf("%v (replay: ORRERY_SEED=%d go test ./store/memstore -run '^TestLabBuggifyDrivesStoreFaults$')", a.Failure, cfg.Seed)
	}
	b := lab.Run(cfg, storeChaos)
	if a.Fingerprint != b.Fingerprint {
		t.Fatal("the same seed injected different store faults")
	}
	var fails, crashes int
	for _, ev := range a.Events {
		switch ev.Detail {
		case "buggify crash-between":
			crashes++
		case "buggify store.append":
			fails++
		}
	}
	if fails == 0 || crashes == 0 {
		t.Fatalf("trace has %d injected failures and %d crashes; want both", fails, crashes)
	}
	for seed := uint64(1); seed <= 50; seed++ {
		res := lab.Run(lab.Config{Seed: seed, Faults: lab.Faults{Buggify: 0.2}}, storeChaos)
		if res.Failure != nil {
			t.Fatalf("seed %d: %v", seed, res.Failure)
		}
	}
}
