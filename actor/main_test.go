package actor_test

import (
	"testing"

	"github.com/orrery-run/orrery/internal/leaktest"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// process goroutine must be gone once its System is closed (INV-1).
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
