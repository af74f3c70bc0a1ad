package audit_test

import (
	"context"
	"go/build"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/examples/ledger/audit"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

const module = "github.com/orrery-run/orrery"

// TestAPoolRunsAnAdapterWrittenAgainstVocab: an adapter that knows only
// the vocabulary and world's params is registered with a pool like a
// built-in one, and its answer reaches the world as an ok receipt.
func TestAPoolRunsAnAdapterWrittenAgainstVocab(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New(memstore.WithClock(time.Now))
		if _, err := st.CreateWorld(ctx, "u1", "acct", nil); err != nil {
			t.Fatal(err)
		}
		l, err := st.Acquire(ctx, "acct", "host-1", store.MaxTTL)
		if err != nil {
			t.Fatal(err)
		}
		params, err := event.Marshal(world.HTTPRequest{Method: "POST", URL: "https://audit.example/acct"})
		if err != nil {
			t.Fatal(err)
		}
		it := vocab.Intent{
			IntentHash: world.IntentHash("acct", 1, 0, world.KindHTTPRequest, params),
			Kind:       world.KindHTTPRequest, Params: params, Origin: vocab.Origin{World: "acct", Height: 1}.String(),
		}
		if _, err := st.Publish(ctx, "acct", l.Epoch, []vocab.Intent{it}); err != nil {
			t.Fatal(err)
		}

		rec := &audit.Recorder{}
		pool, err := adapter.NewPool(st, adapter.Config{Worker: "adapters-1", Executor: actor.NewExecutor(1)},
			adapter.Register(rec, adapter.NoRetry()))
		if err != nil {
			t.Fatalf("the pool refuses the adapter: %v", err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- pool.Run(runCtx) }()
		synctest.Wait() // the pool has claimed, executed and completed, and parks again

		es, err := st.EffectStatus(ctx, it.IntentHash)
		if err != nil || es.State != vocab.EffectDone || es.Receipt == nil || es.Receipt.Status != vocab.ReceiptOK {
			t.Fatalf("effect status %+v, %v: want done with an ok receipt", es, err)
		}
		var r world.Receipt
		if err := world.Decode(es.Receipt.Payload, &r); err != nil || r.IntentHash != it.IntentHash || r.Status != vocab.ReceiptOK {
			t.Fatalf("receipt %+v, %v", r, err)
		}
		var resp world.HTTPResponse
		if err := r.Decode(&resp); err != nil || resp.Status != 204 {
			t.Fatalf("receipt body %+v, %v: want 204", resp, err)
		}
		if got := rec.Requests(); len(got) != 1 || got[0].URL != "https://audit.example/acct" {
			t.Fatalf("recorded %+v", got)
		}
		cancel()
		<-done
	})
}

// TestUnservableRequestIsPermanent: params that do not decode, or name no
// method or URL, are a Permanent error (an error receipt at once, never a
// retry) and are not recorded.
func TestUnservableRequestIsPermanent(t *testing.T) {
	rec := &audit.Recorder{}
	noURL, err := event.Marshal(world.HTTPRequest{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	for _, params := range [][]byte{{0xff}, noURL} {
		_, err := rec.Execute(context.Background(), vocab.EffectItem{Intent: vocab.Intent{Kind: world.KindHTTPRequest, Params: params}})
		if !effect.IsPermanent(err) {
			t.Fatalf("params %x: %v, want a Permanent error", params, err)
		}
	}
	if got := rec.Requests(); len(got) != 0 {
		t.Fatalf("recorded %+v", got)
	}
}

// TestAnAdapterPackageNeedsNoStore: the closure of the adapter package's
// imports (its non-test Go files, through every package of this module it
// reaches) holds vocab and world but no package under store/. The same
// walk over plane/adapter, which runs a pool over the store, finds store/:
// the check can fail.
func TestAnAdapterPackageNeedsNoStore(t *testing.T) {
	root := moduleRoot(t)
	deps := closure(t, root, module+"/examples/ledger/audit")
	for _, want := range []string{module + "/vocab", module + "/world"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("closure %v lacks %s: the walk is broken", deps, want)
		}
	}
	if s := storePackages(deps); len(s) > 0 {
		t.Fatalf("the adapter package depends on %v; an adapter must need only the vocabulary", s)
	}
	if s := storePackages(closure(t, root, module+"/plane/adapter")); len(s) == 0 {
		t.Fatal("the walk finds no store package behind plane/adapter: it cannot see a store import")
	}
}

func storePackages(deps []string) []string {
	var out []string
	for _, d := range deps {
		if d == module+"/store" || strings.HasPrefix(d, module+"/store/") {
			out = append(out, d)
		}
	}
	return out
}

// closure lists the packages of this module that pkg imports, directly or
// not (pkg included), reading the imports of their non-test files.
func closure(t *testing.T, root, pkg string) []string {
	t.Helper()
	seen := map[string]bool{}
	todo := []string{pkg}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(p, module)))
		bp, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, imp := range bp.Imports {
			if strings.HasPrefix(imp, module+"/") && !seen[imp] {
				todo = append(todo, imp)
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// moduleRoot is the directory of this module's go.mod, above the test's
// working directory (the package's own).
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+module+"\n") {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod of " + module + " above the working directory")
		}
		dir = up
	}
}
