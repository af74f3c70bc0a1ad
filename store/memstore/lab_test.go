package memstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
			got, err := s.Append(env.Ctx, "run", []store.Record{r}, store.AppendOptions{Kind: store.FreeStream})
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

// watchUnderLab: a lab thread parks on a lab Parker registered with Watch,
// and is woken only by another lab thread's Enqueues: no polling, no real
// time (the store reads the lab's virtual clock). If a hint were missing
// the consumer would stay parked and the lab would report a deadlock.
func watchUnderLab(log *[]string) lab.Scenario {
	return func(env *lab.Env) error {
		s := memstore.New(memstore.WithClock(env.Lab.Now))
		defer s.Close()
		if _, err := s.CreateWorld(env.Ctx, "u", "w", nil); err != nil {
			return err
		}
		parker := env.Lab.NewParker()
		stop, err := s.Watch(env.Ctx, parker, store.TopicInbox("w"))
		if err != nil {
			return err
		}
		defer stop()
		const want = 5
		env.Lab.Go(func() {
			for i := 0; i < want; i++ {
				seq, _, err := s.Enqueue(env.Ctx, "w", store.InboxItem{Kind: "event", Payload: []byte(fmt.Sprint(i))})
				*log = append(*log, fmt.Sprintf("producer enqueued seq %d", seq))
				if err != nil {
					*log = append(*log, "producer: "+err.Error())
					return
				}
				if env.Lab.Buggify("producer.pause") {
					// Give the turn away until the consumer has caught up,
					// so the seed decides how enqueues and reads interleave.
					p := env.Lab.NewParker()
					env.Lab.AfterFunc(time.Millisecond, p.Unpark)
					_ = p.Park(env.Ctx)
				}
			}
		})
		var after uint64
		for after < want {
			items, err := s.ReadInbox(env.Ctx, "w", after, 0)
			if err != nil {
				return err
			}
			for _, it := range items {
				after = it.Seq
			}
			*log = append(*log, fmt.Sprintf("consumer read up to %d at %v", after, env.Lab.Elapsed()))
			if after < want {
				if err := parker.Park(env.Ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// TestWatchWakesALabThread: memstore's Watch works inside the deterministic
// lab (issue 7 item 14): a parked lab thread is woken by another thread's
// Enqueue, the same seed gives the same run (trace fingerprint and the
// threads' own log), and no real time passes.
func TestWatchWakesALabThread(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		var logA, logB []string
		cfg := lab.Config{Seed: seed, Faults: lab.Faults{Buggify: 0.3}, Name: "watch-under-lab"}
		a := lab.Run(cfg, watchUnderLab(&logA))
		if a.Failure != nil {
			t.Fatalf("seed %d: %v (log %v)", seed, a.Failure, logA)
		}
		b := lab.Run(cfg, watchUnderLab(&logB))
		if a.Fingerprint != b.Fingerprint || fmt.Sprint(logA) != fmt.Sprint(logB) {
			t.Fatalf("seed %d ran differently twice:\n%v\n%v", seed, logA, logB)
		}
		if last := logA[len(logA)-1]; !strings.HasPrefix(last, "consumer read up to 5") {
			t.Fatalf("seed %d: the consumer did not read all five items: %v", seed, logA)
		}
	}
}
