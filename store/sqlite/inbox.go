package sqlite

import (
	"context"
	"database/sql"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// inboxWorld is what an enqueue needs of its world: whether it exists, its
// status and the last seq of its inbox. The seq is derived (items are never
// deleted), so an enqueue writes nothing to the worlds table.
type inboxWorld struct {
	id     string
	found  bool
	status store.WorldStatus
	last   int64
}

func (t *wtx) inboxWorld(world string) (inboxWorld, error) {
	w := inboxWorld{id: world}
	var status string
	found, err := t.queryRow(`SELECT status, (SELECT COALESCE(MAX(seq), 0) FROM inbox WHERE world = ?1) FROM worlds WHERE id = ?1`,
		[]any{world}, &status, &w.last)
	w.found, w.status = found, store.WorldStatus(status)
	return w, err
}

// ingressWorld is inboxWorld for a producer's input (Enqueue, Send):
// contract.Ingress decides whether the world takes it.
func (t *wtx) ingressWorld(op, world string) (inboxWorld, error) {
	w, err := t.inboxWorld(world)
	if err != nil {
		return w, err
	}
	return w, contract.Ingress(op, world, w.found, w.status)
}

// deliver enqueues one of the store's own deliveries (an effect's receipt,
// a timer's firing): the durable answers to the world's own requests land
// whatever its status.
func (t *wtx) deliver(op, world, kind string, payload []byte, dedupeKey string) (uint64, bool, error) {
	w, err := t.inboxWorld(world)
	if err != nil {
		return 0, false, err
	}
	if !w.found {
		return 0, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	return t.enqueueInto(w, kind, payload, dedupeKey)
}

// enqueueInto appends one item to a world's inbox, once the world is known
// and allowed. A repeated non-empty dedupe key answers the first item's seq
// with dup=true.
func (t *wtx) enqueueInto(w inboxWorld, kind string, payload []byte, dedupeKey string) (uint64, bool, error) {
	seq := w.last + 1
	if dedupeKey != "" {
		// Claim the key first; a conflict is a duplicate.
		res, err := t.exec(`INSERT INTO inbox_dedupe (world, dedupe_key, seq) VALUES (?, ?, ?) ON CONFLICT (world, dedupe_key) DO NOTHING`,
			w.id, dedupeKey, seq)
		if err != nil {
			return 0, false, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, false, err
		} else if n == 0 {
			var first int64
			if _, err := t.queryRow(`SELECT seq FROM inbox_dedupe WHERE world = ? AND dedupe_key = ?`, []any{w.id, dedupeKey}, &first); err != nil {
				return 0, false, err
			}
			return uint64(first), true, nil
		}
	}
	if _, err := t.exec(`INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at) VALUES (?, ?, ?, ?, ?, ?)`,
		w.id, seq, kind, payload, dedupeKey, t.nowNS); err != nil {
		return 0, false, err
	}
	t.notify(store.TopicInbox(w.id))
	return uint64(seq), false, nil
}

// overloaded answers a bounded Enqueue before it writes: a live duplicate
// of item's key (dup), or ErrOverloaded when the world's backlog is at
// item's bound. It reads inside the write transaction, so no concurrent
// enqueue passes the bound with it.
func (t *wtx) overloaded(op string, w inboxWorld, item store.InboxItem) (uint64, bool, error) {
	if item.DedupeKey != "" {
		var first int64
		found, err := t.queryRow(`SELECT seq FROM inbox_dedupe WHERE world = ? AND dedupe_key = ?`, []any{w.id, item.DedupeKey}, &first)
		if err != nil || found {
			return uint64(first), found, err
		}
	}
	var cursor int64
	if _, err := t.queryRow(`SELECT inbox_cursor FROM worlds WHERE id = ?`, []any{w.id}, &cursor); err != nil {
		return 0, false, err
	}
	if n := store.Backlog(uint64(w.last), uint64(cursor)); store.Overloaded(n, item.MaxBacklog) {
		return 0, false, store.Errorf(op, store.ErrOverloaded, w.id, "%d items undrained, bound %d", n, item.MaxBacklog)
	}
	return 0, false, nil
}

// Enqueue appends a producer's item to world's inbox (no lease needed).
func (s *backend) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	var (
		seq uint64
		dup bool
	)
	err := s.write(ctx, op, world, func(t *wtx) error {
		w, err := t.ingressWorld(op, world)
		if err != nil {
			return err
		}
		if item.MaxBacklog != 0 {
			if seq, dup, err = t.overloaded(op, w, item); err != nil || dup {
				return err
			}
		}
		seq, dup, err = t.enqueueInto(w, item.Kind, item.Payload, item.DedupeKey)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// ReadInbox returns up to limit items with seq > afterSeq, in seq order
// (limit <= 0: all of them).
func (s *backend) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	// The statements are prepared before the transaction takes its
	// connection: preparing one needs a connection of the same pool, and
	// with every reader held by a transaction waiting to prepare, none
	// would ever come back.
	exists, err := s.rstmt(ctx, `SELECT 1 FROM worlds WHERE id = ?`)
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	items, err := s.rstmt(ctx, `SELECT seq, kind, payload, payload IS NOT NULL, dedupe_key, enqueued_at FROM inbox
		WHERE world = ? AND seq > ? ORDER BY seq LIMIT ?`)
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	defer tx.Rollback()
	var one int
	if err := tx.StmtContext(ctx, exists).QueryRowContext(ctx, world).Scan(&one); err == sql.ErrNoRows {
		return nil, store.Errorf(op, store.ErrWorldNotFound, world, "")
	} else if err != nil {
		return nil, dbErr(op, world, err)
	}
	rows, err := tx.StmtContext(ctx, items).QueryContext(ctx, world, seqBound(afterSeq), sqlLimit(limit))
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	defer rows.Close()
	var out []store.InboxItem
	for rows.Next() {
		var (
			it       store.InboxItem
			seq, at  int64
			nonEmpty bool
		)
		if err := rows.Scan(&seq, &it.Kind, &it.Payload, &nonEmpty, &it.DedupeKey, &at); err != nil {
			return nil, dbErr(op, world, err)
		}
		it.Seq, it.World, it.EnqueuedAt = uint64(seq), world, fromNS(at)
		it.Payload = blob(it.Payload, nonEmpty)
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, world, err)
	}
	return out, nil
}

// Cursor returns the seq of the last drained item (0 if none).
func (s *backend) Cursor(ctx context.Context, world string) (uint64, error) {
	const op = "cursor"
	if err := s.read(ctx, op); err != nil {
		return 0, err
	}
	var cur int64
	found, err := s.queryRow(ctx, `SELECT inbox_cursor FROM worlds WHERE id = ?`, []any{world}, &cur)
	if err != nil {
		return 0, dbErr(op, world, err)
	}
	if !found {
		return 0, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	return uint64(cur), nil
}
