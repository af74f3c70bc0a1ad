package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// enqueue appends one item to w's inbox (mu held) unless dedupeKey is known,
// in which case it answers the existing seq and dup=true.
func (st *state) enqueue(w *world, kind string, payload []byte, dedupeKey string, now time.Time) (uint64, bool) {
	if dedupeKey != "" {
		if k, ok := w.inboxKeys[dedupeKey]; ok {
			return k.seq, true
		}
	}
	w.lastSeq++
	w.inbox = append(w.inbox, store.InboxItem{
		Seq: w.lastSeq, World: w.rec.ID, Kind: kind, Payload: cloneBytes(payload),
		DedupeKey: dedupeKey, EnqueuedAt: now,
	})
	if dedupeKey != "" {
		w.inboxKeys[dedupeKey] = &inboxKey{seq: w.lastSeq}
	}
	st.notify(store.TopicInbox(w.rec.ID))
	return w.lastSeq, false
}

// worldStatus is world's status as the contract's decisions read it (""
// when there is no such world) (mu held).
func (st *state) worldStatus(id string) store.WorldStatus {
	if w, ok := st.worlds[id]; ok {
		return w.rec.Status
	}
	return ""
}

// ingress returns the world a producer's input is for (contract.Ingress).
func (st *state) ingress(op, id string) (*world, error) {
	w, ok := st.worlds[id]
	var status store.WorldStatus
	if ok {
		status = w.rec.Status
	}
	return w, contract.Ingress(op, id, ok, status)
}

// Enqueue implements store.Inbox.
func (s *backend) Enqueue(ctx context.Context, worldID string, item store.InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.end()
	w, err := s.st.ingress(op, worldID)
	if err != nil {
		return 0, false, err
	}
	if item.DedupeKey != "" {
		if k, ok := w.inboxKeys[item.DedupeKey]; ok {
			return k.seq, true, nil
		}
	}
	if store.Overloaded(store.Backlog(w.lastSeq, w.cursor), item.MaxBacklog) {
		return 0, false, store.Errorf(op, store.ErrOverloaded, worldID, "%d items undrained, bound %d", store.Backlog(w.lastSeq, w.cursor), item.MaxBacklog)
	}
	seq, dup := s.st.enqueue(w, item.Kind, item.Payload, item.DedupeKey, s.now())
	return seq, dup, nil
}

// ReadInbox implements store.Inbox. A limit <= 0 means no limit.
func (s *backend) ReadInbox(ctx context.Context, worldID string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	w, ok := s.st.worlds[worldID]
	if !ok {
		return nil, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	i := sort.Search(len(w.inbox), func(i int) bool { return w.inbox[i].Seq > afterSeq })
	var out []store.InboxItem
	for ; i < len(w.inbox) && (limit <= 0 || len(out) < limit); i++ {
		it := w.inbox[i]
		it.Payload = cloneBytes(it.Payload)
		out = append(out, it)
	}
	return out, nil
}

// Cursor implements store.Inbox.
func (s *backend) Cursor(ctx context.Context, worldID string) (uint64, error) {
	const op = "cursor"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.end()
	w, ok := s.st.worlds[worldID]
	if !ok {
		return 0, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	return w.cursor, nil
}
