package postgres

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// Commit implements store.Store: the world cycle's one transaction,
// group-committed with other appends and commits (see append.go).
func (s *backend) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	res, err := s.commitCycle(ctx, "commit", world, epoch, &b)
	if err != nil {
		return store.CommitResult{}, err
	}
	return res, nil
}

// DrainToJournal implements store.Inbox: a Commit of only a cursor move
// and entries.
func (s *backend) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	res, err := s.commitCycle(ctx, "drain", world, epoch, &store.CommitBatch{
		ExpectedCursor: expectedCursor, NewCursor: newCursor, ExpectedHead: expectedHead, Entries: entries,
	})
	if err != nil {
		return nil, err
	}
	return res.Appended, nil
}

func (s *backend) commitCycle(ctx context.Context, op, world string, epoch uint64, b *store.CommitBatch) (store.CommitResult, error) {
	if err := s.begin(op); err != nil {
		return store.CommitResult{}, err
	}
	r := newAppendReq(ctx, op, world, b.Entries)
	head := b.ExpectedHead
	r.head, r.commit = &head, &commitReq{epoch: epoch, b: b}
	if err := s.commitAppend(r); err != nil {
		return store.CommitResult{}, err
	}
	res := store.CommitResult{Appended: r.res.out, Head: r.res.head,
		Published: r.res.published, Scheduled: r.res.scheduled, Cancelled: r.res.cancelled, Withdrawn: r.res.withdrawn}
	var topics []string
	if res.Published > 0 {
		topics = append(topics, store.TopicEffects)
	}
	if res.Scheduled > 0 || res.Cancelled > 0 {
		topics = append(topics, store.TopicTimers)
	}
	if r.res.statusChanged {
		topics = append(topics, store.TopicAssignments)
	}
	if r.res.leaseEnded {
		topics = append(topics, store.TopicLeases)
	}
	s.hint(topics...)
	return res, nil
}
