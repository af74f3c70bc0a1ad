package sqlite

import (
	"context"
	"time"
)

// Checkpoints. SQLite's automatic checkpoint runs inside the COMMIT that
// crosses the WAL size threshold, on the committing connection: that group
// (and every caller in it) would wait for pages to be copied into the
// database file and for the file's fsync. So the write connection runs with
// wal_autocheckpoint=0, and this goroutine checkpoints instead, PASSIVE
// (never blocking the writer or the readers), from the read pool, at most
// once per checkpointInterval and only after commits. The WAL's size is
// then bounded by what the store commits in one interval (plus whatever a
// long-running reader pins), and journal_size_limit truncates the file
// after a reset.

const checkpointInterval = 100 * time.Millisecond

func (s *Store) checkpointer() {
	defer close(s.ckptExited)
	timer := time.NewTimer(checkpointInterval)
	defer timer.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.ckptPoke:
		}
		timer.Reset(checkpointInterval)
		select {
		case <-s.quit:
			return
		case <-timer.C:
		}
		var busy, log, done int
		if err := s.rdb.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err == nil {
			s.stats.checkpoints.Add(1)
		}
	}
}

// pokeCheckpointer tells the checkpointer the WAL grew.
func (s *Store) pokeCheckpointer() {
	select {
	case s.ckptPoke <- struct{}{}:
	default:
	}
}
