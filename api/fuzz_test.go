package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

const fuzzToken = "fuzz-token"

// durable is what a request could have written: the worlds, and each
// one's status, inbox head and journal head.
type durable struct {
	worlds map[string]string // id → universe/status
	inbox  map[string]uint64
	heads  map[string]uint64
}

func (d durable) equal(o durable) bool {
	return maps.Equal(d.worlds, o.worlds) && maps.Equal(d.inbox, o.inbox) && maps.Equal(d.heads, o.heads)
}

func (d durable) String() string {
	return fmt.Sprintf("worlds %v inbox %v heads %v", d.worlds, d.inbox, d.heads)
}

// quiesce waits until every active world's inbox is drained (a host may
// still be working on input an earlier request enqueued), then reads what
// a request could write.
func (r *rig) quiesce(t testing.TB) durable {
	t.Helper()
	var d durable
	testrig.WaitFor(t, "the plane to drain every active world", 2*time.Minute, 5*time.Millisecond, func() (bool, error) {
		d = durable{worlds: map[string]string{}, inbox: map[string]uint64{}, heads: map[string]uint64{}}
		busy := false
		for _, u := range []string{universe, other} {
			ws, err := r.Store.ListWorlds(r.Ctx, u, "")
			if err != nil {
				return false, err
			}
			for _, w := range ws {
				d.worlds[w.ID] = w.Universe + "/" + string(w.Status)
				items, err := r.Store.ReadInbox(r.Ctx, w.ID, 0, 0)
				if err != nil {
					return false, err
				}
				if len(items) > 0 {
					d.inbox[w.ID] = items[len(items)-1].Seq
				}
				cur, err := r.Store.Cursor(r.Ctx, w.ID)
				if err != nil {
					return false, err
				}
				if d.heads[w.ID], err = r.Store.Head(r.Ctx, w.ID); err != nil {
					return false, err
				}
				busy = busy || (w.Status == store.WorldActive && cur < d.inbox[w.ID])
			}
		}
		// Runs: a request writes a run's record (a start) or an item of
		// its inbox (a start, a signal, a control request). Its status and
		// journal are the workflow worker's, which moves on by itself.
		runs, err := r.Store.ListWorlds(r.Ctx, workflow.Universe("payout"), "")
		if err != nil {
			return false, err
		}
		for _, w := range runs {
			d.worlds[w.ID] = w.Universe
			items, err := r.Store.ReadInbox(r.Ctx, w.ID, 0, 0)
			if err != nil {
				return false, err
			}
			if len(items) > 0 {
				d.inbox[w.ID] = items[len(items)-1].Seq
			}
		}
		return !busy, nil
	})
	return d
}

