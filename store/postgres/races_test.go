package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// race runs n goroutines, alternating between the two stores, released at
// once, and waits for them.
func race(n int, a, b *Store, fn func(i int, s *Store)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i, s)
		}()
	}
	close(start)
	wg.Wait()
}

// Appenders on two machines racing on one idempotency key: exactly one
// insert, and every answer carries its metadata.
func TestTwoStoresRacingDuplicateAppendInsertsOnce(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	for round := range 5 {
		stream := fmt.Sprint("run-", round)
		answers := make([]store.Appended, 12)
		race(len(answers), a, b, func(i int, s *Store) {
			r := rec("same")
			r.EventID = fmt.Sprint("ev-", i)
			got, err := s.Append(bg, stream, []store.Record{r}, store.AppendOptions{Kind: store.FreeStream})
			if err != nil {
				t.Error(err)
				return
			}
			answers[i] = got[0]
		})
		fresh := 0
		for _, an := range answers {
			if !an.Idempotent {
				fresh++
			}
			if an.EventID != answers[0].EventID || an.RunSeq != answers[0].RunSeq || !an.PersistedAt.Equal(answers[0].PersistedAt) {
				t.Fatalf("answers differ: %+v vs %+v", an, answers[0])
			}
		}
		if fresh != 1 {
			t.Fatalf("%d answers claim the insert", fresh)
		}
		if evs, _ := a.Read(bg, stream, 0, 0); len(evs) != 1 {
			t.Fatalf("%d events stored", len(evs))
		}
	}
}

// Two machines appending to overlapping sets of streams in every order
// never deadlock (locks are taken in stream order) and lose nothing.
func TestTwoStoresOverlappingStreamsNoDeadlock(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	const writers, each, streams = 16, 20, 6
	var mu sync.Mutex
	seqs := map[string][]uint64{}
	race(writers, a, b, func(w int, s *Store) {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		for i := range each {
			stream := fmt.Sprint("s", rng.IntN(streams))
			got, err := s.Append(bg, stream, []store.Record{rec(fmt.Sprintf("%d-%d", w, i))}, store.AppendOptions{Kind: store.FreeStream})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seqs[stream] = append(seqs[stream], got[0].RunSeq)
			mu.Unlock()
		}
	})
	total := 0
	for stream, got := range seqs {
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		for i := 1; i < len(got); i++ {
			if got[i] == got[i-1] {
				t.Fatalf("%s: runSeq %d handed out twice", stream, got[i])
			}
		}
		if h, _ := a.Head(bg, stream); h != got[len(got)-1] {
			t.Fatalf("%s: head %d, last runSeq %d", stream, h, got[len(got)-1])
		}
		total += len(got)
	}
	if total != writers*each {
		t.Fatalf("%d appends answered, want %d", total, writers*each)
	}
}

// Producers on two machines enqueueing one dedupe key: one item; inbox
// seqs of concurrent enqueues are dense and distinct.
func TestTwoStoresRacingEnqueueDedupe(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	if _, err := a.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		seq uint64
		dup bool
	}
	answers := make([]answer, 16)
	race(len(answers), a, b, func(i int, s *Store) {
		key := "once"
		if i%4 == 0 {
			key = "" // no dedupe: always a new item
		}
		seq, dup, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: key, Payload: []byte{byte(i)}})
		if err != nil {
			t.Error(err)
		}
		answers[i] = answer{seq, dup}
	})
	var onceSeq uint64
	fresh := 0
	for i, an := range answers {
		if i%4 == 0 {
			continue
		}
		if !an.dup {
			fresh++
		}
		if onceSeq == 0 {
			onceSeq = an.seq
		}
		if an.seq != onceSeq {
			t.Fatalf("dedupe key answered seqs %d and %d", onceSeq, an.seq)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d enqueues of one key were fresh", fresh)
	}
	items, err := a.ReadInbox(bg, "w", 0, 0)
	if err != nil || len(items) != 1+len(answers)/4 {
		t.Fatalf("inbox has %d items, %v", len(items), err)
	}
	for i, it := range items {
		if it.Seq != uint64(i+1) {
			t.Fatalf("inbox seqs %v are not dense", itemSeqs(items))
		}
	}
}

