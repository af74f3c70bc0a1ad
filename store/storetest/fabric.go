package storetest

import (
	"bytes"
	"testing"

	"github.com/orrery-run/orrery/store"
)

// Fabric (protocol F): exactly-once delivery per (destination, message id).
func fabricTests() []testCase {
	return []testCase{
		{"SendEnqueuesOnceAndRetryIsAlreadyEnqueued", testSend},
		{"SendToArchivedOrUnknownWorldIsATypedErrorPausedAccepts", testSendRefused},
		{"RetriedSendOfADeliveredMessageIsAlreadyEnqueuedAfterItsDestinationArchived", testSendRetryAfterDestArchived},
	}
}

func testSend(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("dest")
	f.world("other")
	f.enqueue("dest", "event", "", nil)
	r, err := f.s.Send(bg, "dest", "m1", store.InboxItem{Payload: []byte("hello")})
	must(t, err, "Send")
	if r.Status != store.FabricOK || r.Seq == 0 {
		t.Fatalf("Send = %+v, want ok with a seq", r)
	}
	items := f.inbox("dest")
	if len(items) != 2 || items[1].Seq != r.Seq || items[1].Kind != "fabric" || !bytes.Equal(items[1].Payload, []byte("hello")) {
		t.Fatalf("inbox after Send = %+v", items)
	}
	again, err := f.s.Send(bg, "dest", "m1", store.InboxItem{Payload: []byte("retry")})
	must(t, err, "retried Send")
	if again.Status != store.FabricAlreadyEnqueued || again.Seq != r.Seq {
		t.Fatalf("retried Send = %+v, want already_enqueued at %d", again, r.Seq)
	}
	if n := len(f.inbox("dest")); n != 2 {
		t.Fatalf("a retried Send enqueued: %d items", n)
	}
	r2, err := f.s.Send(bg, "dest", "m2", store.InboxItem{Payload: []byte("next")})
	must(t, err, "Send m2")
	if r2.Status != store.FabricOK || r2.Seq <= r.Seq {
		t.Fatalf("Send m2 = %+v after %+v", r2, r)
	}
	// Dedupe is per destination.
	if r3, err := f.s.Send(bg, "other", "m1", store.InboxItem{}); err != nil || r3.Status != store.FabricOK {
		t.Fatalf("m1 to another world = %+v, %v", r3, err)
	}
}

// Send is a producer's input: a paused destination accepts it (it waits in
// the inbox), an archived or unknown one is a typed error, never a silent
// drop, and a refused message is not recorded as delivered.
func testSendRefused(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.Send(bg, "nowhere", "m1", store.InboxItem{})
	wantErr(t, err, store.ErrWorldNotFound, "Send to an unknown world")
	f.world("paused")
	f.setStatus("paused", store.WorldPaused, "maintenance")
	r, err := f.s.Send(bg, "paused", "m1", store.InboxItem{Payload: []byte("x")})
	if err != nil || r.Status != store.FabricOK {
		t.Fatalf("Send to a paused world = %+v, %v; want ok", r, err)
	}
	if items := f.inbox("paused"); len(items) != 1 || items[0].Seq != r.Seq {
		t.Fatalf("paused world's inbox = %+v", items)
	}
	f.world("archived")
	f.setStatus("archived", store.WorldArchived, "done")
	_, err = f.s.Send(bg, "archived", "m1", store.InboxItem{Payload: []byte("x")})
	wantErr(t, err, store.ErrWorldArchived, "Send to an archived world")
	_, err = f.s.Send(bg, "archived", "m1", store.InboxItem{Payload: []byte("x")})
	wantErr(t, err, store.ErrWorldArchived, "the same Send again (not recorded as delivered)")
	if n := len(f.inbox("archived")); n != 0 {
		t.Fatalf("refused Send enqueued %d items", n)
	}
}

// A send whose answer was lost is retried until its outcome is known. If
// the destination handled the message and archived itself in between, the
// retry must still learn the message was delivered: refused as archived,
// the sender would take an error receipt and compensate for a message that
// took effect (money created in the ledger).
func testSendRetryAfterDestArchived(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("b", "B")
	first, err := f.s.Send(bg, "b", "msg-1", store.InboxItem{Payload: []byte("deposit")})
	must(t, err, "Send")
	f.setStatus("b", store.WorldArchived, "closed")
	again, err := f.s.Send(bg, "b", "msg-1", store.InboxItem{Payload: []byte("deposit")})
	if err != nil || again.Status != store.FabricAlreadyEnqueued || again.Seq != first.Seq {
		t.Fatalf("retried Send of a delivered message to a world archived since = %+v, %v; want already_enqueued at seq %d", again, err, first.Seq)
	}
	// A new message to the archived world is refused as before.
	_, err = f.s.Send(bg, "b", "msg-2", store.InboxItem{Payload: []byte("late")})
	wantErr(t, err, store.ErrWorldArchived, "Send of a new message to an archived world")
}
