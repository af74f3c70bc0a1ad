package backup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/backup"
)

// BenchmarkBackupUnderLoad backs up a generated SQLite store of
// ORRERY_BACKUP_WORLDS worlds (default 20,000; four events each, effects,
// timers, snapshots) while two writers commit (a world, its lease, three
// effects), and reports the backup's length, the writers' longest single
// write during it (and over 200 writes before it), and the restore's rate into SQLite. The figures are in
// bench/README.md.
func BenchmarkBackupUnderLoad(b *testing.B) {
	n := 20000
	if s := os.Getenv("ORRERY_BACKUP_WORLDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		srcPath := filepath.Join(dir, "orrery.db")
		src := openSQLite(b, ctx, srcPath)
		seed(b, ctx, src, n)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var longest time.Duration
		writes := 0
		measuring := true
		// The same writers' longest write over their first baseN writes,
		// before the backup: what the store's own commits cost here.
		const baseN = 200
		base := make(chan time.Duration, 1)
		baseDone := base
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					w := fmt.Sprintf("load-%d-%d", g, j)
					begin := time.Now()
					if _, err := src.CreateWorld(ctx, "u", w, nil); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(begin)
					l, err := src.Acquire(ctx, w, "writer", time.Minute)
					if err != nil {
						b.Error(err)
						return
					}
					begin = time.Now()
					if _, err := src.Publish(ctx, w, l.Epoch, intents(w, j)); err != nil {
						b.Error(err)
						return
					}
					d = max(d, time.Since(begin))
					mu.Lock()
					if measuring {
						longest = max(longest, d)
						writes++
						if baseDone != nil && writes == baseN {
							baseDone <- longest
							longest, writes, measuring, baseDone = 0, 0, false, nil
						}
					}
					mu.Unlock()
				}
			}()
		}
		baseline := <-base
		mu.Lock()
		measuring = true
		mu.Unlock()
		b.ResetTimer()
		res, err := backup.Backup(ctx, srcPath, filepath.Join(dir, "backup.db"), backup.Options{})
		b.StopTimer()
		mu.Lock()
		measuring = false
		stall, during := longest, writes
		mu.Unlock()
		close(stop)
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		target := testrig.Open(b, ctx, testrig.SQLite, &testrig.Clock{})
		rr, err := backup.Restore(ctx, res.Path, target, backup.RestoreOptions{TempDir: dir})
		if err != nil || !rr.Report.OK {
			b.Fatalf("restore: %v %v", err, rr.Report)
		}
		b.ReportMetric(float64(res.Bytes)/1e6, "MB")
		b.ReportMetric(res.Elapsed.Seconds(), "backup-s")
		b.ReportMetric(float64(stall.Microseconds())/1000, "longest-write-ms")
		b.ReportMetric(float64(during), "writes-during")
		b.ReportMetric(float64(baseline.Microseconds())/1000, "longest-write-before-ms")
		b.ReportMetric(float64(rr.Copy.Total())/rr.Copy.Elapsed.Seconds(), "restore-records/s")
		b.ReportMetric(rr.Report.Elapsed, "verify-s")
	}
}
