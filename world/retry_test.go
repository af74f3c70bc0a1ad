package world_test

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/orrery-run/orrery/world"
)

type retried struct{ Calls int }

// A handler asks for the same effects with and without its own policy.
type askRetry struct {
	Policy *world.RetryPolicy
	N      int
}

func retryDef() *world.Def[retried] {
	def := world.New[retried]("retrying", 1)
	world.On(def, func(c *world.Ctx, s *retried, a askRetry) error {
		for i := range a.N {
			req := world.HTTPRequest{Method: "POST", URL: "https://pay.example/" + strconv.Itoa(i)}
			if a.Policy != nil {
				c.Effect(world.KindHTTPRequest, req, world.WithRetry(*a.Policy))
			} else {
				c.Effect(world.KindHTTPRequest, req)
			}
		}
		s.Calls++
		return nil
	})
	return def
}

// payDef asks for two payments per Pay; policy, when set, is the
// handler's own retry policy for them (a release that added one).
func payDef(policy *world.RetryPolicy) *world.Def[retried] {
	def := world.New[retried]("paying", 1)
	world.On(def, func(c *world.Ctx, s *retried, _ Pay) error {
		for i := range 2 {
			req := world.HTTPRequest{Method: "POST", URL: "https://pay.example/" + strconv.Itoa(i)}
			if policy != nil {
				c.Effect(world.KindHTTPRequest, req, world.WithRetry(*policy))
			} else {
				c.Effect(world.KindHTTPRequest, req)
			}
		}
		s.Calls++
		return nil
	})
	return def
}

type Pay struct{}

// TestIntentRetryPolicyDoesNotChangeTheIntentHash: a journal written by
// the release before (no policy) replays identically under a handler that
// now gives its effects a policy, and hands out the same intent hashes:
// the policy travels with the intent (Intent.Retry) but is not part of
// what identifies it. An intent without a policy carries no Retry bytes.
func TestIntentRetryPolicyDoesNotChangeTheIntentHash(t *testing.T) {
	pol := world.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 1.5, MaximumInterval: time.Minute,
		MaximumAttempts: 7, NonRetryable: []string{"http.status.404"}}
	old := newFeeder(t, payDef(nil), "r-1")
	plain := old.event(Pay{})
	with := newFeeder(t, payDef(&pol), "r-1").event(Pay{})
	wantOutcome(t, plain, world.OutcomeOK)
	wantOutcome(t, with, world.OutcomeOK)
	if len(plain.Intents) != 2 || len(with.Intents) != 2 {
		t.Fatalf("%d and %d intents, want 2", len(plain.Intents), len(with.Intents))
	}
	for i := range plain.Intents {
		p, w := plain.Intents[i], with.Intents[i]
		if p.IntentHash != w.IntentHash || p.IntentHash != world.IntentHash("r-1", 1, uint64(i), p.Kind, p.Params) {
			t.Fatalf("intent %d: hash %s without a policy, %s with one; want both IntentHash of its coordinates", i, p.IntentHash, w.IntentHash)
		}
		if p.Retry != nil {
			t.Fatalf("intent %d without a policy carries %x", i, p.Retry)
		}
		got, err := world.DecodeRetryPolicy(w.Retry)
		if err != nil || got.InitialInterval != pol.InitialInterval || got.BackoffCoefficient != 1.5 || got.MaximumInterval != time.Minute ||
			got.MaximumAttempts != 7 || len(got.NonRetryable) != 1 || got.NonRetryable[0] != "http.status.404" {
			t.Fatalf("intent %d's policy decodes to %+v (%v), want %+v", i, got, err, pol)
		}
	}
	if _, err := world.Replay(payDef(&pol), "r-1", world.Snapshot{}, old.records); err != nil {
		t.Fatalf("the old journal replayed under the handler with a policy: %v", err)
	}
}

// TestInvalidIntentRetryPolicyIsAUsageError: a policy the pool could not
// follow fails the step, before anything is published.
func TestInvalidIntentRetryPolicyIsAUsageError(t *testing.T) {
	for name, pol := range map[string]world.RetryPolicy{
		"negative interval":    {InitialInterval: -time.Second},
		"coefficient below 1":  {BackoffCoefficient: 0.5},
		"negative attempts":    {MaximumAttempts: -2}, // -1 is UnlimitedAttempts
		"initial above max":    {InitialInterval: time.Minute, MaximumInterval: time.Second},
		"empty class":          {NonRetryable: []string{""}},
		"policy over its size": {NonRetryable: []string{string(bytes.Repeat([]byte("c"), world.MaxRetryPolicyBytes))}},
	} {
		t.Run(name, func(t *testing.T) {
			res := newFeeder(t, retryDef(), "r-1").event(askRetry{N: 1, Policy: &pol})
			var ue *world.UsageError
			var le *world.LimitError
			if res.Outcome == world.OutcomeOK || len(res.Intents) != 0 || !(errors.As(res.Err, &ue) || errors.As(res.Err, &le)) {
				t.Fatalf("outcome %q, %d intents, err %v; want a failed step with a usage or limit error", res.Outcome, len(res.Intents), res.Err)
			}
		})
	}
}

func TestRetryPolicyWireFormRoundTripsAndZeroIsEmpty(t *testing.T) {
	b, err := world.EncodeRetryPolicy(world.RetryPolicy{})
	if err != nil || !bytes.Equal(b, []byte{0xa0}) {
		t.Fatalf("the zero policy encodes to %x (%v), want the empty map a0", b, err)
	}
	p := world.RetryPolicy{InitialInterval: 1500 * time.Millisecond, MaximumAttempts: 1}
	b, err = world.EncodeRetryPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := world.DecodeRetryPolicy(b)
	if err != nil || got.InitialInterval != p.InitialInterval || got.MaximumAttempts != 1 {
		t.Fatalf("round trip %+v (%v), want %+v", got, err, p)
	}
}
