package migrate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
)

// DefaultBatch is how many records one import transaction writes.
const DefaultBatch = 2000

// CopyOptions configure Copy. The zero value copies into an empty target
// from a source no node is writing, in batches of DefaultBatch.
type CopyOptions struct {
	// Batch is the number of records per import transaction (0:
	// DefaultBatch).
	Batch int
	// IntoNonEmpty merges into a target that holds records, provided no
	// world or stream of the source exists there (else ErrCollision and
	// nothing is written). The target's worker rows, leases and counters
	// stay; the effect queue's counter only rises.
	IntoNonEmpty bool
	// Resume runs a copy again into the target an earlier run of it
	// left part-way (interrupted, or a batch whose answer was lost): a
	// target that is not empty is accepted, every record the target holds
	// as the import writes it is left as it is, and the rest is imported.
	// A record the target holds as anything else is store.ErrConflict,
	// and nothing of its batch is written: the target is not that copy's
	// (or the source changed since; a resumed copy is of the source as it
	// is now). Run it with the same Transform.
	Resume bool
	// Force copies a source whose nodes may still be alive. The copy is
	// of one consistent snapshot; what they write after it is not copied.
	Force bool
	// Transform, when set, sees every record before it is imported and
	// may change it in place; returning false drops it. It must keep the
	// record's kind and key.
	Transform func(*store.PortRecord) (keep bool, err error)
	// Progress, when set, is called at most every ProgressEvery while the
	// copy runs, and once at its end (Done).
	Progress      func(Progress)
	ProgressEvery time.Duration // 0: one second
	// Survey counts the source before copying, so that Progress carries
	// totals and an ETA. It costs one more read of the whole source.
	Survey bool
	// Clock reads the local monotonic clock for rates and progress
	// intervals (nil: time.Now). Never used for anything a store decides.
	Clock func() time.Time
}

// Progress is a copy's advance.
type Progress struct {
	Records      int64   `json:"records"`
	Worlds       int64   `json:"worlds"`
	Bytes        int64   `json:"bytes"`         // payload, state and parameter bytes
	TotalRecords int64   `json:"total_records"` // 0: unknown (no Survey)
	TotalWorlds  int64   `json:"total_worlds"`
	Elapsed      float64 `json:"elapsed_seconds"`
	Done         bool    `json:"done"`
}

// Rate is records per second so far.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Records) / p.Elapsed
}

// ETA is the time left at the rate so far (0 and false when unknown).
func (p Progress) ETA() (time.Duration, bool) {
	r := p.Rate()
	if p.TotalRecords == 0 || r <= 0 {
		return 0, false
	}
	left := max(p.TotalRecords-p.Records, 0)
	return time.Duration(float64(left) / r * float64(time.Second)), true
}

// Result is what Copy did.
type Result struct {
	Records map[store.PortKind]int64 `json:"records"`
	Dropped int64                    `json:"dropped"` // by Transform
	Worlds  int64                    `json:"worlds"`
	Bytes   int64                    `json:"bytes"`
	Elapsed time.Duration            `json:"elapsed_ns"`
}

// Total is the number of records imported.
func (r Result) Total() int64 {
	var n int64
	for _, c := range r.Records {
		n += c
	}
	return n
}

func porters(src, dst any) (store.Exporter, store.Importer, error) {
	ex, ok := src.(store.Exporter)
	if !ok {
		return nil, nil, fmt.Errorf("%w: source %T", ErrUnsupported, src)
	}
	im, ok := dst.(store.Importer)
	if !ok {
		return nil, nil, fmt.Errorf("%w: target %T", ErrUnsupported, dst)
	}
	return ex, im, nil
}

// Live is what a store says of its live workers: their ids, sorted, when
// the last of their promises runs out unless renewed, and the store's now.
type Live struct {
	Workers []string
	// Until is when, by the store's clock, the last promise runs out
	// unless its node heartbeats again.
	Until time.Time
	Now   time.Time
}

// LiveWorkers returns the workers of st whose liveness promise (a
// heartbeat's AliveAs) still runs by st's clock. A worker that never
// promised is not counted: nothing says when it is gone.
func LiveWorkers(ctx context.Context, st store.Store) (Live, error) {
	now, err := st.Now(ctx)
	if err != nil {
		return Live{}, err
	}
	ws, err := st.ListWorkers(ctx)
	if err != nil {
		return Live{}, err
	}
	live := Live{Now: now}
	for _, w := range ws {
		if !w.AliveUntil.IsZero() && !w.Dead(now) {
			live.Workers = append(live.Workers, w.ID)
			if w.AliveUntil.After(live.Until) {
				live.Until = w.AliveUntil
			}
		}
	}
	return live, nil
}

// CheckSource refuses a source that live nodes may be writing
// (*LiveError).
func CheckSource(ctx context.Context, src store.Store) error {
	live, err := LiveWorkers(ctx, src)
	if err != nil {
		return fmt.Errorf("reading the source's workers: %w", err)
	}
	if len(live.Workers) == 0 {
		return nil
	}
	return &LiveError{live}
}

// survey is a read of the whole source before the copy.
type survey struct {
	records, worlds int64
	ids, streams    []string
}

