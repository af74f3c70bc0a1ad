package leaktest

import (
	"testing"
)

// A goroutine that never ends is reported, however long the patience: the
// repeated check changes how long a leak may take to end, not whether it
// is found.
func TestFindReportsAGoroutineThatNeverEnds(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	go func() {
		close(started)
		<-stop
	}()
	<-started
	defer close(stop)
	if err := find(0); err == nil {
		t.Fatal("a goroutine blocked until the test's end was not reported")
	}
}

// With no goroutine left behind, the check passes at once.
func TestFindPassesWithNothingLeftBehind(t *testing.T) {
	if err := Find(); err != nil {
		t.Fatalf("nothing was left behind, yet: %v", err)
	}
}
