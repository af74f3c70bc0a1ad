package cli

import (
	"net/http"
	"testing"

	"github.com/orrery-run/orrery/api"
)

// A start refused because no live node carries the workflow version is a
// refused state: exit 4, as the operator's guide says.
func TestVersionNotCarriedExitsConflict(t *testing.T) {
	code, ok := apiExitCode(&api.Error{Status: http.StatusConflict, Code: api.CodeVersionNotCarried})
	if !ok || code != ExitConflict {
		t.Fatalf("version_not_carried exits %d (%v), want %d", code, ok, ExitConflict)
	}
}
