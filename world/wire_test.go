package world_test

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

func cborKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := event.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := event.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

func TestFabricSendParamsAndReceiptHaveExactlyTheSeedFields(t *testing.T) {
	p := world.FabricSendParams{DestUniverse: "u", DestWorld: "d", Mode: world.FabricInbox, Schema: "s",
		ValueCBOR: []byte{1}, Inbox: "i", PayloadCBOR: []byte{2}, Headers: map[string]string{"h": "v"}, CorrelationID: "c"}
	want := []string{"correlation_id", "dest_universe", "dest_world", "headers", "inbox", "mode", "payload_cbor", "schema", "value_cbor"}
	if got := cborKeys(t, p); !slices.Equal(got, want) {
		t.Fatalf("sys/FabricSendParams@1 fields %v, want %v", got, want)
	}
	if got := cborKeys(t, world.FabricSendParams{DestWorld: "d", Mode: world.FabricTypedEvent}); !slices.Equal(got, []string{"dest_world", "mode"}) {
		t.Fatalf("optional fields not omitted: %v", got)
	}
	r := world.FabricSendReceipt{Status: world.FabricStatusOK, MessageID: "m", DestWorld: "d", EnqueuedSeq: world.SeqBytes(9)}
	if got := cborKeys(t, r); !slices.Equal(got, []string{"dest_world", "enqueued_seq", "message_id", "status"}) {
		t.Fatalf("sys/FabricSendReceipt@1 fields %v", got)
	}
	if (world.FabricSendParams{}).WorldType() != "sys/FabricSendParams@1" || (world.FabricSendReceipt{}).WorldType() != "sys/FabricSendReceipt@1" {
		t.Fatal("schema names")
	}
}

func TestHTTPRequestParamsFields(t *testing.T) {
	p := world.HTTPRequest{Method: "GET", URL: "u", Headers: map[string][]string{"a": {"b"}}, Body: []byte{1}, TimeoutMs: 5, MaxResponseBytes: 6}
	want := []string{"body", "headers", "max_response_bytes", "method", "timeout_ms", "url"}
	if got := cborKeys(t, p); !slices.Equal(got, want) {
		t.Fatalf("http.request params fields %v, want %v", got, want)
	}
}

// TestFabricSendKeepsCausalMetadataEndToEnd sends from world a (in a call,
// whose id is the correlation id) to world b through the fabric adapter's
// path, and back: b's handler sees from_world, from_height and the
// correlation id, the message id is the intent hash, and a's receipt
// carries sys/FabricSendReceipt@1.
func TestFabricSendKeepsCausalMetadataEndToEnd(t *testing.T) {
	a := newFeeder(t, effectsDef(), "world-a")
	a.event(Deposit{Amount: 1})
	sent := a.call("call-7", Tell{Dest: "world-b", Text: "hi"})
	wantOutcome(t, sent, world.OutcomeOK)
	if len(sent.Intents) != 1 || sent.Intents[0].Kind != world.KindFabricSend {
		t.Fatalf("intents %v, want one fabric.send", sent.Intents)
	}
	it := sent.Intents[0]
	var p world.FabricSendParams
	if err := world.Decode(it.Params, &p); err != nil {
		t.Fatal(err)
	}
	if p.DestWorld != "world-b" || p.Mode != world.FabricTypedEvent || p.Schema != "world_test.Note" || p.CorrelationID != "call-7" {
		t.Fatalf("params %+v", p)
	}

	// The plane's fabric adapter is handed the intent as the step made it:
	// its origin is the text form of the sender's world and height.
	if origin, err := vocab.ParseOrigin(it.Origin); err != nil || origin != (vocab.Origin{World: "world-a", Height: 2}) {
		t.Fatalf("origin %q: %v %v", it.Origin, origin, err)
	}
	d, err := world.FabricMessage(it)
	if err != nil {
		t.Fatal(err)
	}
	if d.MessageID != it.IntentHash || d.DestWorld != "world-b" {
		t.Fatalf("delivery %+v: message_id must default to the intent hash", d)
	}
	b := newFeeder(t, effectsDef(), "world-b")
	got := b.feed(vocab.KindFabric, d.Payload)
	wantOutcome(t, got, world.OutcomeOK)
	v := b.value()
	if !slices.Equal(v.Notes, []string{"hi"}) {
		t.Fatalf("notes %v", v.Notes)
	}
	if want := (world.Cause{FromWorld: "world-a", FromHeight: 2, CorrelationID: "call-7"}); v.Causes[0] != want {
		t.Fatalf("cause %+v, want %+v", v.Causes[0], want)
	}
	var rec struct {
		Input struct {
			Cause world.Cause `cbor:"cause"`
		} `cbor:"input"`
	}
	decodePayload(t, got.Record, &rec)
	if rec.Input.Cause != v.Causes[0] {
		t.Fatalf("journaled cause %+v", rec.Input.Cause)
	}

	body, _ := event.Marshal(world.FabricSendReceipt{Status: world.FabricStatusOK, MessageID: d.MessageID, DestWorld: "world-b", EnqueuedSeq: world.SeqBytes(1)})
	back := a.receipt(world.Receipt{IntentHash: it.IntentHash, Kind: world.KindFabricSend, Status: vocab.ReceiptOK, Body: body})
	wantOutcome(t, back, world.OutcomeOK)
	var fr world.FabricSendReceipt
	if err := world.Decode(body, &fr); err != nil || fr.MessageID != it.IntentHash {
		t.Fatalf("receipt body %+v %v", fr, err)
	}
}

