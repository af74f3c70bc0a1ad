package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/vocab"
)

// BenchmarkPendingEffects is the cost of the admission's per-kind count
// (read at most once a second per node) over 10,000 pending effects of
// four kinds.
func BenchmarkPendingEffects(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "p.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateWorld(ctx, "u", "w", nil); err != nil {
		b.Fatal(err)
	}
	l, err := st.Acquire(ctx, "w", "A", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for batch := range 100 {
		in := make([]vocab.Intent, 100)
		for i := range in {
			in[i] = vocab.Intent{IntentHash: fmt.Sprintf("h-%d-%d", batch, i), Kind: fmt.Sprint("k", i%4), Params: []byte("p"), Origin: "o", PolicyContextHash: "c"}
		}
		if _, err := st.Publish(ctx, "w", l.Epoch, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if m, err := st.PendingEffects(ctx); err != nil || len(m) != 4 {
			b.Fatalf("%v %v", m, err)
		}
	}
}
