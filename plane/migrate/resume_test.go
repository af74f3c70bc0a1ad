package migrate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/migrate"
	"github.com/orrery-run/orrery/store"
)

// cutTarget is a target whose import is cut after its first `after`
// batches: the next one either fails before writing, or commits and then
// answers an error, as a connection dropped after the COMMIT does (the
// lost answer).
type cutTarget struct {
	store.Store
	after     int
	committed bool // the cut batch commits
	batches   int
}

var errCut = errors.New("connection lost")

func (c *cutTarget) Import(ctx context.Context, batch []store.PortRecord) error {
	c.batches++
	if c.batches <= c.after {
		return c.Store.(store.Importer).Import(ctx, batch)
	}
	if c.committed && c.batches == c.after+1 {
		if err := c.Store.(store.Importer).Import(ctx, batch); err != nil {
			return err
		}
	}
	return errCut
}

func (c *cutTarget) Empty(ctx context.Context) (bool, error) {
	return c.Store.(store.Importer).Empty(ctx)
}

func (c *cutTarget) FinishImport(ctx context.Context) error {
	return c.Store.(store.Importer).FinishImport(ctx)
}

// A copy cut after some batches, its last batch committed or not, is run
// again with Resume and completes: every check of Verify passes, on
// SQLite to PostgreSQL and SQLite to SQLite. Without Resume the target is
// refused as not empty.
func TestAnInterruptedCopyResumesToAVerifiedCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := open(t, ctx, testrig.SQLite)
	generate(t, ctx, src, 40)
	for _, backend := range []string{testrig.Postgres, testrig.SQLite} {
		for _, lost := range []bool{true, false} {
			name := backend + "/failed"
			if lost {
				name = backend + "/answer-lost"
			}
			t.Run(name, func(t *testing.T) {
				dst := open(t, ctx, backend)
				cut := &cutTarget{Store: dst, after: 3, committed: lost}
				_, err := migrate.Copy(ctx, src, cut, migrate.CopyOptions{Batch: 40})
				if !errors.Is(err, errCut) {
					t.Fatalf("the cut copy: %v, want the cut", err)
				}
				if cut.batches != 4 {
					t.Fatalf("the cut copy sent %d batches, want 4", cut.batches)
				}
				if _, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{Batch: 40}); !errors.Is(err, migrate.ErrTargetNotEmpty) {
					t.Fatalf("a copy again without Resume: %v, want ErrTargetNotEmpty", err)
				}
				// Other batch bounds than the cut copy's: batches mix
				// records already there with records not.
				res, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{Batch: 55, Resume: true})
				if err != nil {
					t.Fatalf("the resumed copy: %v", err)
				}
				if res.Worlds != 40 {
					t.Errorf("the resumed copy went through %d worlds, want 40", res.Worlds)
				}
				mustVerify(t, ctx, src, dst, migrate.VerifyOptions{})
				// Resumed once more, it finds everything there.
				if _, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{Resume: true}); err != nil {
					t.Fatalf("a resume of a complete copy: %v", err)
				}
				mustVerify(t, ctx, src, dst, migrate.VerifyOptions{})
			})
		}
	}
}

// A resume never overwrites: a target holding one of the source's worlds
// as another world is a conflict, and the batch with it writes nothing.
func TestAResumeIntoAnotherStoreIsAConflict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := open(t, ctx, testrig.SQLite)
	generate(t, ctx, src, 10)
	dst := open(t, ctx, testrig.SQLite)
	if _, err := dst.CreateWorld(ctx, "another-universe", "w000000", nil); err != nil {
		t.Fatal(err)
	}
	_, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{Resume: true})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a resume into a target holding another w000000: %v, want ErrConflict", err)
	}
	if w, err := dst.GetWorld(ctx, "w000000"); err != nil || w.Universe != "another-universe" {
		t.Fatalf("w000000 on the target = %+v, %v; want the target's own", w, err)
	}
	if _, err := dst.GetWorld(ctx, "w000001"); !errors.Is(err, store.ErrWorldNotFound) {
		t.Fatalf("the refused batch wrote w000001: %v", err)
	}
}
