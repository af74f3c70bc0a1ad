package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/store"
)

func journalTests() []testCase {
	return []testCase{
		{"AppendAssignsMonotonicRunSeqAndPersistedAt", testAppendBasics},
		{"DuplicateIdempotencyKeyReturnsExistingAndInsertsNothing", testAppendDuplicate},
		{"ExpectedHeadIsCompareAndSwap", testExpectedHead},
	}
}

// rec builds a valid record; key distinguishes idempotency keys.
func rec(key string) store.Record {
	return store.Record{
		EventID: "ev-" + key, IdempotencyKey: "key-" + key, EventType: "StepCompleted",
		StepID: "s1", LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: "p", PlanVersion: 1,
		Payload: []byte{0xa0},
	}
}

func testAppendBasics(t *testing.T, open Factory) {
	h := open(t)
	var last uint64
	for i := 0; i < 5; i++ {
		got, err := h.Store.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, store.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].RunSeq <= last || got[0].Idempotent || got[0].PersistedAt.IsZero() {
			t.Fatalf("append %d: %+v after runSeq %d", i, got[0], last)
		}
		last = got[0].RunSeq
	}
	head, err := h.Store.Head(bg, "run-1")
	if err != nil || head != last {
		t.Fatalf("Head = %d, %v; want %d", head, err, last)
	}
	evs, err := h.Store.Read(bg, "run-1", 0, 100)
	if err != nil || len(evs) != 5 {
		t.Fatalf("Read = %d events, %v", len(evs), err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].RunSeq <= evs[i-1].RunSeq {
			t.Fatalf("Read out of runSeq order: %d then %d", evs[i-1].RunSeq, evs[i].RunSeq)
		}
	}
}

func testAppendDuplicate(t *testing.T, open Factory) {
	h := open(t)
	first, err := h.Store.Append(bg, "run-1", []store.Record{rec("a")}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dup := rec("a")
	dup.EventID = "another-id"
	again, err := h.Store.Append(bg, "run-1", []store.Record{dup}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !again[0].Idempotent || again[0].EventID != first[0].EventID || again[0].RunSeq != first[0].RunSeq || !again[0].PersistedAt.Equal(first[0].PersistedAt) {
		t.Fatalf("duplicate append = %+v, want the existing %+v marked idempotent", again[0], first[0])
	}
	evs, _ := h.Store.Read(bg, "run-1", 0, 10)
	if len(evs) != 1 {
		t.Fatalf("duplicate inserted: %d events", len(evs))
	}
}

func testExpectedHead(t *testing.T, open Factory) {
	h := open(t)
	if _, err := h.Store.Append(bg, "run-1", []store.Record{rec("a")}, store.AppendOptions{ExpectedHead: store.Head(0)}); err != nil {
		t.Fatal(err)
	}
	_, err := h.Store.Append(bg, "run-1", []store.Record{rec("b")}, store.AppendOptions{ExpectedHead: store.Head(0)})
	if !errors.Is(err, store.ErrHeadMismatch) {
		t.Fatalf("stale ExpectedHead: %v, want ErrHeadMismatch", err)
	}
	if evs, _ := h.Store.Read(bg, "run-1", 0, 10); len(evs) != 1 {
		t.Fatalf("a failed CAS inserted: %d events", len(evs))
	}
}
