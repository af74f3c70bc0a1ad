//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/workflow"
)

// TestRollingUpgrade is a release rolled out under load, as an operator
// does it, on three `orrery serve` processes on PostgreSQL:
//
//  1. three processes carrying v1 of the tally world and the errand
//     workflow serve steady load (keyed sends, calls, alarms, effects,
//     workflow runs started continuously);
//  2. each is stopped gracefully in turn and replaced by a process of the
//     next release (a new worker id, a binary carrying v1 and v2); while
//     the cluster is mixed, runs keep finishing, each on the version that
//     started it, and once every process carries v2 new runs start on v2;
//  3. one world is upgraded to v2 with the real CLI (`orrery world upgrade
//     ID --to 2` against a process's API), the rest with the API's
//     universe-wide upgrade; then v2's new input type works on every world
//     and the load sends it too;
//  4. once no v1 run is left unfinished, each process is replaced again by
//     one carrying v2 alone.
//
// At the end, from the store: every acknowledged input applied exactly
// once, every journal replays record by record with the definition that
// wrote it, every acknowledged run finished exactly once on the version
// that started it, no lease epoch went backwards, and every world answers
// a call with what its state says.
func TestRollingUpgrade(t *testing.T) {
	db := newClusterDB(t)
	c, ids, ld := loadedCluster(t, db, db.dsn)
	epochs := c.watchEpochs(ids)
	loadFrom := time.Now()

	// Steady state: the figures' baseline.
	time.Sleep(4 * time.Second)
	roll1 := time.Now()

	// The release: each v1 process, one at a time, is replaced by a v1+v2
	// one. Between two replacements the cluster settles (every world held
	// by a running process) and a run started now finishes: a mixed
	// cluster serves, it does not just survive.
	c.roll(ld.led, ids, "1,2", "mixed")
	roll1End := time.Now()
	// Every process carries v2 now: a new run starts on it.
	c.awaitProbeRun(ld.led, "probe-v2", 2)

	// The worlds move: one through the CLI, then the whole universe
	// through the API (the CLI's world is among them, already there).
	c.upgradeByCLI(ids[0], 2)
	c.awaitVersion(ids[:1], 2)
	c.sendMark(ld.led, ids[0], "probe-mark-cli")
	asked, already := c.upgradeUniverse(2)
	if asked+already != len(ids) {
		t.Errorf("the universe upgrade asked %d worlds and found %d on v2 already, want %d in all", asked, already, len(ids))
	}
	c.awaitVersion(ids, 2)
	for _, id := range ids {
		c.sendMark(ld.led, id, "probe-mark-"+id)
	}
	ld.marks.Store(true)
	time.Sleep(2 * time.Second)

	// v1 leaves the binary only once no v1 run is left to finish on it.
	c.awaitNoRunsOf(1)
	roll2 := time.Now()
	c.roll(ld.led, ids, "2", "v2")
	roll2End := time.Now()

	reports := c.stopLoadAndVerify(ld, ids, 2*time.Second)
	for _, id := range ids {
		rep := reports[id]
		if rep.version != 2 {
			t.Errorf("%s is on version %d at the end, want 2", id, rep.version)
		}
		// Asked twice (the CLI's world) or once, moved once.
		if len(rep.upgrades) != 1 || rep.upgrades[0].From != 1 || rep.upgrades[0].To != 2 {
			t.Errorf("%s: upgrade records %+v, want one from 1 to 2", id, rep.upgrades)
		}
	}
	epochs.check()
	c.rollFigures(ld.led, loadFrom, roll1, roll1End, roll2, roll2End)
	c.figureVersions(ld.led)
}

// upgradeByCLI runs `orrery world upgrade ID --to N` against a running
// process's API.
func (c *cluster) upgradeByCLI(id string, to uint64) {
	c.t.Helper()
	var out bytes.Buffer
	p := c.current()[0]
	code := cli.Run(context.Background(), []string{"world", "upgrade", id, "--to", strconv.FormatUint(to, 10), "--addr", p.addr},
		cli.IO{Out: &out, Err: &out}, testKernels())
	// The CLI's client used the default transport.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code != cli.ExitOK {
		c.t.Fatalf("orrery world upgrade %s --to %d: exit %d: %s", id, to, code, out.String())
	}
	c.t.Logf("orrery world upgrade %s --to %d: %s", id, to, strings.TrimSpace(out.String()))
}

// upgradeUniverse asks every world of the tally's universe to move to
// version to through the API, a page at a time, and returns how many were
// asked and how many were there already.
func (c *cluster) upgradeUniverse(to uint64) (asked, already int) {
	c.t.Helper()
	after := ""
	for {
		v, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
			return cl.UpgradeUniverse(ctx, clusterUniverse, to, after, 20)
		})
		if err != nil {
			c.t.Fatalf("upgrade universe %s to %d: %v", clusterUniverse, to, err)
		}
		page := v.(api.UniverseUpgrade)
		if page.Failed > 0 {
			c.t.Fatalf("upgrade universe %s to %d: %d failed: %+v", clusterUniverse, to, page.Failed, page.Failures)
		}
		asked, already = asked+page.Asked, already+page.Already
		if page.Next == "" {
			return asked, already
		}
		after = page.Next
	}
}