func surveySource(ctx context.Context, ex store.Exporter, keys bool) (survey, error) {
	var s survey
	err := ex.Export(ctx, func(r store.PortRecord) error {
		s.records++
		switch r.Kind {
		case store.PortKindWorld:
			s.worlds++
			if keys {
				s.ids = append(s.ids, r.World.ID)
			}
		case store.PortKindStream:
			if keys {
				s.streams = append(s.streams, r.Stream.Stream)
			}
		}
		return nil
	})
	return s, err
}

// checkCollisions looks up every world and stream of the source in dst.
func checkCollisions(ctx context.Context, dst store.Store, s survey) error {
	worlds := map[string]bool{}
	e := &CollisionError{}
	for _, id := range s.ids {
		worlds[id] = true
		_, err := dst.GetWorld(ctx, id)
		switch {
		case err == nil:
			e.Total++
			if len(e.Worlds) < maxNamed {
				e.Worlds = append(e.Worlds, id)
			}
		case !errors.Is(err, store.ErrWorldNotFound) && !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("looking up world %s in the target: %w", id, err)
		}
	}
	for _, id := range s.streams {
		if worlds[id] {
			continue // a world's stream: counted with its world
		}
		h, err := dst.Head(ctx, id)
		if err != nil {
			return fmt.Errorf("looking up stream %s in the target: %w", id, err)
		}
		if h > 0 {
			e.Total++
			if len(e.Worlds)+len(e.Streams) < maxNamed {
				e.Streams = append(e.Streams, id)
			}
		}
	}
	if e.Total > 0 {
		sort.Strings(e.Worlds)
		sort.Strings(e.Streams)
		return e
	}
	return nil
}

// Copy copies every record of src into dst (see the package doc for what
// it refuses) and finishes the import. It does not verify: call Verify.
// On an error part of the copy may be in dst already (each batch is one
// transaction, the whole copy is not): run it again with Resume to
// complete it.
func Copy(ctx context.Context, src, dst store.Store, o CopyOptions) (Result, error) {
	ex, im, err := porters(src, dst)
	if err != nil {
		return Result{}, err
	}
	clock := o.Clock
	if clock == nil {
		clock = time.Now
	}
	batch := o.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}
	every := o.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	start := clock()
	if !o.Force {
		if err := CheckSource(ctx, src); err != nil {
			return Result{}, err
		}
	}
	empty, err := im.Empty(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("reading the target: %w", err)
	}
	if !empty && !o.IntoNonEmpty && !o.Resume {
		return Result{}, fmt.Errorf("%w: it holds worlds or records already; copy into an empty store, pass --resume to complete an interrupted copy, or --into-nonempty to merge when no world collides", ErrTargetNotEmpty)
	}
	// A resumed copy finds the source's worlds in the target: the import
	// decides, record by record, whether they are the copy's.
	collide := !empty && !o.Resume
	var sv survey
	if o.Survey || collide {
		if sv, err = surveySource(ctx, ex, collide); err != nil {
			return Result{}, fmt.Errorf("reading the source: %w", err)
		}
		if collide {
			if err := checkCollisions(ctx, dst, sv); err != nil {
				return Result{}, err
			}
		}
	}

	res := Result{Records: map[store.PortKind]int64{}}
	var records int64
	last := start
	report := func(done bool) {
		if o.Progress == nil {
			return
		}
		now := clock()
		if !done && now.Sub(last) < every {
			return
		}
		last = now
		o.Progress(Progress{Records: records, Worlds: res.Worlds, Bytes: res.Bytes,
			TotalRecords: sv.records, TotalWorlds: sv.worlds, Elapsed: now.Sub(start).Seconds(), Done: done})
	}
	buf := make([]store.PortRecord, 0, batch)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if err := im.Import(ctx, buf); err != nil {
			return fmt.Errorf("importing records %d to %d: %w", records-int64(len(buf))+1, records, err)
		}
		for _, r := range buf {
			res.Records[r.Kind]++
		}
		buf = buf[:0]
		report(false)
		return nil
	}
	err = ex.Export(ctx, func(r store.PortRecord) error {
		if o.Transform != nil {
			kind := r.Kind
			keep, err := o.Transform(&r)
			if err != nil {
				return fmt.Errorf("transforming a %s record: %w", kind, err)
			}
			if !keep {
				res.Dropped++
				return nil
			}
			if r.Kind != kind {
				return fmt.Errorf("transform changed a %s record's kind to %s", kind, r.Kind)
			}
		}
		records++
		res.Bytes += recordBytes(r)
		if r.Kind == store.PortKindWorld {
			res.Worlds++
		}
		buf = append(buf, r)
		if len(buf) >= batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return res, err
	}
	if err := im.FinishImport(ctx); err != nil {
		return res, fmt.Errorf("finishing the import: %w", err)
	}
	res.Elapsed = clock().Sub(start)
	report(true)
	return res, nil
}

// recordBytes counts a record's opaque bytes, the bulk of a store.
func recordBytes(r store.PortRecord) int64 {
	switch r.Kind {
	case store.PortKindEvent:
		return int64(len(r.Event.Payload))
	case store.PortKindSnapshot:
		return int64(len(r.Snapshot.State))
	case store.PortKindInbox:
		return int64(len(r.Inbox.Payload))
	case store.PortKindEffect:
		return int64(len(r.Effect.Params) + len(r.Effect.ReceiptPayload))
	case store.PortKindTimer:
		return int64(len(r.Timer.Payload))
	}
	return 0
}
