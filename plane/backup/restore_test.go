package backup_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/backup"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// openBackup writes a backup of a SQLite store of three worlds, each with
// three effects: one done, one inflight (claimed by an adapter when the
// backup was taken) and one pending. It returns the backup's path and how
// many effects it holds open.
func openBackup(t *testing.T, ctx context.Context) (string, int) {
	t.Helper()
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "orrery.db")
	src := openSQLite(t, ctx, srcPath)
	mk := func(world, which string) vocab.Intent {
		h := world + "-" + which
		return vocab.Intent{IntentHash: h, Kind: kind, Params: []byte(h), Origin: "test", PolicyContextHash: "pch"}
	}
	epochs := map[string]uint64{}
	for w := range 3 {
		world := fmt.Sprintf("w%d", w)
		if _, err := src.CreateWorld(ctx, "u", world, nil); err != nil {
			t.Fatal(err)
		}
		l, err := src.Acquire(ctx, world, "node", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		epochs[world] = l.Epoch
		if _, err := src.Publish(ctx, world, l.Epoch, []vocab.Intent{mk(world, "done"), mk(world, "inflight")}); err != nil {
			t.Fatal(err)
		}
	}
	items, err := src.Claim(ctx, "adapter", []string{kind}, 100, time.Minute)
	if err != nil || len(items) != 6 {
		t.Fatalf("Claim = %+v, %v; want six", items, err)
	}
	for _, it := range items {
		if strings.HasSuffix(it.IntentHash, "-done") {
			if _, _, err := src.Complete(ctx, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for world, epoch := range epochs {
		if _, err := src.Publish(ctx, world, epoch, []vocab.Intent{mk(world, "pending")}); err != nil {
			t.Fatal(err)
		}
	}
	bak := filepath.Join(dir, "backup.db")
	res, err := backup.Backup(ctx, srcPath, bak, backup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Open() != 6 || res.Effects["inflight"] != 3 {
		t.Fatalf("the backup holds effects %v; want 3 inflight and 3 pending", res.Effects)
	}
	return bak, int(res.Open())
}

// watchedTarget is a restore target whose importer a test watches: before
// each batch, cut may refuse it (a lost connection, a killed restore);
// after each batch written, after sees the store as an adapter pool
// serving it would.
type watchedTarget struct {
	store.Store
	cut   func(batch []store.PortRecord) error
	after func(batch []store.PortRecord)
}

func (w *watchedTarget) Export(ctx context.Context, emit func(store.PortRecord) error) error {
	return w.Store.(store.Exporter).Export(ctx, emit)
}

func (w *watchedTarget) Empty(ctx context.Context) (bool, error) {
	return w.Store.(store.Importer).Empty(ctx)
}

func (w *watchedTarget) FinishImport(ctx context.Context) error {
	return w.Store.(store.Importer).FinishImport(ctx)
}

func (w *watchedTarget) Import(ctx context.Context, batch []store.PortRecord) error {
	if w.cut != nil {
		if err := w.cut(batch); err != nil {
			return err
		}
	}
	if err := w.Store.(store.Importer).Import(ctx, batch); err != nil {
		return err
	}
	if w.after != nil {
		w.after(batch)
	}
	return nil
}

func effects(batch []store.PortRecord) int {
	n := 0
	for _, r := range batch {
		if r.Kind == store.PortKindEffect {
			n++
		}
	}
	return n
}

// targetEffects reads every effect the target holds.
func targetEffects(t *testing.T, ctx context.Context, st store.Store) []store.PortEffect {
	t.Helper()
	var out []store.PortEffect
	err := st.(store.Exporter).Export(ctx, func(r store.PortRecord) error {
		if r.Kind == store.PortKindEffect {
			out = append(out, *r.Effect)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var errCut = errors.New("test: the restore's connection is lost")

// A restore cut short after some of the backup's effects were written
// (its process killed, its connection lost) leaves each of them held with
// the restore's reason, none pending: no adapter is handed one. It holds
// under both rules: --effects=rerun releases them only after the whole
// copy succeeded.
func TestARestoreCutShortLeavesNoEffectOfTheBackupPending(t *testing.T) {
	ctx := context.Background()
	bak, open := openBackup(t, ctx)
	for _, backend := range []string{testrig.SQLite, testrig.Postgres} {
		for _, rule := range []backup.Effects{backup.EffectsHold, backup.EffectsRerun} {
			// Cut after the first world's done and inflight effects are
			// written, and after the last effect.
			for _, cutAfter := range []int{2, 9} {
				t.Run(fmt.Sprintf("%s/%s/after-%d-effects", backend, rule, cutAfter), func(t *testing.T) {
					st := testrig.Open(t, ctx, backend, &testrig.Clock{})
					written := 0
					target := &watchedTarget{Store: st, cut: func(batch []store.PortRecord) error {
						if written >= cutAfter {
							return errCut
						}
						written += effects(batch)
						return nil
					}}
					_, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{Effects: rule, Batch: 1, TempDir: t.TempDir()})
					if !errors.Is(err, errCut) {
						t.Fatalf("Restore = %v; want the cut", err)
					}
					got := targetEffects(t, ctx, st)
					if len(got) != cutAfter {
						t.Fatalf("the target holds %d effects; want the %d written before the cut", len(got), cutAfter)
					}
					heldN := 0
					for _, e := range got {
						want := "held"
						if strings.HasSuffix(e.IntentHash, "-done") {
							want = "done"
						}
						if e.State != want {
							t.Fatalf("effect %s is %s in the target after a restore cut short; want %s", e.IntentHash, e.State, want)
						}
						if want == "held" {
							heldN++
							if !strings.HasPrefix(e.HoldReason, "restored from backup "+bak) || e.HeldAt == nil {
								t.Fatalf("effect %s is held without the restore's reason or a time: %+v", e.IntentHash, e)
							}
						}
					}
					if heldN == 0 || cutAfter == 9 && heldN != open {
						t.Fatalf("held %d effects (the backup has %d open): the test proves nothing", heldN, open)
					}
					if items, err := st.Claim(ctx, "adapter", []string{kind}, 100, time.Minute); err != nil || len(items) != 0 {
						t.Fatalf("Claim after a restore cut short = %+v, %v; want nothing", items, err)
					}
				})
			}
		}
	}
}

// An adapter pool claiming from the target while a restore writes it is
// handed nothing of the backup's: every open effect is held as it is
// written, not after the whole copy. With --effects=rerun they are claimable
// once the restore returns.
func TestAnAdapterClaimingDuringARestoreIsHandedNothing(t *testing.T) {
	ctx := context.Background()
	bak, open := openBackup(t, ctx)
	for _, backend := range []string{testrig.SQLite, testrig.Postgres} {
		for _, rule := range []backup.Effects{backup.EffectsHold, backup.EffectsRerun} {
			t.Run(backend+"/"+string(rule), func(t *testing.T) {
				st := testrig.Open(t, ctx, backend, &testrig.Clock{})
				var claimed []string
				target := &watchedTarget{Store: st, after: func([]store.PortRecord) {
					items, err := st.Claim(ctx, "adapter", []string{kind}, 100, time.Minute)
					if err != nil {
						t.Errorf("Claim during the restore: %v", err)
					}
					for _, it := range items {
						claimed = append(claimed, it.IntentHash)
					}
				}}
				rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{Effects: rule, Batch: 1, TempDir: t.TempDir()})
				if len(claimed) != 0 {
					t.Fatalf("an adapter was handed %v during the restore", claimed)
				}
				if err != nil || !rr.Report.OK {
					t.Fatalf("Restore = %v, %v", err, rr.Report.Err())
				}
				items, err := st.Claim(ctx, "adapter", []string{kind}, 100, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				switch rule {
				case backup.EffectsHold:
					if rr.Held != open || rr.Released != 0 || len(items) != 0 {
						t.Fatalf("held %d, released %d, claimable %d; want %d held, none claimable", rr.Held, rr.Released, len(items), open)
					}
				case backup.EffectsRerun:
					if rr.Held != 0 || rr.Released != open || len(items) != open {
						t.Fatalf("held %d, released %d, claimable %d; want all %d released and claimable", rr.Held, rr.Released, len(items), open)
					}
				}
			})
		}
	}
}

// A target a node serves (its heartbeat's promise unexpired by the
// target's clock) is refused with a typed error naming the node, and
// nothing is written; with Force the restore proceeds. A node whose promise
// ran out does not count.
func TestARestoreRefusesATargetANodeServes(t *testing.T) {
	ctx := context.Background()
	bak, open := openBackup(t, ctx)
	for _, backend := range []string{testrig.SQLite, testrig.Postgres} {
		t.Run(backend, func(t *testing.T) {
			clock := &testrig.Clock{}
			st := testrig.Open(t, ctx, backend, clock)
			if _, err := st.Heartbeat(ctx, "node-a", 4, store.AliveAs("inc-1", time.Minute)); err != nil {
				t.Fatal(err)
			}
			before := exported(t, ctx, st)
			_, err := backup.Restore(ctx, bak, st, backup.RestoreOptions{TempDir: t.TempDir()})
			var le *backup.TargetLiveError
			if !errors.Is(err, backup.ErrTargetLive) || !errors.As(err, &le) || len(le.Workers) != 1 || le.Workers[0] != "node-a" {
				t.Fatalf("Restore into a served target = %v; want a TargetLiveError naming node-a", err)
			}
			if n := exported(t, ctx, st); n != before {
				t.Fatalf("a refused restore wrote %d records", n-before)
			}
			rr, err := backup.Restore(ctx, bak, st, backup.RestoreOptions{Force: true, TempDir: t.TempDir()})
			if err != nil || !rr.Report.OK || rr.Held != open {
				t.Fatalf("Restore with Force = held %d, %v, %v; want %d held, verified", rr.Held, err, rr.Report.Err(), open)
			}

			// A node whose promise ran out by the store's clock is gone.
			clock2 := &testrig.Clock{}
			st2 := testrig.Open(t, ctx, backend, clock2)
			if _, err := st2.Heartbeat(ctx, "node-b", 4, store.AliveAs("inc-1", time.Minute)); err != nil {
				t.Fatal(err)
			}
			clock2.Advance(2 * time.Minute)
			if rr, err := backup.Restore(ctx, bak, st2, backup.RestoreOptions{TempDir: t.TempDir()}); err != nil || !rr.Report.OK {
				t.Fatalf("Restore into a store whose node's promise ran out = %v, %v", err, rr.Report.Err())
			}
		})
	}
}
