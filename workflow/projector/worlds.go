package projector

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/world"
)

// Outcomes counts a world's steps by how they ended (world.Outcome).
type Outcomes struct {
	OK           uint64
	Error        uint64
	Panic        uint64
	UnknownInput uint64
	Stale        uint64
	// Other counts records whose outcome this version does not know, and
	// Unreadable those whose payload is not a world step record at all.
	Other      uint64
	Unreadable uint64
}

// World is one row of the worlds list.
type World struct {
	ID string // the world's id, its journal's stream id
	// Head is the runSeq (height) of the world's last step record.
	Head uint64
	// LastStepAt is that record's persistedAt.
	LastStepAt time.Time
	// Steps counts the step records projected; a journal compacted below a
	// snapshot has fewer than Head. (A runner stops a compacted stream for
	// a projection rebuilt from runSeq 0 unless RunnerConfig.SkipCompacted
	// lets it start at the floor.)
	Steps    uint64
	Outcomes Outcomes
}

// Worlds is the worlds list: the in-memory projection of world journals,
// one World per stream with at least one WorldStepped record. Each record's
// outcome is read from its payload, the kernel's step record (see the
// world package's "Journal records"). Events of other types are ignored.
// Its readers are safe for concurrent use with Apply and return copies.
type Worlds struct {
	mu     sync.RWMutex
	gate   gate
	worlds map[string]*World
}

// NewWorlds returns an empty worlds list.
func NewWorlds() *Worlds { return &Worlds{worlds: map[string]*World{}} }

// Name implements Projector: "worlds".
func (*Worlds) Name() string { return "worlds" }

// InMemory implements InMemory.
func (*Worlds) InMemory() bool { return true }

func isWorldStepped(t string) bool { return t == world.EventWorldStepped }

// stepRecord is the part of the kernel's step record this projection
// reads.
type stepRecord struct {
	V       uint64        `cbor:"v"`
	Outcome world.Outcome `cbor:"outcome"`
}

// stepRecordVersion is the step record version whose outcome field this
// projection knows.
const stepRecordVersion = 1

// Apply implements Projector. It never fails.
func (w *Worlds) Apply(_ context.Context, stream string, e event.Envelope) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.gate.admit(stream, e, isWorldStepped) {
		return nil
	}
	row := w.worlds[stream]
	if row == nil {
		row = &World{ID: stream}
		w.worlds[stream] = row
	}
	row.Head, row.LastStepAt = e.RunSeq, e.PersistedAt
	row.Steps++
	var r stepRecord
	if err := event.Unmarshal(e.Payload, &r); err != nil || r.V != stepRecordVersion {
		row.Outcomes.Unreadable++
		return nil
	}
	switch r.Outcome {
	case world.OutcomeOK:
		row.Outcomes.OK++
	case world.OutcomeError:
		row.Outcomes.Error++
	case world.OutcomePanic:
		row.Outcomes.Panic++
	case world.OutcomeUnknownInput:
		row.Outcomes.UnknownInput++
	case world.OutcomeStale:
		row.Outcomes.Stale++
	default:
		row.Outcomes.Other++
	}
	return nil
}

// List returns every world, sorted by id.
func (w *Worlds) List() []World {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]World, 0, len(w.worlds))
	for _, row := range w.worlds {
		out = append(out, *row)
	}
	slices.SortFunc(out, func(a, b World) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Get returns the world with id id.
func (w *Worlds) Get(id string) (World, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	row, ok := w.worlds[id]
	if !ok {
		return World{}, false
	}
	return *row, true
}