// awaitVersion waits until every world of ids is on version v with no
// upgrade pending, as the API shows them.
func (c *cluster) awaitVersion(ids []string, v uint64) {
	c.t.Helper()
	var behind []string
	if !poll(clusterBound, 100*time.Millisecond, func() bool {
		behind = nil
		for _, id := range ids {
			w, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) { return cl.GetWorld(ctx, id) })
			if err != nil {
				behind = append(behind, id+": "+err.Error())
				continue
			}
			if wv := w.(api.WorldView); wv.Version != v || wv.PendingUpgrade != 0 {
				behind = append(behind, fmt.Sprintf("%s on v%d (pending %d)", id, wv.Version, wv.PendingUpgrade))
			}
		}
		return len(behind) == 0
	}) {
		c.t.Fatalf("%d worlds not on v%d within %v: %s", len(behind), v, clusterBound, first(behind, 10))
	}
}

// sendMark sends v2's Mark to worldID until it is acknowledged, and logs
// it in led for the final checks (counted once in the world's marks).
func (c *cluster) sendMark(led *ackLog, worldID, key string) {
	c.t.Helper()
	var seq uint64
	var last error
	if !poll(clusterBound, 50*time.Millisecond, func() bool {
		v, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
			return cl.Send(ctx, worldID, Mark{}.WorldType(), Mark{Key: key}, key)
		})
		if last = err; err != nil {
			return false
		}
		seq = v.(api.Ack).Seq
		return true
	}) {
		c.t.Fatalf("%s: mark %q not acknowledged within %v: %v", worldID, key, clusterBound, last)
	}
	led.ack(acked{World: worldID, Kind: opMark, Key: key, Seq: seq, G: -1, At: time.Now()})
}

// roll replaces each running process, one at a time, with one carrying
// versions under the next worker id, and after each replacement waits for
// the worlds to settle and a probe run to finish.
func (c *cluster) roll(led *ackLog, ids []string, versions, probe string) {
	c.t.Helper()
	c.mu.Lock()
	next := len(c.all) + 1
	c.mu.Unlock()
	for i, p := range c.current() {
		q := c.replace(p, fmt.Sprintf("w%d", next), versions)
		next++
		c.awaitPlaced(ids, c.current(), clusterBound)
		c.awaitProbeRun(led, fmt.Sprintf("probe-%s-%d", probe, i+1), 0)
		c.t.Logf("replaced %s with %s (versions %s)", p.worker, q.worker, versions)
	}
}

// awaitNoRunsOf waits until no run of the errand's version v is left
// unfinished, as the API lists them: what an operator checks before
// removing a version from the binary.
func (c *cluster) awaitNoRunsOf(version uint64) {
	c.t.Helper()
	var left []string
	if !poll(clusterBound, 200*time.Millisecond, func() bool {
		var seen map[string]string
		v, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
			out := map[string]string{}
			after := ""
			for {
				page, next, err := cl.SearchRuns(ctx, api.RunQuery{Workflow: clusterErrand, Version: version, ListOptions: api.ListOptions{After: after, Limit: 500}})
				if err != nil {
					return nil, err
				}
				for _, r := range page {
					out[r.ID] = r.Status
				}
				if next == "" {
					return out, nil
				}
				after = next
			}
		})
		if err != nil {
			left = []string{err.Error()}
			return false
		}
		seen, left = v.(map[string]string), nil
		for _, id := range keys(seen) {
			switch workflow.RunStatus(seen[id]) {
			case workflow.StatusCompleted, workflow.StatusFailed, workflow.StatusCancelled:
			default:
				left = append(left, id+" ("+seen[id]+")")
			}
		}
		return len(left) == 0
	}) {
		c.t.Fatalf("runs of v%d still unfinished after %v: %s", version, clusterBound, first(left, 10))
	}
}

// figureVersions counts the acknowledged runs by the version each ran on.
func (c *cluster) figureVersions(led *ackLog) {
	c.t.Helper()
	runs, _ := led.ackedRuns()
	by := map[uint64]int{}
	ctx := context.Background()
	for _, r := range runs {
		rep, err := readRun(ctx, c.db.st, r.ID)
		if err != nil {
			c.t.Fatalf("run %s: %v", r.ID, err)
		}
		by[rep.version()]++
	}
	if by[1] == 0 || by[2] == 0 {
		c.t.Errorf("acknowledged runs by version: %v; want runs of both v1 and v2, or the upgrade tested nothing", by)
	}
	c.figure("workflow runs by version: %d on v1, %d on v2, each finished on the version that started it", by[1], by[2])
}

