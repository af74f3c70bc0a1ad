package sqlite

import (
	"fmt"
	"testing"
)

// TestCheckpointerRestartsAFullyCopiedLargeWAL: once the WAL holds more
// than walRestart frames and a PASSIVE checkpoint has copied all of them,
// the checkpointer runs a RESTART checkpoint, and the next commit writes
// at the start of the WAL instead of after everything committed so far.
func TestCheckpointerRestartsAFullyCopiedLargeWAL(t *testing.T) {
	const limit = 8
	s, _, _ := openTemp(t, func(c *config) { c.walRestart = limit })
	for i := range 20 {
		if _, err := s.CreateWorld(bg, "u", fmt.Sprintf("w%02d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The background checkpointer runs only after commits, and its RESTART
	// gives up when it cannot get the write lock within restartBusy: on a
	// loaded machine the last commit's own checkpoint can give up, and no
	// commit follows to try again. So the test checkpoints itself, with no
	// writer running, until a restart is recorded (by it or by the
	// background checkpointer): a bound on attempts, not on time.
	for i := 0; s.Stats().WALRestarts == 0; i++ {
		if i == 1000 {
			t.Fatalf("no WAL restart in %d checkpoints after %d commits past a %d-frame limit: %+v", i, 20, limit, s.Stats())
		}
		s.b.checkpoint(bg)
	}
	if _, err := s.CreateWorld(bg, "u", "after", nil); err != nil {
		t.Fatal(err)
	}
	_, log, _, err := walCheckpoint(bg, s.b.rdb, "PASSIVE")
	if err != nil {
		t.Fatal(err)
	}
	if log > limit {
		t.Fatalf("the WAL holds %d frames after one commit past the restart, want it started over (at most %d)", log, limit)
	}
}

// TestCheckpointLeavesASmallWALAlone: under the limit, a checkpoint copies
// the WAL and restarts nothing.
func TestCheckpointLeavesASmallWALAlone(t *testing.T) {
	s, _, _ := openTemp(t, func(c *config) { c.walRestart = 1 << 20 })
	if _, err := s.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	if s.b.checkpoint(bg) {
		t.Fatal("a checkpoint restarted a WAL under its limit")
	}
	if n := s.Stats().WALRestarts; n != 0 {
		t.Fatalf("%d WAL restarts under the limit", n)
	}
}
