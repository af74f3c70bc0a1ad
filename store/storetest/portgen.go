package storetest

import (
	"fmt"
	"time"

	"github.com/orrery-run/orrery/store"
)

// PortGen emits, in export order, the records of a store of worlds
// worlds, each with events journal records of payload bytes, one inbox
// item per record (all drained, the last key still live), its lease at
// epoch 3, one effect done with its receipt consumed and one pending, and
// a delivered timer: a generated store to import, for benchmarks and for
// tests that need a large one quickly. It returns how many records it
// emitted. Every time is at, or a few nanoseconds after, at.
func PortGen(worlds, events, payload int, at time.Time, emit func(store.PortRecord) error) (int, error) {
	at = at.UTC()
	n := 0
	out := func(r store.PortRecord) error {
		r.Format = store.PortFormat
		n++
		return emit(r)
	}
	id := func(i int) string { return fmt.Sprintf("w%06d", i) }
	body := make([]byte, payload)
	for i := range body {
		body[i] = byte(i)
	}
	last := uint64(events + 1) // the items, then the receipt
	for i := range worlds {
		if err := out(store.PortRecord{Kind: store.PortKindWorld, World: &store.PortWorld{
			ID: id(i), Universe: "gen", Status: store.WorldActive, CreatedAt: at,
			InboxCursor: last, LastSeq: last,
		}}); err != nil {
			return n, err
		}
	}
	for i := range worlds {
		if err := out(store.PortRecord{Kind: store.PortKindStream, Stream: &store.PortStream{Stream: id(i), Head: uint64(events)}}); err != nil {
			return n, err
		}
	}
	for i := range worlds {
		for e := 1; e <= events; e++ {
			r := rec(fmt.Sprint(e))
			r.StreamID, r.RunSeq, r.PersistedAt, r.Payload = id(i), uint64(e), at.Add(time.Duration(e)), body
			if err := out(store.PortRecord{Kind: store.PortKindEvent, Event: &store.PortEvent{Record: r}}); err != nil {
				return n, err
			}
		}
	}
	for i := range worlds {
		for s := uint64(1); s <= last; s++ {
			key, kind := fmt.Sprint("k", s), "event"
			if s == last {
				key, kind = "receipt:"+hashOf(i, "done"), "receipt"
			}
			if err := out(store.PortRecord{Kind: store.PortKindInbox, Inbox: &store.PortInboxItem{
				World: id(i), Seq: s, Kind: kind, Payload: body[:min(len(body), 16)], DedupeKey: key,
				EnqueuedAt: at.Add(time.Duration(s)), KeyLive: s >= last-1,
			}}); err != nil {
				return n, err
			}
		}
	}
	for i := range worlds {
		if err := out(store.PortRecord{Kind: store.PortKindDrain, Drain: &store.PortDrain{World: id(i), Upto: last, DrainedAt: at}}); err != nil {
			return n, err
		}
	}
	for i := range worlds {
		if err := out(store.PortRecord{Kind: store.PortKindLease, Lease: &store.PortLease{World: id(i), Epoch: 3, ExpiresAt: at}}); err != nil {
			return n, err
		}
	}
	status, seq := "ok", uint64(0)
	for i := range worlds {
		inbox, done := last, at
		for _, which := range []string{"done", "pending"} {
			seq++
			e := &store.PortEffect{Seq: seq, IntentHash: hashOf(i, which), World: id(i), Kind: effectKind,
				Params: []byte("p"), Origin: "gen", PolicyContextHash: "pch", State: which, EnqueuedAt: at}
			if which == "done" {
				e.Attempts, e.ClaimedBy, e.ReceiptStatus, e.InboxSeq, e.CompletedAt = 1, "fx", &status, &inbox, &done
			}
			if err := out(store.PortRecord{Kind: store.PortKindEffect, Effect: e}); err != nil {
				return n, err
			}
		}
	}
	for i := range worlds {
		inbox, done := uint64(1), at
		if err := out(store.PortRecord{Kind: store.PortKindTimer, Timer: &store.PortTimer{
			IntentHash: hashOf(i, "timer"), World: id(i), DeliverAt: at, State: string(store.TimerDelivered),
			Attempt: 1, ClaimedBy: "timers", InboxSeq: &inbox, CompletedAt: &done,
		}}); err != nil {
			return n, err
		}
	}
	err := out(store.PortRecord{Kind: store.PortKindCounter, Counter: &store.PortCounter{Name: store.PortCounterEffectSeq, Value: seq}})
	return n, err
}

func hashOf(world int, what string) string { return fmt.Sprintf("%s-%06d", what, world) }