// awaitProbeRun starts an errand run of id through any running process
// and waits until it has completed on version want (any when 0), checked
// as the load's runs are. It is logged in led as the load's runs are, so the final
// checks count it too.
func (c *cluster) awaitProbeRun(led *ackLog, id string, want uint64) {
	c.t.Helper()
	led.tryRun(id)
	in := errand{Key: id, URL: c.target.srv.URL + "/run", SleepMs: 100}
	if _, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
		v, _, err := cl.StartRun(ctx, clusterErrand, id, in)
		return v, err
	}); err != nil {
		c.t.Fatalf("start run %s: %v", id, err)
	}
	led.ackRun(ackedRun{ID: id, G: -1, At: time.Now()})
	var last findings
	if !poll(clusterBound, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rep, err := readRun(ctx, c.db.st, id)
		if err != nil {
			last = findings{pending: []string{err.Error()}}
			return false
		}
		last = findings{}
		c.checkRun(ctx, rep, &last, false)
		if len(last.broken) > 0 {
			c.t.Fatalf("probe run %s: %s", id, first(last.broken, 10))
		}
		if rep.ended() && want != 0 && rep.version() != want {
			c.t.Fatalf("probe run %s completed on v%d, want v%d", id, rep.version(), want)
		}
		return rep.ended()
	}) {
		c.t.Fatalf("probe run %s did not finish within %v: %s", id, clusterBound, first(last.pending, 5))
	}
}

// epochWatch samples the worlds' leases all through a test and records
// any that went backwards: a world's lease epoch only ever grows, across
// every handoff of a rolling upgrade.
type epochWatch struct {
	c    *cluster
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	seen    map[string]uint64 // world → the highest epoch seen
	back    []string
	samples int
}

// watchEpochs starts sampling the leases of ids through the API.
func (c *cluster) watchEpochs(ids []string) *epochWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &epochWatch{c: c, stop: cancel, done: make(chan struct{}), seen: map[string]uint64{}}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if hs, err := c.holders(ids); err == nil {
				w.observe(hs)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	c.t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *epochWatch) observe(hs map[string]api.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	for id, l := range hs {
		if prev := w.seen[id]; l.Epoch < prev {
			w.back = append(w.back, fmt.Sprintf("%s: epoch %d (held by %s) after %d", id, l.Epoch, l.Holder, prev))
		}
		w.seen[id] = max(w.seen[id], l.Epoch)
	}
}

// check stops the sampling, takes a last sample from the store and fails
// the test on any epoch that went backwards.
func (w *epochWatch) check() {
	t := w.c.t
	t.Helper()
	w.stop()
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	raised := 0
	for _, id := range keys(w.seen) {
		l, ok, err := w.c.db.st.GetLease(ctx, id)
		if err != nil {
			t.Fatalf("%s: read its lease: %v", id, err)
		}
		if ok && l.Epoch < w.seen[id] {
			w.back = append(w.back, fmt.Sprintf("%s: epoch %d in the store at the end, after %d", id, l.Epoch, w.seen[id]))
		}
		if ok && l.Epoch > 1 {
			raised++
		}
	}
	if len(w.back) > 0 {
		t.Errorf("lease epochs went backwards:\n%s", first(w.back, 20))
	}
	if w.samples < 2 {
		t.Errorf("the lease sampler read the leases %d times: nothing was watched", w.samples)
	}
	w.c.figure("lease epochs: %d samples of %d worlds, none went backwards; %d worlds ended above epoch 1 (handed over at least once)",
		w.samples, len(w.seen), raised)
}

// rollFigures prints, for bench/README.md, what the load's clients saw
// in the steady state and during each rolling replacement: the p50 and
// p99 of the time from an operation's first attempt to its answer, and
// the longest gap any one client went without an answer.
func (c *cluster) rollFigures(led *ackLog, loadFrom, roll1, roll1End, roll2, roll2End time.Time) {
	c.t.Helper()
	// The load's first second is its warm-up, not its steady state.
	c.figureWindow(led, "steady state, v1", loadFrom.Add(time.Second), roll1)
	c.figureWindow(led, "rolling replacement v1 → v1+v2 (3 processes)", roll1, roll1End)
	c.figureWindow(led, "rolling replacement v1+v2 → v2 (3 processes)", roll2, roll2End)
}

func (c *cluster) figureWindow(led *ackLog, what string, from, to time.Time) {
	c.t.Helper()
	ss := led.timings(from, to)
	if len(ss) == 0 {
		c.t.Fatalf("%s: no answered operations to measure", what)
	}
	p50, _, p99, _ := quantiles(tooks(ss))
	c.figure("%s (%v): %d answers, latency p50 %v p99 %v, longest gap a client saw %v",
		what, ms(to.Sub(from)), len(ss), ms(p50), ms(p99), ms(clientGap(ss, nLoad, from, to)))
}

func tooks(ss []opSample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.Took
	}
	return out
}

// clientGap is the longest time one client (load goroutine) went
// without an answer in [from, to): between two of its answers, or from
// the window's edge to its first or last one. A client with no answer in
// the window went all of it without one.
func clientGap(ss []opSample, clients int, from, to time.Time) time.Duration {
	by := make([][]time.Time, clients)
	for _, s := range ss {
		by[s.G] = append(by[s.G], s.At)
	}
	var gap time.Duration
	for _, ats := range by {
		slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
		prev := from
		for _, at := range append(ats, to) {
			gap = max(gap, at.Sub(prev))
			prev = at
		}
	}
	return gap
}
