package orders_test

import (
	"testing"

	"github.com/orrery-run/orrery/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
