package migrate_test

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/plane/migrate"
)

// The rate is records over elapsed seconds, and the ETA the records left
// at that rate; without a survey's total there is no ETA.
func TestProgressRateAndETA(t *testing.T) {
	p := migrate.Progress{Records: 1000, TotalRecords: 4000, Elapsed: 2}
	if p.Rate() != 500 {
		t.Fatalf("rate %v, want 500", p.Rate())
	}
	if eta, ok := p.ETA(); !ok || eta != 6*time.Second {
		t.Fatalf("ETA %v %v, want 6s", eta, ok)
	}
	p.TotalRecords = 0
	if _, ok := p.ETA(); ok {
		t.Fatal("an ETA without a total")
	}
	if (migrate.Progress{}).Rate() != 0 {
		t.Fatal("a rate before any time passed")
	}
}