// Adapters on two machines completing one intent under its claim (an
// adapter retrying its completion): one terminal receipt.
func TestTwoStoresRacingCompleteOneReceipt(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	e := leased(t, a, "w", "host").Epoch
	for round := range 5 {
		hash := fmt.Sprint("i-", round)
		if _, err := a.Publish(bg, "w", e, []vocab.Intent{{IntentHash: hash, Kind: "k"}}); err != nil {
			t.Fatal(err)
		}
		items, err := a.Claim(bg, "adapter", []string{"k"}, 1, time.Minute)
		if err != nil || len(items) != 1 || items[0].IntentHash != hash {
			t.Fatalf("Claim = %+v, %v", items, err)
		}
		seqs := make([]uint64, 10)
		dups := make([]bool, 10)
		race(len(seqs), a, b, func(i int, s *Store) {
			var err error
			seqs[i], dups[i], err = s.Complete(bg, hash, items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte{byte(i)}})
			if err != nil {
				t.Error(err)
			}
		})
		fresh := 0
		for i := range seqs {
			if !dups[i] {
				fresh++
			}
			if seqs[i] != seqs[0] {
				t.Fatalf("completions answered seqs %v", seqs)
			}
		}
		if fresh != 1 {
			t.Fatalf("%d completions were fresh", fresh)
		}
		st, err := b.EffectStatus(bg, hash)
		if err != nil || st.State != vocab.EffectDone || st.InboxSeq != seqs[0] {
			t.Fatalf("status %+v, %v", st, err)
		}
	}
	items, _ := a.ReadInbox(bg, "w", 0, 0)
	if len(items) != 5 {
		t.Fatalf("%d receipts in the inbox, want 5", len(items))
	}
}

// Fabric senders on two machines retrying one message: one delivery.
func TestTwoStoresRacingFabricSendDeliversOnce(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	if _, err := a.CreateWorld(bg, "u", "dest", nil); err != nil {
		t.Fatal(err)
	}
	res := make([]store.FabricResult, 12)
	race(len(res), a, b, func(i int, s *Store) {
		var err error
		res[i], err = s.Send(bg, "dest", "msg-1", store.InboxItem{Payload: []byte("hi")})
		if err != nil {
			t.Error(err)
		}
	})
	ok := 0
	for _, r := range res {
		if r.Status == store.FabricOK {
			ok++
		}
		if r.Seq != res[0].Seq {
			t.Fatalf("sends answered different seqs: %+v", res)
		}
	}
	if ok != 1 {
		t.Fatalf("%d sends delivered", ok)
	}
	items, _ := a.ReadInbox(bg, "dest", 0, 0)
	if len(items) != 1 || items[0].Kind != "fabric" {
		t.Fatalf("inbox %+v", items)
	}
}

