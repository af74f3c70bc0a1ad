package sqlite

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// Watch hints live in this process only: the committer fires them after a
// group's COMMIT, for the requests of the group that succeeded (groupcommit.go).
// Another process writing the same file would not wake these watchers,
// which is one more reason the store assumes it is the file's only writer;
// hints are never needed for correctness (store package doc).

// Watch registers w on topics until stop is called or the store is closed.
func (s *backend) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	const op = "watch"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	return s.hub.Add(op, w, topics)
}
