package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Checkpoints. SQLite's automatic checkpoint runs inside the COMMIT that
// crosses the WAL size threshold, on the committing connection: that group
// (and every caller in it) would wait for pages to be copied into the
// database file and for the file's fsync. So the write connection runs with
// wal_autocheckpoint=0, and this goroutine checkpoints instead, PASSIVE
// (never blocking the writer or the readers), from the read pool, at most
// once per checkpointInterval and only after commits.
//
// A PASSIVE checkpoint copies the WAL into the database file but does not
// make the next writer start the WAL over: that happens only when no
// reader still reads from the WAL, which under steady reads and writes is
// never. The file then grows for as long as the load lasts (past 250 MiB
// in the bench's workflow run), and the first commit that does restart it
// truncates it to journal_size_limit on the commit path: ~100 ms for that
// commit, and for every caller queued behind it. So once a PASSIVE
// checkpoint has copied the whole WAL and it holds more than
// walRestartFrames frames, the checkpointer runs a RESTART checkpoint:
// it takes the write lock (waiting, with the busy handler, for a gap
// between the committer's transactions), copies what was committed since
// and waits for the readers still on the WAL to finish, so that the next
// commit writes at the start of the file. The writer waits for that (a
// few milliseconds: the copying was done; at most restartBusy, after
// which the RESTART gives up until the next interval), once per
// walRestartFrames frames, instead of for a truncation; the file stays
// near journal_size_limit.

const checkpointInterval = 100 * time.Millisecond

// walRestartFrames is journal_size_limit (64 MiB) in frames of the default
// 4 KiB page.
const walRestartFrames = 64 << 20 / 4096

func (s *backend) checkpointer() {
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
		s.checkpoint(context.Background())
	}
}

// checkpoint runs one PASSIVE checkpoint and, when it copied a WAL larger
// than s.walRestart frames entirely, a RESTART one. It reports whether it
// restarted the WAL.
func (s *backend) checkpoint(ctx context.Context) (restarted bool) {
	busy, log, done, err := walCheckpoint(ctx, s.rdb, "PASSIVE")
	if err != nil {
		return false
	}
	s.stats.checkpoints.Add(1)
	if busy != 0 || done != log || log <= s.walRestart {
		return false
	}
	if ok, err := s.restartWAL(ctx); err != nil || !ok {
		return false // the write lock or a reader outlasted restartBusy: the next interval tries again
	}
	s.stats.walRestarts.Add(1)
	return true
}

// restartBusy bounds how long a RESTART checkpoint waits for the write
// lock and then, holding it, for the readers still on the WAL (a restore
// reading a long journal tail can take 100 ms): the committer waits at
// most about this long, and a RESTART that would take longer gives up
// and is tried again at the next interval.
const restartBusy = 20 * time.Millisecond

// restartWAL runs a RESTART checkpoint on a read connection of its own,
// whose busy timeout is restartBusy for the call. It reports whether the
// checkpoint completed (the next commit starts the WAL over).
func (s *backend) restartWAL(ctx context.Context) (bool, error) {
	conn, err := s.rdb.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", restartBusy.Milliseconds())); err != nil {
		return false, err
	}
	defer conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout = %d", s.cfg.busyTimeout.Milliseconds()))
	busy, _, _, err := walCheckpoint(ctx, conn, "RESTART")
	return err == nil && busy == 0, err
}

// walCheckpoint runs PRAGMA wal_checkpoint(mode) on q (the read pool, or
// one of its connections).
func walCheckpoint(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, mode string) (busy, log, done int, err error) {
	err = q.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &log, &done)
	return busy, log, done, err
}

// pokeCheckpointer tells the checkpointer the WAL grew.
func (s *backend) pokeCheckpointer() {
	select {
	case s.ckptPoke <- struct{}{}:
	default:
	}
}
