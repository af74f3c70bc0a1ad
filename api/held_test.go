package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// TestHoldAndReleaseEffect: an operator's hold keeps a claimed effect from
// its adapter (its completion is refused) and shows in the effect list,
// the queue gauges and the metrics; the release lets it run again at the
// next attempt; a done effect is 409 effect_ended (errors.Is
// store.ErrEffectEnded); an unknown one 404; the release of every held
// effect counts them.
func TestHoldAndReleaseEffect(t *testing.T) {
	r := newRig(t, rigOptions{metrics: true, token: "h"})
	r.Create("e", universe)
	must(r.Client.Send(r.Ctx, "e", typeName(t, Pay{}), nil, "pay"))(t)
	r.WaitFor("the effect queued", func() (bool, error) {
		effects, err := r.Client.Effects(r.Ctx, "e")
		return len(effects) == 1, err
	})
	items, err := r.Store.Claim(r.Ctx, "adapter", []string{"http.request"}, 1, time.Minute)
	if err != nil || len(items) != 1 {
		t.Fatalf("claim: %+v %v", items, err)
	}
	hash := items[0].IntentHash

	st, err := r.Client.HoldEffect(r.Ctx, hash, "restored from the 06:00 backup")
	if err != nil || st.State != "held" || st.HoldReason != "restored from the 06:00 backup" || st.HeldAt.IsZero() || st.World != "e" {
		t.Fatalf("hold: %+v %v", st, err)
	}
	if _, _, err := r.Store.Complete(r.Ctx, hash, items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("the adapter's completion of a held effect: %v, want ErrClaimLost", err)
	}
	effects := must(r.Client.Effects(r.Ctx, "e"))(t)
	if len(effects) != 1 || effects[0].State != "held" || effects[0].HoldReason != "restored from the 06:00 backup" || effects[0].ClaimedBy != "" {
		t.Fatalf("effects while held: %+v", effects)
	}
	held, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Status: "held"})
	if err != nil || len(held) != 1 || held[0].IntentHash != hash {
		t.Fatalf("effects?status=held: %+v %v", held, err)
	}
	if q := must(r.Client.Queues(r.Ctx))(t); q.EffectsHeld != 1 || q.EffectsInflight != 0 {
		t.Fatalf("queues while held: %+v", q)
	}
	if v, ok := metricValue(t, scrape(t, r, "h"), `orrery_queue_depth{queue="effects_held"}`); !ok || v != 1 {
		t.Fatalf("orrery_queue_depth{queue=\"effects_held\"} = %v (present %v), want 1", v, ok)
	}

	st, err = r.Client.ReleaseHeld(r.Ctx, hash, "the provider never saw it")
	if err != nil || st.State != "pending" || st.ReleaseReason != "the provider never saw it" || st.HoldReason == "" {
		t.Fatalf("release: %+v %v", st, err)
	}
	again, err := r.Store.Claim(r.Ctx, "adapter", []string{"http.request"}, 1, time.Minute)
	if err != nil || len(again) != 1 || again[0].IntentHash != hash || again[0].Attempt != items[0].Attempt+1 {
		t.Fatalf("claim after the release: %+v %v", again, err)
	}
	if _, err := r.Client.HoldEffect(r.Ctx, hash, "again"); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Client.ReleaseAllHeld(r.Ctx, "all checked"); err != nil || n != 1 {
		t.Fatalf("release of every held effect: %d %v, want 1", n, err)
	}
	again, err = r.Store.Claim(r.Ctx, "adapter", []string{"http.request"}, 1, time.Minute)
	if err != nil || len(again) != 1 {
		t.Fatalf("claim after releasing all: %+v %v", again, err)
	}
	if _, _, err := r.Store.Complete(r.Ctx, hash, again[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK}); err != nil {
		t.Fatal(err)
	}

	_, err = r.Client.HoldEffect(r.Ctx, hash, "too late")
	apiError(t, err, http.StatusConflict, api.CodeEffectEnded)
	if !errors.Is(err, store.ErrEffectEnded) {
		t.Fatalf("409 effect_ended does not match store.ErrEffectEnded: %v", err)
	}
	_, err = r.Client.ReleaseHeld(r.Ctx, hash, "too late")
	apiError(t, err, http.StatusConflict, api.CodeEffectEnded)
	_, err = r.Client.HoldEffect(r.Ctx, strings.Repeat("0", 64), "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	_, err = r.Client.ReleaseHeld(r.Ctx, strings.Repeat("0", 64), "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
}
