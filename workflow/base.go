package workflow

import (
	"context"
	"maps"
	"slices"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// A run that continues as new starts each generation afresh, but its
// journal keeps every generation's records. So that a worker taking the
// run over (and a client reading it) does not read them all, the holder
// stores a snapshot of the run's history at each generation's marker: what
// the fold of the journal up to the marker says, which is all a later
// generation needs (the signals and controls taken, the discarded steps'
// attempt numbers, the run's attributes). A load starts from the latest
// such snapshot and folds only the events after it. A snapshot that is
// missing (its write failed, or the run predates them) or that does not
// decode only costs the full fold.

// historyBase is the snapshot of a history at a generation's marker.
type historyBase struct {
	V          int               `cbor:"v"`
	Head       uint64            `cbor:"head"`
	Version    uint64            `cbor:"version"`
	Events     int               `cbor:"events"`
	Queued     bool              `cbor:"queued,omitempty"`
	Started    bool              `cbor:"started,omitempty"`
	Input      cbor.RawMessage   `cbor:"input"`
	Generation uint64            `cbor:"generation"`
	Consumed   []uint64          `cbor:"consumed,omitempty"`
	Controls   []uint64          `cbor:"controls,omitempty"`
	Pauses     uint64            `cbor:"pauses,omitempty"`
	Resumes    uint64            `cbor:"resumes,omitempty"`
	CancelSeq  uint64            `cbor:"cancel_seq,omitempty"`
	Attrs      map[string]string `cbor:"attrs,omitempty"`
	Reset      []baseStep        `cbor:"reset,omitempty"`
}

// baseStep is a step a generation left behind: a re-run of its id
// continues its attempt numbers.
type baseStep struct {
	ID      string `cbor:"id"`
	Kind    string `cbor:"kind"`
	Attempt uint64 `cbor:"attempt"`
}

const baseVersion = 1

// base is h's snapshot, if h stands at a generation's marker (no step of
// the new generation yet, not blocked, not ended).
func (h *history) base() (historyBase, bool) {
	if h.generation == 0 || len(h.steps) > 0 || h.terminal != nil || h.blocked != "" {
		return historyBase{}, false
	}
	b := historyBase{V: baseVersion, Head: h.head, Version: h.version, Events: h.events, Queued: h.queued, Started: h.started,
		Input: h.input, Generation: h.generation, Pauses: h.pauses, Resumes: h.resumes, CancelSeq: h.cancelSeq,
		Attrs: h.attrs, Consumed: slices.Sorted(maps.Keys(h.consumed)), Controls: slices.Sorted(maps.Keys(h.controls))}
	for _, id := range slices.Sorted(maps.Keys(h.reset)) {
		s := h.reset[id]
		b.Reset = append(b.Reset, baseStep{ID: id, Kind: s.kind, Attempt: s.attempt})
	}
	return b, true
}

// restore makes h (a new history) what b says.
func (h *history) restore(b historyBase) {
	h.head, h.version, h.events, h.queued, h.started, h.input = b.Head, b.Version, b.Events, b.Queued, b.Started, b.Input
	h.generation, h.pauses, h.resumes, h.cancelSeq = b.Generation, b.Pauses, b.Resumes, b.CancelSeq
	h.attrs = maps.Clone(b.Attrs)
	for _, s := range b.Consumed {
		h.consumed[s] = true
	}
	for _, s := range b.Controls {
		h.controls[s] = true
	}
	if len(b.Reset) > 0 {
		h.reset = make(map[string]*stepHist, len(b.Reset))
		for _, s := range b.Reset {
			h.reset[s.ID] = &stepHist{id: s.ID, kind: s.Kind, attempt: s.Attempt, settled: s.Attempt}
		}
	}
}

// saveBase stores the run's history snapshot after a generation's marker
// was written. It is best effort: without it a load folds the whole
// journal.
func (r *runner) saveBase(ctx context.Context) {
	b, ok := r.h.base()
	if !ok {
		return
	}
	state, err := event.Marshal(b)
	if err != nil {
		return
	}
	_ = r.st.PutSnapshot(ctx, r.id, r.epoch, store.Snapshot{World: r.id, Height: b.Head, State: state,
		StateHash: hashOf("orrery.workflow.base", string(state))})
}

// loadProbe is the first page a load reads: a journal shorter than it is
// folded from its start, with no snapshot asked for (most runs); a longer
// one is looked up for a generation snapshot to skip ahead from.
const loadProbe = 64

// load reads run runID's history. A short journal is folded whole; a long
// one from its latest generation snapshot, if one is stored past what the
// first page read and decodes, then the events after it. It returns the
// number of events it read from the journal.
func (h *history) load(ctx context.Context, st store.Store, runID string) (read int, err error) {
	var after uint64
	limit := loadProbe
	for page := 0; ; page++ {
		evs, err := st.Read(ctx, runID, after, limit)
		if err != nil {
			return read, err
		}
		read += len(evs)
		for i := range evs {
			if err := h.apply(&evs[i]); err != nil {
				return read, err
			}
			after = evs[i].RunSeq
		}
		if len(evs) < limit {
			return read, nil
		}
		if page == 0 {
			if b, ok := loadBase(ctx, st, runID); ok && b.Head > after {
				fresh := newHistory()
				fresh.restore(b)
				*h = *fresh
				after = b.Head
			}
			limit = 512
		}
	}
}

// loadBase is run runID's latest generation snapshot, if one is stored
// and decodes.
func loadBase(ctx context.Context, st store.Store, runID string) (historyBase, bool) {
	s, ok, err := st.ActiveSnapshot(ctx, runID)
	if err != nil || !ok {
		return historyBase{}, false
	}
	var b historyBase
	if event.Unmarshal(s.State, &b) != nil || b.V != baseVersion || b.Head != s.Height || b.Generation == 0 {
		return historyBase{}, false
	}
	return b, true
}
