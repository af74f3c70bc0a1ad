package lab

import (
	"testing"
	"time"
)

// The lab's time zero is fixed: 2000-01-01 UTC, what every fingerprint
// was computed against, and a run starts there.
func TestEpochIsFixed(t *testing.T) {
	want := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if !Epoch().Equal(want) || Epoch().Location() != time.UTC {
		t.Fatalf("Epoch() = %v, want %v", Epoch(), want)
	}
	var at time.Time
	res := Run(Config{Seed: 1}, func(env *Env) error { at = env.Lab.Now(); return nil })
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
	if !at.Equal(want) {
		t.Errorf("a run starts at %v, want the epoch %v", at, want)
	}
}
