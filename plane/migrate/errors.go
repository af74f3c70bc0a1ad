package migrate

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinels; every error of this package matches one of them (or a store
// error it wraps) with errors.Is.
var (
	// ErrBadSpec: a store spec is neither a SQLite path nor a valid
	// postgres:// DSN.
	ErrBadSpec = errors.New("migrate: bad store spec")
	// ErrSameStore: the source and the target name the same store.
	ErrSameStore = errors.New("migrate: source and target are the same store")
	// ErrTargetNotEmpty: the target holds records and no merge was asked.
	ErrTargetNotEmpty = errors.New("migrate: target store is not empty")
	// ErrCollision: a merge into a non-empty target found a world or
	// stream of the source already there.
	ErrCollision = errors.New("migrate: source and target share worlds")
	// ErrSourceLive: a node may still be writing the source.
	ErrSourceLive = errors.New("migrate: source store has live nodes")
	// ErrVerify: the target differs from the source.
	ErrVerify = errors.New("migrate: verification failed")
	// ErrUnsupported: a store that cannot export or import.
	ErrUnsupported = errors.New("migrate: store cannot export or import")
)

// LiveError names the workers whose liveness promise still runs on the
// source's clock. errors.Is(err, ErrSourceLive).
type LiveError struct{ Live }

func (e *LiveError) Error() string {
	return fmt.Sprintf("%s (%s, alive until %s by the store's clock, %s from now): a copy of a store being written misses every write after its snapshot; stop the nodes and wait for their promise to run out, or pass --force",
		ErrSourceLive, strings.Join(e.Workers, ", "), e.Until.UTC().Format(time.RFC3339), e.Until.Sub(e.Now).Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrSourceLive) hold.
func (e *LiveError) Unwrap() error { return ErrSourceLive }

// CollisionError names the worlds and streams found on both sides of a
// merge. errors.Is(err, ErrCollision).
type CollisionError struct {
	Worlds  []string // at most maxNamed
	Streams []string // free streams, at most maxNamed
	Total   int
}

func (e *CollisionError) Error() string {
	names := append(append([]string{}, e.Worlds...), e.Streams...)
	more := ""
	if e.Total > len(names) {
		more = fmt.Sprintf(" and %d more", e.Total-len(names))
	}
	return fmt.Sprintf("%s: %s%s exist in the target; nothing was copied", ErrCollision, strings.Join(names, ", "), more)
}

// Unwrap makes errors.Is(err, ErrCollision) hold.
func (e *CollisionError) Unwrap() error { return ErrCollision }

// VerifyError is a failed verification; Report says everything.
// errors.Is(err, ErrVerify).
type VerifyError struct{ Report *Report }

func (e *VerifyError) Error() string {
	r := e.Report
	var parts []string
	for _, c := range r.Counts {
		if !c.OK {
			parts = append(parts, fmt.Sprintf("%s records %d != %d", c.Kind, c.Source, c.Target))
		}
	}
	worlds := r.DifferingWorlds()
	if len(worlds) > 0 {
		named := worlds
		if len(named) > maxNamed {
			named = named[:maxNamed]
		}
		s := "worlds differ: " + strings.Join(named, ", ")
		if len(worlds) > len(named) {
			s += fmt.Sprintf(" and %d more", len(worlds)-len(named))
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%s: %s", ErrVerify, strings.Join(parts, "; "))
}

// Unwrap makes errors.Is(err, ErrVerify) hold.
func (e *VerifyError) Unwrap() error { return ErrVerify }

// maxNamed bounds the names an error's one line lists.
const maxNamed = 20
