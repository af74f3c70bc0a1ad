package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// Commit implements store.Store: the world cycle's one transaction. Every
// part is checked (fence, cursor, head, snapshot) before any is written,
// so a failure leaves everything as it was.
func (s *backend) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	const op = "commit"
	if err := s.begin(ctx, op); err != nil {
		return store.CommitResult{}, err
	}
	defer s.end()
	return s.commit(op, world, epoch, &b)
}

// DrainToJournal implements store.Inbox: a Commit of a cursor move and
// entries only, through the same code.
func (s *backend) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	const op = "drain"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	res, err := s.commit(op, world, epoch, &store.CommitBatch{
		ExpectedCursor: expectedCursor, NewCursor: newCursor, ExpectedHead: expectedHead, Entries: entries,
	})
	return res.Appended, err
}

func (s *backend) commit(op, worldID string, epoch uint64, b *store.CommitBatch) (store.CommitResult, error) {
	st := s.st
	now := s.now()
	if err := st.fence(op, worldID, epoch, now); err != nil {
		return store.CommitResult{}, err
	}
	w := st.worlds[worldID]
	if err := contract.CycleCursor(op, worldID, w.cursor, b.ExpectedCursor, b.NewCursor, w.lastSeq); err != nil {
		return store.CommitResult{}, err
	}
	p := st.planAppend(worldID, b.Entries, now)
	if err := contract.CycleHead(op, worldID, b.ExpectedHead, p.from); err != nil {
		return store.CommitResult{}, err
	}
	var err error
	writeSnap := false
	if b.Snapshot != nil {
		if writeSnap, err = st.planSnapshot(op, worldID, *b.Snapshot, p.head); err != nil {
			return store.CommitResult{}, err
		}
	}

	var move statusMove
	if b.Status != nil {
		// The fence proved the world active, and the front allows only
		// paused or archived: the move is decided here all the same, before
		// anything is written.
		if move, err = st.planStatus(op, w, b.Status.Status, b.Status.Reason); err != nil {
			return store.CommitResult{}, err
		}
	}

	// Nothing can fail from here on.
	st.applyAppend(p, b.Entries, now)
	res := store.CommitResult{Appended: p.out, Head: p.head}
	st.drainTo(w, b.NewCursor, now)
	res.Published = st.publish(worldID, b.Intents, now)
	for _, t := range b.Timers {
		if st.schedule(worldID, t) {
			res.Scheduled++
		}
	}
	for _, h := range b.CancelTimers {
		// contract.CancelMissing skips a timer that is not there in a
		// cycle, so this cannot fail.
		if gone, _ := st.cancelTimer(op, worldID, h, true); gone {
			res.Cancelled++
		}
	}
	if res.Scheduled > 0 || res.Cancelled > 0 {
		st.notify(store.TopicTimers)
	}
	if b.Snapshot != nil {
		st.applySnapshot(worldID, *b.Snapshot, writeSnap, now)
	}
	res.Withdrawn = st.withdraw(worldID, b.Withdraw, false, now)
	// Last, as CommitBatch orders it: the world leaves active and its
	// lease ends with the cycle that recorded why.
	if b.Status != nil {
		res.Withdrawn += st.applyStatus(move, now)
	}
	return res, nil
}

// drainTo moves w's cursor to newCursor (mu held); the drained items'
// dedupe keys complete now.
func (st *state) drainTo(w *world, newCursor uint64, now time.Time) {
	i := sort.Search(len(w.inbox), func(i int) bool { return w.inbox[i].Seq > w.cursor })
	for ; i < len(w.inbox) && w.inbox[i].Seq <= newCursor; i++ {
		if k, ok := w.inboxKeys[w.inbox[i].DedupeKey]; ok && k.seq == w.inbox[i].Seq {
			k.drained, k.drainedAt = true, now
		}
	}
	if newCursor != w.cursor {
		w.drains = append(w.drains, store.PortDrain{World: w.rec.ID, Upto: newCursor, DrainedAt: now})
	}
	w.cursor = newCursor
}
