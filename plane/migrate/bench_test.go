package migrate_test

import (
	"context"
	"testing"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/migrate"
)

// BenchmarkCopySQLiteToPostgres measures the copy rate of a generated
// store (genWorlds worlds) from SQLite into PostgreSQL, and the
// verification's: one copy per iteration, into a fresh schema.
//
//	ORRERY_MIGRATE_WORLDS=10000 go test -run '^$' -bench CopySQLiteToPostgres -benchtime 1x ./plane/migrate/
func BenchmarkCopySQLiteToPostgres(b *testing.B) {
	ctx := context.Background()
	n := benchWorlds()
	src := testrig.Open(b, ctx, testrig.SQLite, &testrig.Clock{})
	records := generate(b, ctx, src, n)
	b.ResetTimer()
	var copySecs, verifySecs float64
	var bytes int64
	for range b.N {
		b.StopTimer()
		dst := testrig.Open(b, ctx, testrig.Postgres, &testrig.Clock{})
		b.StartTimer()
		res, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{})
		if err != nil {
			b.Fatal(err)
		}
		rep, err := migrate.Verify(ctx, src, dst, migrate.VerifyOptions{})
		if err != nil || !rep.OK {
			b.Fatalf("verification: %v %v", err, rep.Err())
		}
		copySecs += res.Elapsed.Seconds()
		verifySecs += rep.Elapsed
		bytes += res.Bytes
	}
	runs := float64(b.N)
	b.ReportMetric(float64(n)*runs/copySecs, "worlds/s")
	b.ReportMetric(float64(records)*runs/copySecs, "records/s")
	b.ReportMetric(float64(bytes)/1e6/copySecs, "MB/s")
	b.ReportMetric(float64(n)*runs/verifySecs, "verified-worlds/s")
}

// BenchmarkResumeSQLiteToPostgres measures a resumed copy's worst case:
// the copy was complete, so every batch is refused once and all its
// records are looked up (the copy's own rate is reported beside it).
//
//	ORRERY_MIGRATE_WORLDS=1000 go test -run '^$' -bench ResumeSQLiteToPostgres -benchtime 1x ./plane/migrate/
func BenchmarkResumeSQLiteToPostgres(b *testing.B) {
	ctx := context.Background()
	n := benchWorlds()
	src := testrig.Open(b, ctx, testrig.SQLite, &testrig.Clock{})
	records := generate(b, ctx, src, n)
	b.ResetTimer()
	var copySecs, resumeSecs float64
	for range b.N {
		b.StopTimer()
		dst := testrig.Open(b, ctx, testrig.Postgres, &testrig.Clock{})
		b.StartTimer()
		res, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{})
		if err != nil {
			b.Fatal(err)
		}
		again, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{Resume: true})
		if err != nil {
			b.Fatal(err)
		}
		copySecs += res.Elapsed.Seconds()
		resumeSecs += again.Elapsed.Seconds()
	}
	runs := float64(b.N)
	b.ReportMetric(float64(records)*runs/copySecs, "copy-records/s")
	b.ReportMetric(float64(records)*runs/resumeSecs, "resume-records/s")
}
