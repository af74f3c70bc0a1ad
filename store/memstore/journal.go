package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
)

// stream is one journal stream. runSeqs are contiguous from base+1 (this
// backend leaves no gaps), until Compact removes a prefix.
type stream struct {
	base    uint64         // head before the first append (a fork's or seed's height)
	records []store.Record // runSeq order; each stored once, never changed
	head    uint64
	// byKey is the idempotency index. It outlives compaction: a key once
	// appended stays a duplicate for the stream's life.
	byKey map[string]store.Appended
}

func (st *state) stream(id string) *stream {
	s := st.streams[id]
	if s == nil {
		s = &stream{byKey: map[string]store.Appended{}}
		st.streams[id] = s
	}
	return s
}

// Append implements store.Journal.
func (s *Store) Append(ctx context.Context, streamID string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	now := s.now()
	if opts.Fence != nil {
		if err := s.st.fence(op, opts.Fence.World, opts.Fence.Epoch, now); err != nil {
			return nil, err
		}
	}
	return s.st.append(op, streamID, events, opts.ExpectedHead, false, now)
}

// append is the append authority inside a transaction (mu held): validate
// every event, resolve duplicates against the stream and within the batch,
// compare-and-swap the head (skipped when nothing is new, unless
// alwaysCheckHead), then insert. Any error leaves the stream unchanged.
func (st *state) append(op, streamID string, events []store.Record, expectedHead *uint64, alwaysCheckHead bool, now time.Time) ([]store.Appended, error) {
	if streamID == "" {
		return nil, store.Errorf(op, store.ErrInvalid, "", "empty stream")
	}
	for i := range events {
		if err := store.CheckRecord(&events[i]); err != nil {
			if e, ok := err.(*store.Error); ok {
				e.Op = op
			}
			return nil, err
		}
	}
	str := st.streams[streamID]
	var head uint64
	if str != nil {
		head = str.head
	}
	out := make([]store.Appended, len(events))
	fresh := map[string]int{} // key -> index in events of its first new occurrence
	var inserts []int
	next := head
	for i, ev := range events {
		if str != nil {
			if a, ok := str.byKey[ev.IdempotencyKey]; ok {
				a.Idempotent = true
				out[i] = a
				continue
			}
		}
		if j, ok := fresh[ev.IdempotencyKey]; ok {
			a := out[j]
			a.Idempotent = true
			out[i] = a
			continue
		}
		next++
		fresh[ev.IdempotencyKey] = i
		inserts = append(inserts, i)
		out[i] = store.Appended{EventID: ev.EventID, RunSeq: next, PersistedAt: now}
	}
	if expectedHead != nil && (len(inserts) > 0 || alwaysCheckHead) && *expectedHead != head {
		return nil, store.Errorf(op, store.ErrHeadMismatch, "", "stream %s: head is %d, expected %d", streamID, head, *expectedHead)
	}
	if len(inserts) == 0 {
		return out, nil
	}
	str = st.stream(streamID)
	for _, i := range inserts {
		r := events[i]
		r.StreamID = streamID
		r.RunSeq = out[i].RunSeq
		r.PersistedAt = now
		r.Payload = cloneBytes(r.Payload)
		str.records = append(str.records, r)
		str.byKey[r.IdempotencyKey] = out[i]
	}
	str.head = next
	return out, nil
}

// Read implements store.Journal. A limit <= 0 means no limit.
func (s *Store) Read(ctx context.Context, streamID string, afterSeq uint64, limit int) ([]store.Record, error) {
	if err := s.begin(ctx, "read"); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	str := s.st.streams[streamID]
	if str == nil {
		return nil, nil
	}
	i := sort.Search(len(str.records), func(i int) bool { return str.records[i].RunSeq > afterSeq })
	var out []store.Record
	for ; i < len(str.records) && (limit <= 0 || len(out) < limit); i++ {
		out = append(out, cloneRecord(str.records[i]))
	}
	return out, nil
}

// Head implements store.Journal.
func (s *Store) Head(ctx context.Context, streamID string) (uint64, error) {
	if err := s.begin(ctx, "head"); err != nil {
		return 0, err
	}
	defer s.st.mu.Unlock()
	if str := s.st.streams[streamID]; str != nil {
		return str.head, nil
	}
	return 0, nil
}

// ReadWindow implements store.Journal. A limit <= 0 means no limit.
func (s *Store) ReadWindow(ctx context.Context, streamID string, from, to time.Time, limit int) ([]store.Record, error) {
	if err := s.begin(ctx, "read_window"); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	str := s.st.streams[streamID]
	if str == nil {
		return nil, nil
	}
	var out []store.Record
	for _, r := range str.records {
		if limit > 0 && len(out) >= limit {
			break
		}
		if !r.PersistedAt.Before(from) && r.PersistedAt.Before(to) {
			out = append(out, cloneRecord(r))
		}
	}
	return out, nil
}

func cloneRecord(r store.Record) store.Record {
	r.Payload = cloneBytes(r.Payload)
	return r
}

// ---- snapshots ----

// PutSnapshot implements store.Snapshots. The first snapshot stored at a
// height stays: a second one at the same height is ignored (replay makes
// them equal anyway).
func (s *Store) PutSnapshot(ctx context.Context, world string, epoch uint64, snap store.Snapshot) error {
	const op = "put_snapshot"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.st.mu.Unlock()
	now := s.now()
	if err := s.st.fence(op, world, epoch, now); err != nil {
		return err
	}
	w := s.st.worlds[world]
	if _, ok := w.snapshots[snap.Height]; !ok {
		snap.World = world
		snap.State = cloneBytes(snap.State)
		snap.CreatedAt = now
		w.snapshots[snap.Height] = snap
	}
	if !w.hasBaseline || snap.Height > w.baseline {
		w.hasBaseline, w.baseline = true, snap.Height
	}
	return nil
}

// ActiveSnapshot implements store.Snapshots.
func (s *Store) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	const op = "active_snapshot"
	if err := s.begin(ctx, op); err != nil {
		return store.Snapshot{}, false, err
	}
	defer s.st.mu.Unlock()
	w, ok := s.st.worlds[world]
	if !ok {
		return store.Snapshot{}, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	if !w.hasBaseline {
		return store.Snapshot{}, false, nil
	}
	snap := w.snapshots[w.baseline]
	snap.State = cloneBytes(snap.State)
	return snap, true, nil
}

// Compact implements store.Snapshots.
func (s *Store) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	const op = "compact"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.st.mu.Unlock()
	if err := s.st.fence(op, world, epoch, s.now()); err != nil {
		return 0, err
	}
	w := s.st.worlds[world]
	str := s.st.streams[world]
	if !w.hasBaseline || w.baseline <= retain || str == nil {
		return 0, nil
	}
	cut := w.baseline - retain
	n := sort.Search(len(str.records), func(i int) bool { return str.records[i].RunSeq > cut })
	str.records = append([]store.Record(nil), str.records[n:]...)
	return n, nil
}