// FuzzHandlers sends arbitrary method, path, content type, body and token
// combinations to a server over a running plane. Whatever comes in, the
// answer is 2xx or a typed 4xx (never a panic or a 5xx, except the 504 of
// a call that honestly ran out of time), a 4xx body is a typed error, and
// a refused request writes nothing: the worlds, inbox heads and journal
// heads are as before (a call the world's handler failed, 422, did run).
func FuzzHandlers(f *testing.F) {
	ev := func(v any) string {
		b, err := world.EncodeEvent(v)
		if err != nil {
			f.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	call := func(id string, v any) string {
		b, err := world.EncodeCall(id, v)
		if err != nil {
			f.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	add, get := typeName(f, Add{}), typeName(f, Get{})
	const js, tok = "application/json", fuzzToken
	type seed struct{ method, path, ct, body, token string }
	seeds := []seed{
		{"GET", "/healthz", "", "", ""},
		{"GET", "/readyz", "", "", ""},
		{"GET", "/metrics", "", "", tok},
		{"GET", "/metrics", "", "", ""},
		{"POST", "/v1/worlds", js, `{"id":"fz-new","universe":"u"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"fz-1","universe":"v"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"fz-2","universe":"nowhere"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"","universe":"u"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"` + strings.Repeat("x", 300) + `","universe":"u"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"a\u0000b","universe":"u"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"fz-3","universe":"u"}`, ""},
		{"POST", "/v1/worlds", js, `{"id":"fz-3","universe":"u"}`, "wrong"},
		{"POST", "/v1/worlds", js, `{"id":"fz-3","universe":"u","x":1}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"fz-3","universe":"u"}{}`, tok},
		{"POST", "/v1/worlds", js, `{"id":["fz-3"],"universe":"u"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"fz-3",`, tok},
		{"POST", "/v1/worlds", js, "{\"id\":\"\xff\xfe\",\"universe\":\"u\"}", tok},
		{"POST", "/v1/worlds", "text/plain", `{"id":"fz-3","universe":"u"}`, tok},
		{"POST", "/v1/worlds", js, `{"id":"fz-3","universe":"u","pad":"` + strings.Repeat("p", 5000) + `"}`, tok},
		{"GET", "/v1/worlds?universe=u&status=active", "", "", tok},
		{"GET", "/v1/worlds?status=zombie", "", "", tok},
		{"GET", "/v1/worlds/fz-1", "", "", tok},
		{"GET", "/v1/worlds/missing", "", "", tok},
		{"GET", "/v1/worlds/%ff%fe", "", "", tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"` + add + `","value":{"By":2,"Key":"f"},"idempotency_key":"fk1"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"` + add + `","value":{"By":"two"}}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"` + add + `","value":{"By":1},"idempotency_key":"` + strings.Repeat("k", 600) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"` + add + `","idempotency_key":"receipt:forged"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"` + add + `","idempotency_key":"bad\udc00key"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, "{\"type\":\"" + add + "\",\"idempotency_key\":\"k\xff\xfe\"}", tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"sys/Receipt@1","value":{}}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"","value":1}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"type":"` + add + `","value":1e400}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"payload":"` + ev(Add{By: 1, Key: "p"}) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"payload":"/w=="}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"payload":"` + base64.StdEncoding.EncodeToString([]byte{0xa1, 0x61, 0x74}) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"payload":"` + call("c-in-event", Get{}) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/events", js, `{"payload":"not base64!"}`, tok},
		{"POST", "/v1/worlds/missing/events", js, `{"type":"` + add + `","value":{"By":1}}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"type":"` + get + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"type":"` + get + `","call_id":"fz-call-1","timeout_ms":20000}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"type":"` + add + `","value":{"By":1}}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"type":"nobody.Handles"}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"payload":"` + call("fz-call-2", Get{}) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"payload":"` + ev(Get{}) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"type":"` + get + `","call_id":"` + strings.Repeat("c", 600) + `"}`, tok},
		{"POST", "/v1/worlds/fz-1/calls", js, `{"type":"` + get + `","timeout_ms":"soon"}`, tok},
		{"POST", "/v1/worlds/missing/calls", js, `{"type":"` + get + `"}`, tok},
		{"GET", "/v1/worlds/fz-1/state", "", "", tok},
		{"GET", "/v1/worlds/missing/state", "", "", tok},
		{"POST", "/v1/worlds/fz-1/fork", js, `{"id":"fz-fork","height":0}`, tok},
		{"POST", "/v1/worlds/fz-1/fork", js, `{"id":"fz-fork-2","height":999}`, tok},
		{"POST", "/v1/worlds/fz-1/fork", js, `{"id":"fz-1"}`, tok},
		{"POST", "/v1/worlds/fz-1/fork", js, `{"id":"fz-fork-3","height":18446744073709551615}`, tok},
		{"POST", "/v1/worlds/fz-paused/resume", js, `{"reason":"back"}`, tok},
		{"POST", "/v1/worlds/fz-paused/pause", "", "", tok},
		{"POST", "/v1/worlds/fz-paused/calls", js, `{"type":"` + get + `"}`, tok},
		{"POST", "/v1/worlds/fz-archived/archive", js, `{"reason":"` + strings.Repeat("r", 2000) + `"}`, tok},
		{"POST", "/v1/worlds/fz-archived/resume", js, `{}`, tok},
		{"POST", "/v1/worlds/fz-archived/events", js, `{"type":"` + add + `"}`, tok},
		{"POST", "/v1/worlds/missing/pause", js, `{"reason":"x"}`, tok},
		{"GET", "/v1/worlds/fz-1/journal?after=0&limit=10", "", "", tok},
		{"GET", "/v1/worlds/fz-1/journal?after=-3", "", "", tok},
		{"GET", "/v1/worlds/fz-1/journal?limit=100000", "", "", tok},
		{"GET", "/v1/worlds/fz-1/journal?after=18446744073709551615", "", "", tok},
		{"GET", "/v1/worlds/fz-1/journal?wait_ms=1", "", "", tok},
		{"GET", "/v1/worlds/fz-1/journal?after=0&detail=true", "", "", tok},
		{"GET", "/v1/worlds/fz-1/journal?detail=yes", "", "", tok},
		{"GET", "/v1/worlds/fz-1/state?height=1", "", "", tok},
		{"GET", "/v1/worlds/fz-1/state?height=0", "", "", tok},
		{"GET", "/v1/worlds/fz-1/state?height=999", "", "", tok},
		{"GET", "/v1/worlds/fz-1/state?height=x", "", "", tok},
		{"GET", "/v1/worlds/fz-1/forks", "", "", tok},
		{"GET", "/v1/worlds/missing/forks", "", "", tok},
		{"POST", "/v1/worlds/fz-1/fork", js, `{"id":"fz-fork-1","height":1}`, tok},
		{"GET", "/v1/leases", "", "", tok},
		{"GET", "/v1/leases?worker=fuzz-host", "", "", tok},
		{"GET", "/v1/effects?world=fz-1", "", "", tok},
		{"GET", "/v1/effects", "", "", tok},
		{"GET", "/v1/effects?world=missing", "", "", tok},
		{"POST", "/v1/effects/" + strings.Repeat("0", 64) + "/retry", js, `{"reason":"x"}`, tok},
		{"POST", "/v1/effects/zz/retry", "", "", tok},
		{"POST", "/v1/effects/" + strings.Repeat("0", 64) + "/receipt", js, `{"status":"ok","body":{"a":1}}`, tok},
		{"POST", "/v1/effects/" + strings.Repeat("0", 64) + "/receipt", js, `{"status":"perhaps"}`, tok},
		{"GET", "/v1/timers?world=fz-1", "", "", tok},
		{"GET", "/v1/timers?world=" + strings.Repeat("w", 300), "", "", tok},
		{"GET", "/v1/workers", "", "", tok},
		{"GET", "/v1/queues", "", "", tok},
		{"GET", "/v1/queues?world=fz-1", "", "", tok},
		{"GET", "/v1/worlds?detail=true", "", "", tok},
		{"GET", "/v1/worlds?detail=maybe", "", "", tok},
		{"GET", "/v1/events", "", "", tok},
		{"GET", "/v1/events", "", "", ""},
		{"GET", "/v1/events?since=3", "", "", tok},
		{"POST", "/v1/events", js, `{}`, tok},
		{"GET", "/ui/", "", "", ""},
		{"POST", "/v1/workers/nobody/drain", js, `{"draining":true}`, tok},
		{"POST", "/v1/workers/nobody/drain", js, `{"draining":"yes"}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"fz-run-new","input":{"Account":"a","Amount":1}}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"fz-run","input":{"Account":"a","Amount":1}}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"fz-run","input":{"Account":"b","Amount":1}}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"fz-run-2","input":{"Account":7}}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"fz-run-2","input":{"Account":"a","Extra":1}}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"nope","id":"fz-run-2","input":null}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"fz-1","input":{}}`, tok},
		{"POST", "/v1/runs", js, `{"workflow":"payout","id":"","input":{}}`, tok},
		{"GET", "/v1/runs", "", "", tok},
		{"GET", "/v1/runs?workflow=payout&status=running", "", "", tok},
		{"GET", "/v1/runs?status=sleeping", "", "", tok},
		{"GET", "/v1/runs?workflow=nope", "", "", tok},
		{"GET", "/v1/runs/fz-run", "", "", tok},
		{"GET", "/v1/runs/fz-1", "", "", tok},
		{"GET", "/v1/runs/missing", "", "", tok},
		{"POST", "/v1/runs/fz-run/signals", js, `{"name":"other","value":true,"idempotency_key":"fs1"}`, tok},
		{"POST", "/v1/runs/fz-run/signals", js, `{"value":true}`, tok},
		{"POST", "/v1/runs/fz-run/signals", js, `{"name":"sys:x","value":1}`, tok},
		{"POST", "/v1/runs/missing/signals", js, `{"name":"approved","value":true}`, tok},
		{"POST", "/v1/runs/fz-run/pause", js, `{"reason":"fuzz"}`, tok},
		{"POST", "/v1/runs/fz-run/resume", "", "", tok},
		{"POST", "/v1/runs/fz-run-done/cancel", js, `{"reason":"x"}`, tok},
		{"POST", "/v1/runs/fz-run-done/pause", js, `{}`, tok},
		{"POST", "/v1/runs/missing/cancel", js, `{}`, tok},
		{"GET", "/v1/streams/fz-run/audit?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z", "", "", tok},
		{"GET", "/v1/streams/fz-1/audit?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z", "", "", tok},
		{"GET", "/v1/streams/fz-run/audit?from=2100-01-01T00:00:00Z&to=2000-01-01T00:00:00Z", "", "", tok},
		{"GET", "/v1/streams/fz-run/audit?from=now", "", "", tok},
		{"GET", "/v1/streams/missing/audit?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z", "", "", tok},
		{"DELETE", "/v1/worlds/fz-1", "", "", tok},
		{"PUT", "/v1/worlds", js, `{}`, tok},
		{"GET", "/v1/../v1/worlds", "", "", tok},
		{"GET", "/nothing/here", "", "", tok},
		{"OPTIONS", "*", "", "", tok},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.ct, s.body, s.token)
	}

	r := newRunsRigWith(f, rigOptions{
		store: memstore.New(), token: fuzzToken, workers: []string{"fuzz-host"}, metrics: true,
		// Short waits keep a mutated long-poll or call from stalling
		// the fuzzer; they change no answer but a call's 504.
		cfg: func(c *api.Config) {
			c.MaxBody, c.CallTimeout, c.JournalWaitMax = 4096, 10*time.Second, 100*time.Millisecond
		},
	})
	for _, id := range []string{"fz-1", "fz-paused", "fz-archived"} {
		r.Create(id, universe)
	}
	add1 := must(world.EncodeEvent(Add{By: 1, Key: "seed"}))(f)
	for _, id := range []string{"fz-1", "fz-1", "fz-paused"} {
		if _, _, err := r.Store.Enqueue(r.Ctx, id, store.InboxItem{Kind: vocab.KindEvent, Payload: add1}); err != nil {
			f.Fatal(err)
		}
	}
	r.WaitFor("fz-1 snapshotted", func() (bool, error) {
		_, ok, err := r.Store.ActiveSnapshot(r.Ctx, "fz-1")
		return ok, err
	})
	must(r.Client.Pause(r.Ctx, "fz-paused", "fuzz"))(f)
	for _, id := range []string{"fz-run", "fz-run-done"} {
		if _, _, err := r.Client.StartRun(r.Ctx, "payout", id, payout{Account: "a", Amount: 1}); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := r.Client.CancelRun(r.Ctx, "fz-run-done", "fuzz"); err != nil {
		f.Fatal(err)
	}
	must(r.Client.Archive(r.Ctx, "fz-archived", "fuzz"))(f)

	f.Fuzz(func(t *testing.T, method, path, ct, body, token string) {
		if !strings.HasPrefix(path, "/") && path != "*" {
			path = "/" + path
		}
		ctx := r.Ctx
		if strings.HasPrefix(path, "/v1/events") {
			// An event stream answers until its client goes: this one
			// goes once the stream has begun.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(r.Ctx, 100*time.Millisecond)
			defer cancel()
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://api.test"+path, strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		if path == "*" {
			req.URL.Path, req.RequestURI = "*", "*"
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		before := r.quiesce(t)
		rec := httptest.NewRecorder()
		r.Server.ServeHTTP(rec, req)
		status := rec.Code
		after := r.quiesce(t)
		// Keep the rig's one host placeable for the next input.
		if ws, err := r.Store.ListWorkers(r.Ctx); err == nil {
			for _, w := range ws {
				if w.Draining {
					if _, err := r.Store.SetDraining(r.Ctx, w.ID, false); err != nil {
						t.Fatal(err)
					}
				}
			}
		}

		switch {
		case status >= 200 && status < 300:
			return
		case status == http.StatusGatewayTimeout && strings.HasSuffix(req.URL.Path, "/calls"):
			if e := errorBody(t, rec.Body.Bytes()); e.Code != api.CodeTimeout {
				t.Fatalf("504 with code %s", e.Code)
			}
			return
		case status < 400 || status >= 500:
			t.Fatalf("%s %q: status %d: %s", method, path, status, rec.Body.Bytes())
		}
		e := errorBody(t, rec.Body.Bytes())
		if e.Code == api.CodeCallFailed {
			return // the call ran; its handler said no
		}
		if !before.equal(after) {
			t.Fatalf("%s %q refused with %d %s wrote:\nbefore %v\nafter  %v", method, path, status, e.Code, before, after)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("an error body of type %q", ct)
		}
	})
}
