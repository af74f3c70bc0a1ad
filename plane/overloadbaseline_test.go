//go:build overloadbench

package plane_test

import (
	"testing"

	"github.com/orrery-run/orrery/plane"
)

// TestOverloadBaseline is the overload run with no bound at all: the
// latency blow-up shedding exists to prevent. It is a measurement (its
// backlog takes minutes to clear on a busy box), so it is built only with
// -tags overloadbench; see bench/README.md "Overload: shedding ingress".
func TestOverloadBaseline(t *testing.T) {
	nominal, over := overloadRun(t, plane.Limits{})
	t.Logf("\n%s\n%s", nominal, over)
	if over.refused != 0 {
		t.Fatalf("%d calls refused without limits", over.refused)
	}
}
