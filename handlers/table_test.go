package handlers_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/handlers"
	"github.com/orrery-run/orrery/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// The resolution stands alone (issue 8 item 13): a Table resolves a type to
// its one handler with the dispatcher contract §5's rules, with no runtime,
// executor or goroutine, and for any handler type, as the world kernel
// uses it.
func TestTableResolvesOneHandlerPerTypeWithoutARuntime(t *testing.T) {
	type step func(state int) int
	tab := handlers.NewTable[step]()
	if err := tab.Register("inc", func(s int) int { return s + 1 }); err != nil {
		t.Fatal(err)
	}
	if err := tab.Register("dbl", func(s int) int { return 2 * s }); err != nil {
		t.Fatal(err)
	}
	err := tab.Register("inc", func(s int) int { return s })
	if !errors.Is(err, handlers.ErrDuplicateHandler) {
		t.Errorf("second handler for inc: %v, want ErrDuplicateHandler", err)
	}
	if te := (*handlers.TypeError)(nil); !errors.As(err, &te) || te.Type != "inc" {
		t.Errorf("second handler for inc: %#v, want a *TypeError naming inc", err)
	}
	if err := tab.Register("", func(s int) int { return s }); !errors.Is(err, handlers.ErrEmptyMessageType) {
		t.Errorf("empty type: %v, want ErrEmptyMessageType", err)
	}
	tab.Freeze()
	if err := tab.Register("late", func(s int) int { return s }); !errors.Is(err, handlers.ErrRegisterAfterStart) {
		t.Errorf("register after Freeze: %v, want ErrRegisterAfterStart", err)
	}
	state := 1
	for _, typ := range []string{"inc", "dbl", "unknown", "", "inc"} {
		if h, ok := tab.Resolve(typ); ok {
			state = h(state)
		}
	}
	if state != 5 {
		t.Errorf("state %d after inc, dbl, (dropped), (dropped), inc; want 5 (the first inc handler kept)", state)
	}
	if got := tab.Types(); !slices.Equal(got, []string{"dbl", "inc"}) {
		t.Errorf("Types() = %v", got)
	}
}
