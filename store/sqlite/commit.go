package sqlite

import (
	"context"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// The world cycle's commit (store.CommitBatch): one request of the group
// committer, hence one savepoint of the group's transaction, so the cursor,
// the journal, the effect queue, the timers, the snapshot and the world's
// status move together or not at all. DrainToJournal, Publish, Schedule, CancelTimer and
// PutSnapshot are the same request with a partial batch, so each step has
// exactly one implementation.

// commitMode says which parts of the contract a request enforces.
type commitMode uint8

const (
	// fullCycle (Commit, DrainToJournal) compare-and-swaps the cursor and
	// the head (contract.CycleCursor, CycleHead), and is the cycle that
	// contract.CancelMissing lets skip a timer that is not there.
	fullCycle commitMode = iota
	// sideEffects (Publish, Schedule, CancelTimer, PutSnapshot) leaves the
	// cursor and the journal alone.
	sideEffects
)

// Commit applies one world cycle, fenced by epoch.
func (s *backend) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	return s.commit(ctx, "commit", world, epoch, b, fullCycle)
}

func (s *backend) commit(ctx context.Context, op, world string, epoch uint64, b store.CommitBatch, mode commitMode) (store.CommitResult, error) {
	var out store.CommitResult
	err := s.write(ctx, op, world, func(t *wtx) error {
		var err error
		out, err = t.commit(op, world, epoch, &b, mode)
		return err
	})
	if err != nil {
		return store.CommitResult{}, err
	}
	return out, nil
}

// commit runs the batch's steps in the order of store.CommitBatch's doc.
// Any typed failure rolls the whole request back (its savepoint).
func (t *wtx) commit(op, world string, epoch uint64, b *store.CommitBatch, mode commitMode) (store.CommitResult, error) {
	var res store.CommitResult
	if err := t.fence(op, world, epoch); err != nil {
		return res, err
	}
	head, err := t.head(world)
	if err != nil {
		return res, err
	}
	var cursor int64
	if mode == fullCycle {
		var last int64
		if _, err := t.queryRow(`SELECT inbox_cursor, (SELECT COALESCE(MAX(seq), 0) FROM inbox WHERE world = ?1) FROM worlds WHERE id = ?1`,
			[]any{world}, &cursor, &last); err != nil {
			return res, err
		}
		if err := contract.CycleCursor(op, world, uint64(cursor), b.ExpectedCursor, b.NewCursor, uint64(last)); err != nil {
			return res, err
		}
		if err := contract.CycleHead(op, world, b.ExpectedHead, uint64(head)); err != nil {
			return res, err
		}
		if res.Appended, head, err = t.append(world, head, b.Entries); err != nil {
			return res, err
		}
	}
	res.Head = uint64(head)
	if res.Published, err = t.publish(world, b.Intents); err != nil {
		return res, err
	}
	for _, ts := range b.Timers {
		scheduled, err := t.schedule(world, ts)
		if err != nil {
			return res, err
		}
		if scheduled {
			res.Scheduled++
		}
	}
	for _, h := range b.CancelTimers {
		found, err := t.cancelTimer(world, h)
		if err != nil {
			return res, err
		}
		if found {
			res.Cancelled++
		} else if err := contract.CancelMissing(op, world, h, mode == fullCycle); err != nil {
			return res, err
		}
	}
	if b.Snapshot != nil {
		if err := t.putSnapshot(op, world, *b.Snapshot, head); err != nil {
			return res, err
		}
	}
	if mode == fullCycle && b.NewCursor != uint64(cursor) {
		// The drained items' dedupe keys complete now: their retention
		// starts here, recorded once for the whole move (see
		// migrations/0003_inbox_drains.sql).
		if _, err := t.exec(`UPDATE worlds SET inbox_cursor = ? WHERE id = ?`, int64(b.NewCursor), world); err != nil {
			return res, err
		}
		if _, err := t.exec(`INSERT INTO inbox_drains (world, upto, drained_at) VALUES (?, ?, ?)`,
			world, int64(b.NewCursor), t.nowNS); err != nil {
			return res, err
		}
	}
	// Last, as CommitBatch orders it: the world leaves active with the
	// cycle that recorded why, and its lease ends in this same request.
	for _, h := range b.Withdraw {
		n, err := t.withdraw(world, h)
		if err != nil {
			return res, err
		}
		res.Withdrawn += n
	}
	if b.Status != nil {
		n, err := t.setStatus(op, world, b.Status.Status, b.Status.Reason)
		if err != nil {
			return res, err
		}
		res.Withdrawn += n
	}
	return res, nil
}

// DrainToJournal is a Commit of only a cursor move and entries: the same
// request, fenced, compare-and-swapped on the cursor and on the head.
func (s *backend) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	res, err := s.commit(ctx, "drain", world, epoch, store.CommitBatch{
		ExpectedCursor: expectedCursor, NewCursor: newCursor, ExpectedHead: expectedHead, Entries: entries,
	}, fullCycle)
	if err != nil {
		return nil, err
	}
	return res.Appended, nil
}
