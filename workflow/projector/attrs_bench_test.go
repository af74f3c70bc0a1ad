package projector_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow/projector"
)

// attrRuns is a runs projection of n runs, each started with a customer
// (one of n/100) and a region (one of 4).
func attrRuns(b *testing.B, n int) *projector.Runs {
	runs := projector.NewRuns()
	for i := range n {
		p, err := event.Marshal(map[string]any{"input": i, "attrs": map[string]string{
			"customer": fmt.Sprintf("c-%d", i%(n/100)), "region": fmt.Sprintf("r-%d", i%4)}})
		if err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprintf("run-%06d", i)
		e := event.Envelope{StreamID: id, RunSeq: 1, EventType: event.RunStarted, LogicalAttemptID: 1,
			PlanID: "wf", PlanVersion: 1, Payload: p}
		e.IdempotencyKey = e.ComputeIdempotencyKey()
		if err := runs.Apply(context.Background(), id, e); err != nil {
			b.Fatal(err)
		}
	}
	return runs
}

// BenchmarkAttributeFilter finds the 100 runs of one customer among
// 100,000: through the index (Match) and, for comparison, by reading
// every row (List and compare), as a list without an index would.
func BenchmarkAttributeFilter(b *testing.B) {
	const n = 100_000
	runs := attrRuns(b, n)
	filter := map[string]string{"customer": "c-7", "region": "r-3"}
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			if got := runs.Match(filter); len(got) != 100 {
				b.Fatalf("%d runs", len(got))
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			found := 0
			for _, r := range runs.List() {
				if projector.HasAttributes(r.Attributes, filter) {
					found++
				}
			}
			if found != 100 {
				b.Fatalf("%d runs", found)
			}
		}
	})
}
