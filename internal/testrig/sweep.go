package testrig

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// RunSweep is what the journals of a set of workflow runs show about how
// many ran at once.
type RunSweep struct {
	Most    int           // runs between RunStarted and their end at once
	Rate    float64       // runs per second, first start to last end
	MeanRun time.Duration // mean RunStarted → end
}

// SweepRuns reads the runs ids' journals from st and sweeps each run's
// RunStarted (a queued run's admission) to its end (the commit that
// freed its slot) as an interval on the store's clock, which stamps the
// commits of every process alike. A run without both is an error.
func SweepRuns(ctx context.Context, st store.Store, ids []string) (RunSweep, error) {
	type mark struct {
		at    time.Time
		delta int
	}
	var marks []mark
	var total time.Duration
	for _, id := range ids {
		evs, err := st.Read(ctx, id, 0, 256)
		if err != nil {
			return RunSweep{}, err
		}
		var start, end time.Time
		for _, e := range evs {
			switch e.EventType {
			case event.RunStarted:
				start = e.PersistedAt
			case event.RunCompleted, event.RunFailed, event.RunCancelled:
				end = e.PersistedAt
			}
		}
		if start.IsZero() || end.IsZero() {
			return RunSweep{}, fmt.Errorf("%s: no RunStarted or no end in its journal", id)
		}
		marks = append(marks, mark{start, 1}, mark{end, -1})
		total += end.Sub(start)
	}
	if len(ids) == 0 {
		return RunSweep{}, nil
	}
	// Ends before starts at one instant: an end's commit precedes the
	// admission it made room for.
	slices.SortFunc(marks, func(a, b mark) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	var f RunSweep
	cur := 0
	for _, m := range marks {
		cur += m.delta
		f.Most = max(f.Most, cur)
	}
	f.Rate = float64(len(ids)) / marks[len(marks)-1].at.Sub(marks[0].at).Seconds()
	f.MeanRun = total / time.Duration(len(ids))
	return f, nil
}