func TestEncodersRejectWhatTheKernelWouldRefuse(t *testing.T) {
	if _, err := world.EncodeReceipt(world.Receipt{IntentHash: "x", Kind: "k", Status: vocab.ReceiptOK}); !errors.Is(err, world.ErrMalformedInput) {
		t.Fatalf("bad hash: %v", err)
	}
	h := world.IntentHash("w", 1, 0, "k", nil)
	if _, err := world.EncodeReceipt(world.Receipt{IntentHash: h, Kind: "k", Status: "maybe"}); err == nil {
		t.Fatal("bad status accepted")
	}
	if _, err := world.EncodeReceipt(world.Receipt{IntentHash: h, Kind: "k", Status: vocab.ReceiptOK, Body: []byte{0xff}}); err == nil {
		t.Fatal("non-CBOR body accepted")
	}
	if _, err := world.EncodeEvent(3); err == nil {
		t.Fatal("an unnamed type has no routing name")
	}
	if _, err := world.EncodeEvent(&Deposit{}); err == nil {
		t.Fatal("a pointer was given a routing name")
	}
	if _, err := world.EncodeCall("", Deposit{}); err == nil {
		t.Fatal("a call without id")
	}
	if _, err := world.EncodeFabric(world.FabricSendParams{DestWorld: "d", Mode: "carrier-pigeon"}, vocab.Origin{}, "m"); !errors.Is(err, world.ErrMalformedInput) {
		t.Fatalf("bad mode: %v", err)
	}
}

// TestFabricMessageRefusesAMalformedOrigin: the origin becomes the
// message's from_world and from_height, so an intent whose origin does not
// parse has no delivery (a typed error, never a message from nowhere).
func TestFabricMessageRefusesAMalformedOrigin(t *testing.T) {
	params, err := event.Marshal(world.FabricSendParams{DestWorld: "d", Mode: world.FabricInbox, Inbox: "in"})
	if err != nil {
		t.Fatal(err)
	}
	it := vocab.Intent{IntentHash: world.IntentHash("w", 1, 0, world.KindFabricSend, params), Kind: world.KindFabricSend, Params: params}
	for _, origin := range []string{"", "w", "w@x"} {
		it.Origin = origin
		if _, err := world.FabricMessage(it); !errors.Is(err, vocab.ErrOrigin) {
			t.Fatalf("origin %q: %v, want ErrOrigin", origin, err)
		}
	}
	it.Origin = "w@1"
	if d, err := world.FabricMessage(it); err != nil || d.DestWorld != "d" || d.MessageID != it.IntentHash {
		t.Fatalf("origin w@1: %+v, %v", d, err)
	}
}

// TestNamedEncodersMatchTheTypedOnes: an input named at run time, with a
// value that encodes as the Go type does, is byte for byte the payload
// EncodeEvent and EncodeCall build, and the kernel routes it to the
// handler of that name.
func TestNamedEncodersMatchTheTypedOnes(t *testing.T) {
	name, err := world.TypeName(Deposit{})
	if err != nil {
		t.Fatal(err)
	}
	value := map[string]any{"Amount": int64(7)}
	typed, err := world.EncodeEvent(Deposit{Amount: 7})
	if err != nil {
		t.Fatal(err)
	}
	named, err := world.EncodeEventNamed(name, value)
	if err != nil {
		t.Fatal(err)
	}
	if string(named) != string(typed) {
		t.Fatalf("EncodeEventNamed = %x, EncodeEvent = %x", named, typed)
	}
	typedCall, err := world.EncodeCall("c1", Deposit{Amount: 7})
	if err != nil {
		t.Fatal(err)
	}
	namedCall, err := world.EncodeCallNamed("c1", name, value)
	if err != nil {
		t.Fatal(err)
	}
	if string(namedCall) != string(typedCall) {
		t.Fatalf("EncodeCallNamed = %x, EncodeCall = %x", namedCall, typedCall)
	}

	f := newFeeder(t, accountDef(), "acct")
	if res := f.feed(vocab.KindEvent, named); res.Outcome != world.OutcomeOK {
		t.Fatalf("named deposit: %s %v", res.Outcome, res.Err)
	}
	balance, err := world.TypeName(Balance{})
	if err != nil {
		t.Fatal(err)
	}
	call, err := world.EncodeCallNamed("c2", balance, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := f.feed(vocab.KindCall, call)
	var got int64
	if res.Reply == nil || res.Reply.Err != nil || world.Decode(res.Reply.Value, &got) != nil || got != 7 {
		t.Fatalf("named call's reply: %+v", res.Reply)
	}
}

// TestNamedEncodersRejectNamesNoHandlerCanHave: an empty name, invalid
// UTF-8, the reserved "sys/" prefix, a value that is not canonical CBOR
// material and a call without id are refused as malformed input.
func TestNamedEncodersRejectNamesNoHandlerCanHave(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{
		{"", 1},
		{"bad\xff", 1},
		{"sys/Receipt@1", 1},
		{"sys/Mine", 1},
		{"ok.Name", func() {}},
	} {
		if _, err := world.EncodeEventNamed(tc.name, tc.value); !errors.Is(err, world.ErrMalformedInput) {
			t.Errorf("EncodeEventNamed(%q, %T) = %v, want ErrMalformedInput", tc.name, tc.value, err)
		}
		if _, err := world.EncodeCallNamed("c", tc.name, tc.value); !errors.Is(err, world.ErrMalformedInput) {
			t.Errorf("EncodeCallNamed(%q, %T) = %v, want ErrMalformedInput", tc.name, tc.value, err)
		}
	}
	if _, err := world.EncodeCallNamed("", "ok.Name", 1); !errors.Is(err, world.ErrMalformedInput) {
		t.Errorf("a call without id: %v", err)
	}
}
