package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
)

// Runs whose version no live worker carries cannot make progress: they
// are reported as unrunnable (Client.Get, the runs list, the runs metric,
// a log line), never silently as running.

// Carriers reads the workers once and returns a judge of versions: for
// version of workflow name, it names the live workers when some are live
// and none of them (nor a worker of this process) carries it, and nil
// otherwise (it is carried, or no worker is live at all, as before a
// deploy). For lists and metrics: one read for any number of runs.
func (c *Client) Carriers(ctx context.Context) (func(name string, version uint64) []string, error) {
	now, err := c.st.Now(ctx)
	if err != nil {
		return nil, err
	}
	workers, err := c.st.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	var live []store.WorkerInfo
	for _, wi := range workers {
		switch {
		case !wi.AliveUntil.IsZero() && wi.Dead(now):
		case wi.AliveUntil.IsZero() && now.Sub(wi.HeartbeatAt) >= c.liveFor:
		default:
			live = append(live, wi)
		}
	}
	local := c.workers
	return func(name string, version uint64) []string {
		for _, w := range local {
			if w.carries(name, version) {
				return nil
			}
		}
		capability := Capability(name, version)
		ids := make([]string, 0, len(live))
		for _, wi := range live {
			if runsVersion(wi, capability) {
				return nil
			}
			ids = append(ids, wi.ID)
		}
		if len(ids) == 0 {
			return nil
		}
		return ids
	}, nil
}

// UnrunnableReason is the error an unrunnable run shows: the capability
// it needs and the live workers, none of which carries it.
func UnrunnableReason(name string, version uint64, live []string) string {
	return fmt.Sprintf("unrunnable: no live worker carries %s (live: %s)", Capability(name, version), strings.Join(live, ", "))
}

// UnrunnableRuns are the runs of one workflow version that no live
// worker carries.
type UnrunnableRuns struct {
	Workflow string
	Version  uint64
	Runs     []string // sorted
	Live     []string // the live workers, none of which carries it
}

// Unrunnable lists the runs of the workflows c registers that have not
// ended, are not paused, and whose version no live worker carries, by
// capability ("workflow:<name>@<version>"). It reads the workers once and
// each workflow's active runs once; a run's version is read from its start
// item once per Client and kept (it never changes).
func (c *Client) Unrunnable(ctx context.Context) (map[string]UnrunnableRuns, error) {
	judge, err := c.Carriers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]UnrunnableRuns{}
	for _, name := range c.wf.Names() {
		recs, err := c.st.ListWorlds(ctx, Universe(name), store.WorldActive)
		if err != nil {
			return nil, wrap("unrunnable", "", err)
		}
		for _, rec := range recs {
			v, err := c.versionOf(ctx, rec.ID)
			if err != nil || v == 0 {
				continue // no start yet: judged at the next look
			}
			if live := judge(name, v); live != nil {
				cp := Capability(name, v)
				u := out[cp]
				u.Workflow, u.Version, u.Live = name, v, live
				u.Runs = append(u.Runs, rec.ID)
				out[cp] = u
			}
		}
	}
	for _, u := range out {
		slices.Sort(u.Runs)
	}
	return out, nil
}

// versionOf is run id's pinned version, from its start item, cached.
func (c *Client) versionOf(ctx context.Context, id string) (uint64, error) {
	c.versionsMu.Lock()
	v, ok := c.versions[id]
	c.versionsMu.Unlock()
	if ok {
		return v, nil
	}
	st, err := readStart(ctx, c.st, id)
	if err != nil || st == nil {
		return 0, err
	}
	c.versionsMu.Lock()
	if c.versions == nil {
		c.versions = map[string]uint64{}
	}
	if len(c.versions) >= maxCachedVersions {
		clear(c.versions)
	}
	c.versions[id] = st.Version
	c.versionsMu.Unlock()
	return st.Version, nil
}

// maxCachedVersions bounds versionOf's cache; past it, it starts over.
const maxCachedVersions = 1 << 16

// ReportUnrunnable looks every interval, until ctx ends, for workflow
// versions with runs waiting that no live worker carries (Unrunnable), and
// logs through log a warning when a version becomes so (its runs' count,
// a few of their ids, the live workers) and an info line when it no longer
// is: once each, not at every look.
func (c *Client) ReportUnrunnable(ctx context.Context, every time.Duration, log *slog.Logger) error {
	reported := map[string]bool{}
	for {
		un, err := c.Unrunnable(ctx)
		if err == nil {
			for _, cp := range slices.Sorted(maps.Keys(un)) {
				if reported[cp] {
					continue
				}
				reported[cp] = true
				u := un[cp]
				log.Warn("workflow runs are unrunnable: no live worker carries their version",
					"capability", cp, "runs", len(u.Runs), "first", u.Runs[:min(len(u.Runs), 5)], "live", u.Live)
			}
			for _, cp := range slices.Sorted(maps.Keys(reported)) {
				if _, still := un[cp]; !still {
					delete(reported, cp)
					log.Info("workflow runs are runnable again (or ended)", "capability", cp)
				}
			}
		} else if ctx.Err() == nil {
			log.Warn("looking for unrunnable workflow runs", "err", err)
		}
		if err := actor.Sleep(ctx, c.ex, every); err != nil {
			return nil
		}
	}
}
