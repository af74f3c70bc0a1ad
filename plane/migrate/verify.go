package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Kernels are the binary's world definitions: each world whose
	// universe has one is replayed on both stores.
	Kernels plane.Kernels
	// Subset accepts a target that holds more than the source (a merge):
	// counts may be higher there, and worlds only in the target are not
	// looked at.
	Subset bool
	// Transform is the copy's (CopyOptions.Transform): the source's
	// records pass through it before they are compared.
	Transform func(*store.PortRecord) (keep bool, err error)
	// Parallel is how many worlds are replayed at once (0: 4).
	Parallel int
	// Clock is the local clock for Elapsed (nil: time.Now).
	Clock func() time.Time
}

// Report is a verification's outcome. OK is true when every check passed;
// then NotReplayed may still list worlds nothing here could replay.
type Report struct {
	OK     bool        `json:"ok"`
	Counts []KindCount `json:"counts"`
	// Worlds is the number of the source's worlds checked; Replayed of
	// them were replayed on both stores, Runs are workflow runs whose
	// statuses were compared.
	Worlds   int `json:"worlds"`
	Replayed int `json:"replayed"`
	Runs     int `json:"runs"`
	// NotReplayed lists the worlds whose universe this binary has no
	// definition for: "not replayed (no definition)".
	NotReplayed []WorldRef   `json:"not_replayed"`
	Differences []Difference `json:"differences"`
	// Elapsed is the verification's duration in seconds.
	Elapsed float64 `json:"elapsed_seconds"`
}

// KindCount is one record kind's count on both sides.
type KindCount struct {
	Kind   store.PortKind `json:"kind"`
	Source int64          `json:"source"`
	Target int64          `json:"target"`
	OK     bool           `json:"ok"`
}

// WorldRef names a world and its universe.
type WorldRef struct {
	World    string `json:"world"`
	Universe string `json:"universe"`
}

// Difference is one check that failed for one world (or free stream).
type Difference struct {
	World  string `json:"world"`
	Check  string `json:"check"`
	Source string `json:"source"`
	Target string `json:"target"`
}

// The checks a Difference names.
const (
	CheckMissing   = "missing"    // the world is not in the target
	CheckUniverse  = "universe"   // universe or lineage
	CheckStatus    = "status"     // active, paused, archived
	CheckHead      = "head"       // journal head
	CheckFloor     = "floor"      // compaction floor
	CheckJournal   = "journal"    // the journal's records (count and digest)
	CheckSnapshots = "snapshots"  // heights and state hashes
	CheckInbox     = "inbox"      // items, cursor, drains
	CheckLease     = "lease"      // the lease epoch
	CheckQueues    = "queues"     // effects and timers
	CheckState     = "state_hash" // the state replayed
	CheckReplay    = "replay"     // a replay failed
	CheckRun       = "run_status" // a workflow run's status
)

// DifferingWorlds returns the sorted ids of the worlds that differ.
func (r *Report) DifferingWorlds() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range r.Differences {
		if !seen[d.World] {
			seen[d.World] = true
			out = append(out, d.World)
		}
	}
	sort.Strings(out)
	return out
}

// Err is nil for a passed verification, else a *VerifyError.
func (r *Report) Err() error {
	if r.OK {
		return nil
	}
	return &VerifyError{Report: r}
}

// digest is an order-independent digest of a set of records: the XOR of
// their SHA-256s. Two backends may export one kind in different key
// orders (their collations differ); the set is what must be equal.
type digest [sha256.Size]byte

func (d *digest) add(parts ...any) {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	for i := range d {
		d[i] ^= s[i]
	}
}

func (d digest) String() string { return hex.EncodeToString(d[:8]) }

// us is t at PostgreSQL's precision: a time copied there keeps its
// microseconds, so nanoseconds are no difference.
func us(t time.Time) int64 { return t.UnixMicro() }

