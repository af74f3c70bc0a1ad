package adapter_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// canned is a transport that answers every request without the network,
// and remembers that it was asked.
type canned struct{ asked bool }

func (c *canned) RoundTrip(r *http.Request) (*http.Response, error) {
	c.asked = true
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader([]byte("ok"))), Request: r}, nil
}

func httpSeeds(f *testing.F) {
	for _, p := range []world.HTTPRequest{
		{Method: "GET", URL: "http://example.test/"},
		{Method: "POST", URL: "https://example.test/a?b=c", Headers: map[string][]string{"X-A": {"1", "2"}}, Body: []byte("x"), TimeoutMs: 10, MaxResponseBytes: 1},
		{Method: "GET", URL: "ftp://example.test/"},
	} {
		b, err := eventMarshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xa0})
	f.Add([]byte{0xff})
}

// FuzzHTTPParams: whatever bytes a world's http.request params hold, the
// adapter never panics, answers a terminal result or a permanent error
// when DecodeHTTPRequest rejects them (without any request), and sends a
// request exactly when DecodeHTTPRequest accepts them, answered ok (a body
// over its limit truncated).
func FuzzHTTPParams(f *testing.F) {
	httpSeeds(f)
	f.Fuzz(func(t *testing.T, params []byte) {
		tr := &canned{}
		a := adapter.NewHTTP(actor.NewExecutor(1), adapter.HTTPConfig{Client: &http.Client{Transport: tr}})
		_, decErr := adapter.DecodeHTTPRequest(params)
		res, err := a.Execute(context.Background(), vocab.EffectItem{Intent: vocab.Intent{Kind: adapter.KindHTTP, Params: params}})
		if decErr != nil {
			if tr.asked || !effect.IsPermanent(err) {
				t.Fatalf("rejected params (%v): asked=%v, err=%v", decErr, tr.asked, err)
			}
			return
		}
		if !tr.asked || err != nil || res.Status != vocab.ReceiptOK {
			t.Fatalf("accepted params: asked=%v, status=%s, err=%v", tr.asked, res.Status, err)
		}
	})
}

// FuzzFabricParams: whatever a fabric.send intent's params and origin
// hold, the fabric adapter never panics and answers either an ok receipt
// (the message was delivered, at most once per message id) or a terminal
// error receipt with the seed's body; never an attempt error against a
// healthy store.
func FuzzFabricParams(f *testing.F) {
	for _, dest := range []string{"w2", "nobody"} {
		v, _ := eventMarshal(Greeting{Text: "hi"})
		b, err := eventMarshal(world.FabricSendParams{DestWorld: dest, Mode: world.FabricTypedEvent, Schema: "Greeting", ValueCBOR: v})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "w1@3")
	}
	f.Add([]byte{0xa0}, "w1@x")
	f.Add([]byte{0xf6}, "")
	f.Fuzz(func(t *testing.T, params []byte, origin string) {
		ctx := context.Background()
		st := memstore.New()
		if _, err := st.CreateWorld(ctx, "u", "w2", nil); err != nil {
			t.Fatal(err)
		}
		a := adapter.NewFabric(st)
		item := vocab.EffectItem{Intent: vocab.Intent{
			IntentHash: world.IntentHash("w1", 1, 0, adapter.KindFabric, params), Kind: adapter.KindFabric, Params: params, Origin: origin,
		}}
		for i := 0; i < 2; i++ {
			res, err := a.Execute(ctx, item)
			if err != nil {
				t.Fatalf("attempt error against a healthy store: %v", err)
			}
			body, ok := res.Body.(world.FabricSendReceipt)
			if !ok {
				t.Fatalf("body %T", res.Body)
			}
			switch {
			case res.Status == vocab.ReceiptError && body.Status == world.FabricStatusError:
			case res.Status == vocab.ReceiptOK && i == 0 && body.Status == world.FabricStatusOK:
			case res.Status == vocab.ReceiptOK && i == 1 && body.Status == world.FabricStatusAlreadyEnqueued:
			default:
				t.Fatalf("send %d: %s %+v", i, res.Status, body)
			}
		}
		items, err := st.ReadInbox(ctx, "w2", 0, 0)
		if err != nil && !errors.Is(err, store.ErrWorldNotFound) {
			t.Fatal(err)
		}
		if len(items) > 1 {
			t.Fatalf("%d deliveries of one message id", len(items))
		}
	})
}
