package projector

import (
	"context"
	"errors"
	"slices"

	"github.com/orrery-run/orrery/store"
)

// Fixed returns a RunnerConfig.Streams that always lists streams.
func Fixed(streams ...string) func(context.Context) ([]string, error) {
	streams = slices.Clone(streams)
	return func(context.Context) ([]string, error) { return slices.Clone(streams), nil }
}

// WorldLister is what UniverseStreams reads: every store.Store is one.
type WorldLister interface {
	ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error)
}

// UniverseStreams returns a RunnerConfig.Streams that lists the worlds of
// the given universes (whatever their status: an archived world's journal
// still counts). A world's stream id is its id. For workflow runs, pass the
// universe of each workflow's runs.
func UniverseStreams(st WorldLister, universes ...string) func(context.Context) ([]string, error) {
	universes = slices.Clone(universes)
	return func(ctx context.Context) ([]string, error) {
		var ids []string
		var errs []error
		for _, u := range universes {
			ws, err := st.ListWorlds(ctx, u, "")
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, w := range ws {
				ids = append(ids, w.ID)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		slices.Sort(ids)
		return slices.Compact(ids), nil
	}
}