// Timer workers on two machines: each due timer is claimed once, and fired
// once, in (deliverAt, intentHash) order within each claim.
func TestTwoStoresTimerClaimsNeverOverlap(t *testing.T) {
	t.Parallel()
	a, b, c := twoMachines(t)
	e := leased(t, a, "w", "host").Epoch
	now, err := a.Now(bg)
	if err != nil {
		t.Fatal(err)
	}
	const total = 200
	for i := range total {
		at := now.Add(time.Duration(i%7) * time.Second)
		if err := a.Schedule(bg, "w", e, fmt.Sprintf("t-%03d", i), at, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(time.Minute)
	var mu sync.Mutex
	claimed := map[string]bool{}
	race(6, a, b, func(i int, s *Store) {
		for {
			items, err := s.ClaimDue(bg, fmt.Sprint("tw-", i), 8, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if len(items) == 0 {
				return
			}
			for j := 1; j < len(items); j++ {
				p, q := items[j-1], items[j]
				if q.DeliverAt.Before(p.DeliverAt) || (q.DeliverAt.Equal(p.DeliverAt) && q.IntentHash < p.IntentHash) {
					t.Errorf("claim out of order: %s@%v then %s@%v", p.IntentHash, p.DeliverAt, q.IntentHash, q.DeliverAt)
				}
			}
			for _, it := range items {
				mu.Lock()
				if claimed[it.IntentHash] {
					t.Errorf("%s claimed twice", it.IntentHash)
				}
				claimed[it.IntentHash] = true
				mu.Unlock()
				if _, dup, err := s.Fire(bg, it.IntentHash, it.ClaimOf()); err != nil || dup {
					t.Errorf("Fire %s: dup=%v %v", it.IntentHash, dup, err)
				}
			}
		}
	})
	if len(claimed) != total {
		t.Fatalf("%d of %d timers claimed", len(claimed), total)
	}
	items, _ := a.ReadInbox(bg, "w", 0, 0)
	if len(items) != total {
		t.Fatalf("%d timer items in the inbox", len(items))
	}
}

func itemSeqs(items []store.InboxItem) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

// A planned stop racing its own node's claims, on two machines: the
// retirement and the claims for the retired incarnation serialise on the
// worker's row, so once both are done no effect is left inflight under a
// claim for the retired incarnation (it was requeued by the retirement, or
// the claim saw the retirement and took nothing), and every claim that
// came back empty after the retirement says ErrFenced.
func TestTwoStoresClaimRacingRetirementLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	if _, err := a.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	l, err := a.Acquire(bg, "w", "H", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 8 {
		inc := fmt.Sprint("inc-", round)
		var hs []string
		for i := range 24 {
			hs = append(hs, fmt.Sprintf("e-%d-%d", round, i))
		}
		intents := make([]vocab.Intent, len(hs))
		for i, h := range hs {
			intents[i] = vocab.Intent{IntentHash: h, Kind: "k", Origin: "w@1"}
		}
		if _, err := a.Publish(bg, "w", l.Epoch, intents); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Heartbeat(bg, "N", 1, store.AliveAs(inc, time.Minute)); err != nil {
			t.Fatal(err)
		}
		race(8, a, b, func(i int, s *Store) {
			if i == 0 {
				if _, err := s.RetireWorker(bg, "N", inc); err != nil {
					t.Error(err)
				}
				return
			}
			for range 3 {
				_, err := s.Claim(bg, "N/effects", []string{"k"}, 2, time.Minute, store.ClaimFor("N", inc))
				if err != nil && !errors.Is(err, store.ErrFenced) {
					t.Error(err)
				}
			}
		})
		items, err := a.ListEffects(bg, "w", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.State == vocab.EffectInflight {
				t.Fatalf("round %d: %s is inflight under %s after its incarnation retired", round, it.IntentHash, it.ClaimedBy)
			}
		}
		if _, err := a.Claim(bg, "N/effects", []string{"k"}, 1, time.Minute, store.ClaimFor("N", inc)); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("round %d: a claim after the retirement: %v, want ErrFenced", round, err)
		}
		// Drain the round's effects for the next.
		got, err := a.Claim(bg, "other", []string{"k"}, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range got {
			if _, _, err := a.Complete(bg, it.IntentHash, vocab.Claim{Worker: "other", Attempt: it.Attempt}, vocab.Receipt{Status: vocab.ReceiptOK}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAClaimOfTheReleaseBeforeIsNotTakenForADeadOwners: during a rolling
// upgrade a binary of the release before claims with SQL that names no
// owner. An effect an owned claim gave back (a release, a retry, a reap)
// and such a binary then claimed must not be revoked when the first
// owner's incarnation retires: every move back to pending forgets the
// owner (it kept it, and the orphan reaper requeued the live claim).
func TestAClaimOfTheReleaseBeforeIsNotTakenForADeadOwners(t *testing.T) {
	t.Parallel()
	a, _, _ := twoMachines(t)
	if _, err := a.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	l, err := a.Acquire(bg, "w", "H", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, give := range []func(it vocab.EffectItem) error{
		func(it vocab.EffectItem) error { return a.ReleaseEffect(bg, it.IntentHash, it.ClaimOf()) },
		func(it vocab.EffectItem) error {
			return a.RetryLater(bg, it.IntentHash, it.ClaimOf(), 0, "refused")
		},
	} {
		hash, inc := fmt.Sprint("old-", i), fmt.Sprint("inc-", i)
		if _, err := a.Publish(bg, "w", l.Epoch, []vocab.Intent{{IntentHash: hash, Kind: "k", Origin: "w@1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Heartbeat(bg, "N", 1, store.AliveAs(inc, time.Minute)); err != nil {
			t.Fatal(err)
		}
		items, err := a.Claim(bg, "N/effects", []string{"k"}, 1, time.Minute, store.ClaimFor("N", inc))
		if err != nil || len(items) != 1 {
			t.Fatalf("owned claim: %v, %v", items, err)
		}
		if err := give(items[0]); err != nil {
			t.Fatal(err)
		}
		// The release before's claim: state, attempts, claimed_by and the
		// expiry, nothing of an owner.
		if _, err := a.b.pool.Exec(bg, `UPDATE effects SET state = 'inflight', attempts = attempts + 1, claimed_by = 'O',
				claim_expires_ns = now_ns(0) + 60000000000 WHERE intent_hash = $1`, hash); err != nil {
			t.Fatal(err)
		}
		if _, err := a.RetireWorker(bg, "N", inc); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ReapOrphans(bg); err != nil {
			t.Fatal(err)
		}
		st, err := a.EffectStatus(bg, hash)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != vocab.EffectInflight {
			t.Fatalf("case %d: the old binary's live claim was taken for the retired owner's: state %s", i, st.State)
		}
	}
}

// TestTwoFirstHeartbeatsOfTwoIncarnationsRetireOne: two processes start
// under one worker id at once (a restart while the old one still runs).
// Whichever heartbeat the store takes second supersedes the other, which
// must be retired (its claims refused). The worker's row did not exist
// yet, so the FOR UPDATE of the second heartbeat locked nothing: it saw
// no predecessor, its upsert then replaced the first's incarnation once
// the first committed, and neither was retired. The first heartbeat is
// held uncommitted in a transaction of its own until the second is seen
// waiting, which makes the interleaving certain.
func TestTwoFirstHeartbeatsOfTwoIncarnationsRetireOne(t *testing.T) {
	t.Parallel()
	a := openStore(t, "", &clock{})
	first := rawConn(t, a.Schema())
	watch := rawConn(t, a.Schema())
	tx, err := first.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg) //nolint:errcheck // committed below
	var fenced bool
	if err := tx.QueryRow(bg, `SELECT r_fenced FROM heartbeat_as('N', 1, true, 'inc-0', 60000000000, 0)`).Scan(&fenced); err != nil || fenced {
		t.Fatalf("first heartbeat: fenced=%v %v", fenced, err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := a.Heartbeat(bg, "N", 1, store.AliveAs("inc-1", time.Minute))
		second <- err
	}()
	// Wait (on a condition, not a clock) until the second heartbeat waits
	// for the first's transaction.
	for {
		var n int
		if err := watch.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%heartbeat_as%' AND pid <> $1`, first.PgConn().PID()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-second:
			t.Fatalf("the second heartbeat ended (%v) while the first was uncommitted", err)
		default:
		}
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	// The superseded process thaws and beats again: it must be refused,
	// not take the record back (and retire its successor).
	if _, err := a.Heartbeat(bg, "N", 1, store.AliveAs("inc-0", time.Minute)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the superseded incarnation's next heartbeat: %v, want ErrFenced", err)
	}
	if _, err := a.Heartbeat(bg, "N", 1, store.AliveAs("inc-1", time.Minute)); err != nil {
		t.Fatalf("the successor's next heartbeat: %v", err)
	}
}

// During a rolling upgrade the release before's binaries call the
// six-argument heartbeat_as and set_draining and read their old columns:
// both still answer those, and neither forgets the capabilities a newer
// binary advertised under the same worker id.
func TestTheReleaseBeforesHeartbeatKeepsAdvertisedCapabilities(t *testing.T) {
	t.Parallel()
	a, _, _ := twoMachines(t)
	if _, err := a.Heartbeat(bg, "N", 1, store.Advertise([]string{"role:host"})); err != nil {
		t.Fatal(err)
	}
	var fenced, draining bool
	var capacity, hb, started int64
	var inc string
	var alive *int64
	if err := a.b.pool.QueryRow(bg, `SELECT * FROM heartbeat_as('N', 3, true, 'inc-0', 60000000000, 0)`).
		Scan(&fenced, &capacity, &draining, &hb, &started, &inc, &alive); err != nil || fenced || capacity != 3 {
		t.Fatalf("the release before's heartbeat: fenced %v capacity %d, %v", fenced, capacity, err)
	}
	if err := a.b.pool.QueryRow(bg, `SELECT * FROM set_draining('N', true)`).Scan(&capacity, &draining, &hb, &started); err != nil || !draining {
		t.Fatalf("the release before's set_draining: draining %v, %v", draining, err)
	}
	ws, err := a.ListWorkers(bg)
	if err != nil || len(ws) != 1 || !slices.Equal(ws[0].Capabilities, []string{"role:host"}) || ws[0].Incarnation != "inc-0" {
		t.Fatalf("ListWorkers = %+v, %v; want the advertised capabilities kept", ws, err)
	}
}
