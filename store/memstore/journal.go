package memstore

import (
	"context"
	"crypto/sha256"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// stream is one journal stream. runSeqs are contiguous from base+1 (this
// backend leaves no gaps, so every append is gapless, not only those under
// ExpectedHead), until Compact removes a prefix.
type stream struct {
	base    uint64         // head before the first append (a fork's or seed's height)
	records []store.Record // runSeq order; each stored once, never changed
	head    uint64
	// byKey is the idempotency index. It outlives compaction, with what
	// Appended.Conflict compares: a key once appended stays a duplicate for
	// the stream's life, and a changed record under it stays visible.
	byKey map[string]keyRecord
	// floor is the compaction floor (store.Journal.Floor) and floorAt the
	// latest persistedAt among the records compaction removed.
	floor   uint64
	floorAt time.Time
}

type keyRecord struct {
	appended    store.Appended
	eventType   string
	payloadHash [sha256.Size]byte
}

// differs asks contract.Conflict whether r, offered again under k's key,
// is another record than the one k kept.
func (k keyRecord) differs(r *store.Record) bool {
	sum := sha256.Sum256(r.Payload)
	return contract.Conflict(k.eventType, k.payloadHash[:], r.EventType, sum[:])
}

func (st *state) stream(id string) *stream {
	s := st.streams[id]
	if s == nil {
		s = &stream{byKey: map[string]keyRecord{}}
		st.streams[id] = s
	}
	return s
}

func (st *state) head(id string) uint64 {
	if s := st.streams[id]; s != nil {
		return s.head
	}
	return 0
}

// Append implements store.Journal.
func (s *backend) Append(ctx context.Context, streamID string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	now := s.now()
	_, worldFound := s.st.worlds[streamID]
	if err := contract.AppendFence(op, streamID, opts, worldFound, s.st.leaseRow(streamID), now); err != nil {
		return nil, err
	}
	p := s.st.planAppend(streamID, events, now)
	if err := contract.AppendHead(op, streamID, opts.ExpectedHead, p.from, p.fresh()); err != nil {
		return nil, err
	}
	s.st.applyAppend(p, events, now)
	return p.out, nil
}

// appendPlan is an append worked out but not yet applied, so that a Commit
// can check every part before it writes any.
type appendPlan struct {
	stream  string
	out     []store.Appended
	inserts []int  // indexes of the events to insert, in order
	from    uint64 // the head the plan was built on
	head    uint64 // the head once applied
}

// fresh says whether the plan brings any new event.
func (p appendPlan) fresh() bool { return len(p.inserts) > 0 }

// planAppend works out an append (mu held): it resolves duplicates against
// the stream and within the batch (Conflict as contract.Conflict decides)
// and numbers the new events head+1 … head+n. It decides nothing else: the
// caller asks the contract for the head's compare-and-swap (AppendHead for
// a plain Append, CycleHead for a world cycle) against p.from. The events
// are already validated.
func (st *state) planAppend(streamID string, events []store.Record, now time.Time) appendPlan {
	str := st.streams[streamID]
	head := st.head(streamID)
	p := appendPlan{stream: streamID, out: make([]store.Appended, len(events)), from: head}
	fresh := map[string]int{} // key -> index in events of its first new occurrence
	next := head
	for i := range events {
		ev := &events[i]
		if str != nil {
			if k, ok := str.byKey[ev.IdempotencyKey]; ok {
				a := k.appended
				a.Idempotent, a.Conflict = true, k.differs(ev)
				p.out[i] = a
				continue
			}
		}
		if j, ok := fresh[ev.IdempotencyKey]; ok {
			a := p.out[j]
			first := &events[j]
			firstSum, sum := sha256.Sum256(first.Payload), sha256.Sum256(ev.Payload)
			a.Idempotent = true
			a.Conflict = contract.Conflict(first.EventType, firstSum[:], ev.EventType, sum[:])
			p.out[i] = a
			continue
		}
		next++
		fresh[ev.IdempotencyKey] = i
		p.inserts = append(p.inserts, i)
		p.out[i] = store.Appended{EventID: ev.EventID, RunSeq: next, PersistedAt: now}
	}
	p.head = next
	return p
}

// applyAppend writes a planned append (mu held).
func (st *state) applyAppend(p appendPlan, events []store.Record, now time.Time) {
	if len(p.inserts) == 0 {
		return
	}
	str := st.stream(p.stream)
	for _, i := range p.inserts {
		r := events[i]
		r.StreamID = p.stream
		r.RunSeq = p.out[i].RunSeq
		r.PersistedAt = now
		r.Payload = cloneBytes(r.Payload)
		str.records = append(str.records, r)
		str.byKey[r.IdempotencyKey] = keyRecord{appended: p.out[i], eventType: r.EventType, payloadHash: sha256.Sum256(r.Payload)}
	}
	str.head = p.head
}

// Read implements store.Journal. A limit <= 0 means no limit.
func (s *backend) Read(ctx context.Context, streamID string, afterSeq uint64, limit int) ([]store.Record, error) {
	if err := s.begin(ctx, "read"); err != nil {
		return nil, err
	}
	defer s.end()
	str := s.st.streams[streamID]
	if str == nil {
		return nil, nil
	}
	if err := contract.ReadFloor(streamID, afterSeq, str.floor); err != nil {
		return nil, err
	}
	i := sort.Search(len(str.records), func(i int) bool { return str.records[i].RunSeq > afterSeq })
	var out []store.Record
	for ; i < len(str.records) && (limit <= 0 || len(out) < limit); i++ {
		out = append(out, cloneRecord(str.records[i]))
	}
	return out, nil
}

// Head implements store.Journal.
func (s *backend) Head(ctx context.Context, streamID string) (uint64, error) {
	if err := s.begin(ctx, "head"); err != nil {
		return 0, err
	}
	defer s.end()
	return s.st.head(streamID), nil
}

// Floor implements store.Journal.
func (s *backend) Floor(ctx context.Context, streamID string) (uint64, error) {
	if err := s.begin(ctx, "floor"); err != nil {
		return 0, err
	}
	defer s.end()
	if str := s.st.streams[streamID]; str != nil {
		return str.floor, nil
	}
	return 0, nil
}

// ReadWindow implements store.Journal. A limit <= 0 means no limit.
func (s *backend) ReadWindow(ctx context.Context, streamID string, from, to time.Time, limit int) ([]store.Record, error) {
	if err := s.begin(ctx, "read_window"); err != nil {
		return nil, err
	}
	defer s.end()
	str := s.st.streams[streamID]
	if str == nil {
		return nil, nil
	}
	if err := contract.WindowFloor(streamID, from, str.floor, str.floorAt); err != nil {
		return nil, err
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