func usp(t *time.Time) any {
	if t == nil {
		return "-"
	}
	return us(*t)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// streamSum summarises one journal stream.
type streamSum struct {
	head, floor uint64
	events      int64
	journal     digest
}

// worldSum summarises one world's records.
type worldSum struct {
	universe, status, lineage string
	cursor, lastSeq, baseline string
	epoch                     uint64
	snaps                     int64
	snapshots                 digest
	inbox                     int64
	inboxD                    digest
	queues                    int64
	queuesD                   digest
}

type summary struct {
	counts  map[store.PortKind]int64
	worlds  map[string]*worldSum
	streams map[string]*streamSum
	order   []string // world ids in export order
}

func (s *summary) world(id string) *worldSum {
	w := s.worlds[id]
	if w == nil { // a row of a world the export did not list: kept apart
		w = &worldSum{universe: "?"}
		s.worlds[id] = w
	}
	return w
}

func (s *summary) stream(id string) *streamSum {
	x := s.streams[id]
	if x == nil {
		x = &streamSum{}
		s.streams[id] = x
	}
	return x
}

// summarise reads a store's export. asSource passes each record through
// the transform and the changes an import makes (store.PortImported), so
// that it reads as its copy should.
func summarise(ctx context.Context, ex store.Exporter, transform func(*store.PortRecord) (bool, error), asSource bool) (*summary, error) {
	s := &summary{counts: map[store.PortKind]int64{}, worlds: map[string]*worldSum{}, streams: map[string]*streamSum{}}
	archived := map[string]bool{}
	err := ex.Export(ctx, func(r store.PortRecord) error {
		if asSource {
			if transform != nil {
				keep, err := transform(&r)
				if err != nil || !keep {
					return err
				}
			}
			world := ""
			switch r.Kind {
			case store.PortKindEffect:
				world = r.Effect.World
			case store.PortKindTimer:
				world = r.Timer.World
			}
			// The withdrawal's time is the target's clock, which no
			// digest reads.
			r = store.PortImported(r, archived[world], time.Time{})
		}
		s.counts[r.Kind]++
		switch r.Kind {
		case store.PortKindWorld:
			w := r.World
			archived[w.ID] = w.Status == store.WorldArchived
			base := "-"
			if w.BaselineHeight != nil {
				base = fmt.Sprint(*w.BaselineHeight)
			}
			s.worlds[w.ID] = &worldSum{universe: w.Universe, status: string(w.Status),
				lineage: fmt.Sprintf("%s@%d#%s created %d", w.ParentWorld, w.ForkedAtHeight, w.ParentSnapshotHash, us(w.CreatedAt)),
				cursor:  fmt.Sprint(w.InboxCursor), lastSeq: fmt.Sprint(w.LastSeq), baseline: base}
			s.order = append(s.order, w.ID)
		case store.PortKindStream:
			x := s.stream(r.Stream.Stream)
			x.head, x.floor = r.Stream.Head, r.Stream.CompactedTo
		case store.PortKindEvent:
			e := r.Event
			x := s.stream(e.StreamID)
			x.events++
			x.journal.add(e.RunSeq, e.EventID, e.IdempotencyKey, e.EventType, e.StepID, e.LogicalAttemptID,
				e.EngineAttemptID, e.PlanID, e.PlanVersion, us(e.EmittedAt), us(e.PersistedAt), sum(e.Payload))
		case store.PortKindEventKey:
			k := r.EventKey
			s.stream(k.Stream).journal.add("key", k.IdempotencyKey, k.EventID, k.RunSeq, us(k.PersistedAt))
		case store.PortKindSnapshot:
			w := s.world(r.Snapshot.World)
			w.snaps++
			w.snapshots.add(r.Snapshot.Height, r.Snapshot.StateHash, sum(r.Snapshot.State))
		case store.PortKindInbox:
			i := r.Inbox
			w := s.world(i.World)
			w.inbox++
			w.inboxD.add(i.Seq, i.Kind, i.DedupeKey, i.KeyLive, us(i.EnqueuedAt), sum(i.Payload))
		case store.PortKindDrain:
			s.world(r.Drain.World).inboxD.add("drain", r.Drain.Upto, us(r.Drain.DrainedAt))
		case store.PortKindLease:
			s.world(r.Lease.World).epoch = r.Lease.Epoch
		case store.PortKindEffect:
			e := r.Effect
			w := s.world(e.World)
			w.queues++
			status := "-"
			if e.ReceiptStatus != nil {
				status = *e.ReceiptStatus
			}
			w.queuesD.add("effect", e.IntentHash, e.Kind, e.State, e.Attempts, e.Retries, e.Failures, status,
				sum(e.Params), sum(e.ReceiptPayload), fmt.Sprint(e.InboxSeq != nil && *e.InboxSeq > 0), usp(e.RetryAt))
		case store.PortKindTimer:
			t := r.Timer
			w := s.world(t.World)
			w.queues++
			w.queuesD.add("timer", t.IntentHash, t.State, t.Attempt, us(t.DeliverAt), sum(t.Payload))
		}
		return nil
	})
	return s, err
}

// Verify compares target with source and reports every difference (see
// the package doc). Its error is for what kept it from comparing (a store
// it could not read, a cancelled context); a difference is in the report
// (Report.OK false, Report.Err a *VerifyError).
func Verify(ctx context.Context, source, target store.Store, o VerifyOptions) (*Report, error) {
	clock := o.Clock
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	ex, _, err := porters(source, target)
	if err != nil {
		return nil, err
	}
	tex, ok := target.(store.Exporter)
	if !ok {
		return nil, fmt.Errorf("%w: target %T", ErrUnsupported, target)
	}
	src, err := summarise(ctx, ex, o.Transform, true)
	if err != nil {
		return nil, fmt.Errorf("reading the source: %w", err)
	}
	dst, err := summarise(ctx, tex, nil, false)
	if err != nil {
		return nil, fmt.Errorf("reading the target: %w", err)
	}
	r := &Report{Worlds: len(src.order), NotReplayed: []WorldRef{}, Differences: []Difference{}}
	for _, k := range store.PortKinds() {
		c := KindCount{Kind: k, Source: src.counts[k], Target: dst.counts[k]}
		c.OK = c.Source == c.Target || o.Subset && c.Target > c.Source
		r.Counts = append(r.Counts, c)
	}
	diff := func(world, check string, a, b any) {
		r.Differences = append(r.Differences, Difference{World: world, Check: check, Source: fmt.Sprint(a), Target: fmt.Sprint(b)})
	}
	var replay []string
	for _, id := range src.order {
		a, b := src.worlds[id], dst.worlds[id]
		if b == nil {
			diff(id, CheckMissing, "present", "absent")
			continue
		}
		compareWorld(id, a, b, diff)
		sa, sb := src.stream(id), dst.stream(id)
		compareStream(id, sa, sb, diff)
		replay = append(replay, id)
	}
	// Free streams (no world owns them).
	var free []string
	for id := range src.streams {
		if src.worlds[id] == nil {
			free = append(free, id)
		}
	}
	sort.Strings(free)
	for _, id := range free {
		compareStream(id, src.streams[id], dst.stream(id), diff)
	}
	if err := replayAll(ctx, source, target, src, replay, o, r, diff); err != nil {
		return nil, err
	}
	sort.SliceStable(r.Differences, func(i, j int) bool { return r.Differences[i].World < r.Differences[j].World })
	r.OK = len(r.Differences) == 0
	for _, c := range r.Counts {
		r.OK = r.OK && c.OK
	}
	r.Elapsed = clock().Sub(start).Seconds()
	return r, nil
}

func compareWorld(id string, a, b *worldSum, diff func(world, check string, a, b any)) {
	if a.universe != b.universe || a.lineage != b.lineage {
		diff(id, CheckUniverse, a.universe+" "+a.lineage, b.universe+" "+b.lineage)
	}
	if a.status != b.status {
		diff(id, CheckStatus, a.status, b.status)
	}
	if a.snaps != b.snaps || a.snapshots != b.snapshots || a.baseline != b.baseline {
		diff(id, CheckSnapshots, fmt.Sprintf("%d baseline %s %s", a.snaps, a.baseline, a.snapshots), fmt.Sprintf("%d baseline %s %s", b.snaps, b.baseline, b.snapshots))
	}
	if a.inbox != b.inbox || a.inboxD != b.inboxD || a.cursor != b.cursor || a.lastSeq != b.lastSeq {
		diff(id, CheckInbox, fmt.Sprintf("%d items cursor %s last %s %s", a.inbox, a.cursor, a.lastSeq, a.inboxD),
			fmt.Sprintf("%d items cursor %s last %s %s", b.inbox, b.cursor, b.lastSeq, b.inboxD))
	}
	if a.epoch != b.epoch {
		diff(id, CheckLease, fmt.Sprintf("epoch %d", a.epoch), fmt.Sprintf("epoch %d", b.epoch))
	}
	if a.queues != b.queues || a.queuesD != b.queuesD {
		diff(id, CheckQueues, fmt.Sprintf("%d %s", a.queues, a.queuesD), fmt.Sprintf("%d %s", b.queues, b.queuesD))
	}
}

func compareStream(id string, a, b *streamSum, diff func(world, check string, a, b any)) {
	if a.head != b.head {
		diff(id, CheckHead, a.head, b.head)
	}
	if a.floor != b.floor {
		diff(id, CheckFloor, a.floor, b.floor)
	}
	if a.events != b.events || a.journal != b.journal {
		diff(id, CheckJournal, fmt.Sprintf("%d records %s", a.events, a.journal), fmt.Sprintf("%d records %s", b.events, b.journal))
	}
}

// replayAll replays every world of ids on both stores (Parallel at once)
// and compares the state hashes; a workflow run's status is compared
// instead, and a world without a definition is listed as not replayed.
func replayAll(ctx context.Context, source, target store.Store, src *summary, ids []string, o VerifyOptions, r *Report, diff func(world, check string, a, b any)) error {
	par := o.Parallel
	if par <= 0 {
		par = 4
	}
	ex := actor.NewEntropyExecutor()
	sc, err := workflow.NewClient(source, nil, ex)
	if err != nil {
		return err
	}
	tc, err := workflow.NewClient(target, nil, ex)
	if err != nil {
		return err
	}
	type outcome struct {
		kind   int // 0: replayed, 1: run, 2: no definition
		differ bool
		check  string
		a, b   string
	}
	results := make([]outcome, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for i := range next {
				id := ids[i]
				universe := src.worlds[id].universe
				res := &results[i]
				if kern, ok := o.Kernels[universe]; ok && kern != nil {
					a, ea := stateHash(ctx, source, o.Kernels, id)
					b, eb := stateHash(ctx, target, o.Kernels, id)
					res.check, res.a, res.b = CheckState, a, b
					if ea != nil || eb != nil {
						res.check, res.a, res.b = CheckReplay, errText(a, ea), errText(b, eb)
						res.differ = true
					} else {
						res.differ = a != b
					}
					continue
				}
				if strings.HasPrefix(universe, workflow.UniversePrefix) {
					res.kind = 1
					a, ea := runStatus(ctx, sc, id)
					b, eb := runStatus(ctx, tc, id)
					res.check, res.a, res.b = CheckRun, errText(a, ea), errText(b, eb)
					res.differ = ea != nil || eb != nil || a != b
					continue
				}
				res.kind = 2
			}
		})
	}
	for i := range ids {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, res := range results {
		id := ids[i]
		switch res.kind {
		case 0:
			r.Replayed++
		case 1:
			r.Runs++
		case 2:
			r.NotReplayed = append(r.NotReplayed, WorldRef{World: id, Universe: src.worlds[id].universe})
		}
		if res.differ {
			diff(id, res.check, res.a, res.b)
		}
	}
	return nil
}

func errText(s string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return s
}

// stateHash replays world id of st from its baseline and its journal, as a
// host restores it, and returns its state hash at its head.
func stateHash(ctx context.Context, st store.Store, kernels plane.Kernels, id string) (string, error) {
	inst, _, err := plane.Restore(ctx, st, kernels, id)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s@%d", inst.StateHash(), inst.Height()), nil
}

// runStatus is what a run's record and stream say of it.
func runStatus(ctx context.Context, c *workflow.Client, id string) (string, error) {
	s, err := c.Get(ctx, id)
	if err != nil {
		if errors.Is(err, workflow.ErrNotFound) {
			return "absent", nil
		}
		return "", err
	}
	return fmt.Sprintf("%s steps %d head %d output %s error %q", s.Status, s.Steps, s.Head, sum(s.Output)[:12], s.Error), nil
}
