package sqlite

import (
	"context"
	"database/sql"

	"github.com/orrery-run/orrery/store"
)

// inboxWorld is what an enqueue needs of its world: its status and the
// last seq of its inbox. The seq is derived (items are never deleted), so
// an enqueue writes nothing to the worlds table.
type inboxWorld struct {
	id     string
	status store.WorldStatus
	last   int64
}

func (t *wtx) inboxWorld(op, world string) (inboxWorld, error) {
	w := inboxWorld{id: world}
	var status string
	found, err := t.queryRow(`SELECT status, (SELECT COALESCE(MAX(seq), 0) FROM inbox WHERE world = ?1) FROM worlds WHERE id = ?1`,
		[]any{world}, &status, &w.last)
	if err != nil {
		return w, err
	}
	if !found {
		return w, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	w.status = store.WorldStatus(status)
	return w, nil
}

// enqueue appends one item to world's inbox inside the request's
// transaction: the path of Enqueue, effect receipts, fired timers and fabric
// deliveries. A repeated non-empty dedupe key answers the first item's seq
// with dup=true. A fenced or archived world refuses new ingress unless
// anyStatus: receipts and fired timers are the durable answers to the
// world's own requests and are delivered whatever its status.
func (t *wtx) enqueue(op, world, kind string, payload []byte, dedupeKey string, anyStatus bool) (uint64, bool, error) {
	w, err := t.inboxWorld(op, world)
	if err != nil {
		return 0, false, err
	}
	if !anyStatus {
		if err := requireActive(op, world, w.status); err != nil {
			return 0, false, err
		}
	}
	return t.enqueueInto(op, w, kind, payload, dedupeKey)
}

// enqueueInto is enqueue once the world is known and its status checked.
func (t *wtx) enqueueInto(op string, w inboxWorld, kind string, payload []byte, dedupeKey string) (uint64, bool, error) {
	if kind == "" {
		return 0, false, store.Errorf(op, store.ErrInvalid, w.id, "empty kind")
	}
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

// Enqueue appends item to world's inbox (no lease needed).
func (s *Store) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	var (
		seq uint64
		dup bool
	)
	err := s.write(ctx, op, world, func(t *wtx) error {
		var err error
		seq, dup, err = t.enqueue(op, world, item.Kind, item.Payload, item.DedupeKey, false)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// ReadInbox returns up to limit items with seq > afterSeq, in seq order
// (limit <= 0: all of them).
func (s *Store) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	defer tx.Rollback()
	exists, err := s.rstmt(ctx, `SELECT 1 FROM worlds WHERE id = ?`)
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	var one int
	if err := tx.StmtContext(ctx, exists).QueryRowContext(ctx, world).Scan(&one); err == sql.ErrNoRows {
		return nil, store.Errorf(op, store.ErrWorldNotFound, world, "")
	} else if err != nil {
		return nil, dbErr(op, world, err)
	}
	items, err := s.rstmt(ctx, `SELECT seq, kind, payload, payload IS NOT NULL, dedupe_key, enqueued_at FROM inbox
		WHERE world = ? AND seq > ? ORDER BY seq LIMIT ?`)
	if err != nil {
		return nil, dbErr(op, world, err)
	}
	rows, err := tx.StmtContext(ctx, items).QueryContext(ctx, world, int64(afterSeq), sqlLimit(limit))
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
func (s *Store) Cursor(ctx context.Context, world string) (uint64, error) {
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

// DrainToJournal appends entries to the world's journal and moves its inbox
// cursor, in one transaction: fenced, then compare-and-swapped on the cursor
// and on the head (in that order). The drained items' dedupe records
// complete now; their retention starts here.
func (s *Store) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	const op = "drain"
	if err := validate(op, entries); err != nil {
		return nil, err
	}
	var out []store.Appended
	err := s.write(ctx, op, world, func(t *wtx) error {
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		var cur, last int64
		if _, err := t.queryRow(`SELECT inbox_cursor, (SELECT COALESCE(MAX(seq), 0) FROM inbox WHERE world = ?1) FROM worlds WHERE id = ?1`,
			[]any{world}, &cur, &last); err != nil {
			return err
		}
		if uint64(cur) != expectedCursor {
			return store.Errorf(op, store.ErrCursorMismatch, world, "expected cursor %d, cursor is %d", expectedCursor, cur)
		}
		if newCursor < expectedCursor {
			return store.Errorf(op, store.ErrInvalid, world, "the cursor cannot move back from %d to %d", expectedCursor, newCursor)
		}
		if newCursor > uint64(last) {
			return store.Errorf(op, store.ErrInvalid, world, "new cursor %d passes the last enqueued seq %d", newCursor, last)
		}
		head, err := t.head(world)
		if err != nil {
			return err
		}
		if uint64(head) != expectedHead {
			return store.Errorf(op, store.ErrHeadMismatch, world, "expected head %d, head is %d", expectedHead, head)
		}
		if out, err = t.append(op, world, entries, nil); err != nil {
			return err
		}
		if newCursor != uint64(cur) {
			if _, err := t.exec(`UPDATE worlds SET inbox_cursor = ? WHERE id = ?`, int64(newCursor), world); err != nil {
				return err
			}
			if _, err := t.exec(`UPDATE inbox_dedupe SET completed_at = ? WHERE world = ? AND seq > ? AND seq <= ? AND completed_at IS NULL`,
				t.nowNS, world, cur, int64(newCursor)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
