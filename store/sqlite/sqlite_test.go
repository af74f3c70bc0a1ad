package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/store"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

var bg = context.Background()

// manualClock is a store clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openTemp opens a fresh store in t's temporary directory, closed at the
// end of the test.
func openTemp(t testing.TB, opts ...Option) (*Store, *manualClock, string) {
	t.Helper()
	clock := newManualClock()
	path := filepath.Join(t.TempDir(), "orrery.db")
	s, err := Open(bg, path, append([]Option{WithClock(clock.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, clock, path
}

var _ store.Store = (*Store)(nil)
