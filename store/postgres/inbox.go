package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
)

// Enqueue implements store.Inbox: a producer's input (the front's CheckIngress keeps
// it out of the store's own kinds and key namespaces), accepted unless the
// world is archived (contract.Ingress).
func (s *backend) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	if err := s.begin(op); err != nil {
		return 0, false, err
	}
	return s.deliver(&deliveryReq{ctx: ctx, op: op, kind: dEnqueue, world: world,
		itemKind: item.Kind, payload: item.Payload, key: item.DedupeKey, maxBacklog: item.MaxBacklog})
}

// ReadInbox implements store.Inbox. A limit <= 0 means no limit.
func (s *backend) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	after := seqArg(afterSeq)
	var out []store.InboxItem
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.db.Query(ctx, `SELECT seq, kind, payload, coalesce(dedupe_key, ''), enqueued_at_ns
			FROM inbox WHERE world = $1 AND seq > $2 ORDER BY seq LIMIT $3`, world, after, limitArg(limit))
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.InboxItem, error) {
			it := store.InboxItem{World: world}
			var seq, at int64
			err := row.Scan(&seq, &it.Kind, &it.Payload, &it.DedupeKey, &at)
			it.Seq, it.EnqueuedAt = uint64(seq), fromNS(at)
			return it, err
		})
		if err != nil || len(out) > 0 {
			return err
		}
		return s.worldExists(ctx, op, world)
	})
	return out, err
}

// Cursor implements store.Inbox.
func (s *backend) Cursor(ctx context.Context, world string) (uint64, error) {
	const op = "cursor"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var c int64
	err := s.retry(ctx, op, world, func() error {
		err := s.db.QueryRow(ctx, `SELECT coalesce((SELECT inbox_cursor FROM streams WHERE stream = x.world), 0)
			FROM worlds x WHERE x.world = $1`, world).Scan(&c)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		return err
	})
	return uint64(c), err
}
