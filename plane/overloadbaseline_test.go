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
	phases := overloadRun(t, plane.Limits{}, 16)
	t.Logf("\n%s\n%s\n%s", phases[0], phases[1], phases[2])
	for _, p := range phases {
		if p.refused != 0 {
			t.Fatalf("%s: %d calls refused without limits", p.name, p.refused)
		}
	}
}
