package api_test

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/world"
)

// TestEffectsShowTheirRetrySchedule: an effect whose execution failed and
// waits for its retry is listed with its failures and retry time.
func TestEffectsShowTheirRetrySchedule(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("e", universe)
	must(r.Client.Send(r.Ctx, "e", typeName(t, Pay{}), nil, "pay"))(t)
	r.WaitFor("the effect queued", func() (bool, error) {
		effects, err := r.Client.Effects(r.Ctx, "e")
		return len(effects) == 1, err
	})
	items, err := r.Store.Claim(r.Ctx, "adapter-1", []string{world.KindHTTPRequest}, 1, time.Minute)
	if err != nil || len(items) != 1 {
		t.Fatalf("claim: %+v %v", items, err)
	}
	if err := r.Store.RetryLater(r.Ctx, items[0].IntentHash, items[0].ClaimOf(), time.Hour, "connection refused"); err != nil {
		t.Fatal(err)
	}
	effects := must(r.Client.Effects(r.Ctx, "e"))(t)
	if len(effects) != 1 || effects[0].State != "pending" || effects[0].Failures != 1 || effects[0].RetryAt.IsZero() {
		t.Fatalf("after a failed execution: %+v, want pending with 1 failure and its retry time", effects)
	}
}
