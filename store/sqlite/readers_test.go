package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// ReadInbox reads in a transaction of the reader pool, and the statements
// it runs there are prepared through that same pool: prepared after the
// transaction took its connection, a pool of n readers deadlocked as soon
// as n ReadInbox calls met a statement not yet prepared (each held a
// reader and waited for another). With one reader, the very first call
// did. The wait is bounded by a generous context only so that a
// regression fails instead of hanging; no timing is asserted.
func TestReadInboxDoesNotWaitForTheConnectionItHolds(t *testing.T) {
	for _, readers := range []int{1, 2} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := Open(ctx, filepath.Join(t.TempDir(), "r.db"), WithReaders(readers))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if _, err := s.CreateWorld(ctx, "u", "w", nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Enqueue(ctx, "w", store.InboxItem{Kind: "event", Payload: []byte{1}}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4*readers)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				its, err := s.ReadInbox(ctx, "w", 0, 0)
				if err == nil && len(its) != 1 {
					err = store.Errorf("read_inbox", store.ErrInvalid, "w", "read %d items, want 1", len(its))
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%d readers, call %d: %v", readers, i, err)
			}
		}
		_ = s.Close()
		cancel()
	}
}
