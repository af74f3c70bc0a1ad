package sqlite

import (
	"context"
	"time"

	"github.com/orrery-run/orrery/store/internal/contract"
)

// SweepDedupe removes the dedupe records that completed at least the
// retention ago, and returns how many:
//
//   - inbox dedupe keys, completed when their item is drained to the
//     journal (a key of an item still waiting in the inbox is pending);
//   - done effects and delivered timers, when contract.Sweepable says so:
//     the world's cursor has passed the receipt's (firing's) inbox seq, so
//     a world offline past the retention can never re-publish an intent
//     whose receipt it has not read;
//   - fabric message ids, completed at delivery.
//
// Journal idempotency keys are not dedupe records of this kind: they are
// the append authority's and are never swept.
func (s *backend) SweepDedupe(ctx context.Context) (int, error) {
	const op = "sweep_dedupe"
	retention := s.cfg.retention
	var total int
	err := s.write(ctx, op, "", func(t *wtx) error {
		total = 0
		// The time-ordered indexes (completed_at) select by
		// contract.SweepCutoff; contract.Sweepable decides each done
		// effect and delivered timer.
		if t.now.Sub(minNS) < retention {
			return nil // nothing stored can be that old
		}
		cutoff := contract.SweepCutoff(t.now, retention).UnixNano()
		n, err := t.sweepInboxKeys(cutoff)
		if err != nil {
			return err
		}
		total += n
		res, err := t.exec(`DELETE FROM fabric_dedupe WHERE completed_at <= ?`, cutoff)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		if err != nil {
			return err
		}
		total += int(m)
		// A withdrawn effect delivered nothing: its record goes once the
		// retention has passed since the withdrawal.
		if m, err := t.rowsAffected(`DELETE FROM effects WHERE state = 'withdrawn' AND completed_at <= ?`, cutoff); err != nil {
			return err
		} else {
			total += m
		}
		for _, table := range []struct{ candidates, remove string }{
			{`SELECT e.intent_hash, e.completed_at, e.inbox_seq, w.inbox_cursor FROM effects e JOIN worlds w ON w.id = e.world
				WHERE e.state = 'done' AND e.completed_at <= ? ORDER BY e.completed_at, e.intent_hash`,
				`DELETE FROM effects WHERE intent_hash = ? AND state = 'done'`},
			{`SELECT t.intent_hash, t.completed_at, t.inbox_seq, w.inbox_cursor FROM timers t JOIN worlds w ON w.id = t.world
				WHERE t.state = 'delivered' AND t.completed_at <= ? ORDER BY t.completed_at, t.intent_hash`,
				`DELETE FROM timers WHERE intent_hash = ? AND state = 'delivered'`},
		} {
			n, err := t.sweepConsumed(table.candidates, table.remove, cutoff, retention)
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return total, nil
}

// sweepInboxKeys removes the inbox dedupe keys whose item a drain at or
// before cutoff passed, and those drains. Drains are read in the order they
// were written and the scan stops at the first one newer than cutoff: a
// clock moved backwards can only delay a sweep, never bring one forward.
func (t *wtx) sweepInboxKeys(cutoff int64) (int, error) {
	rows, err := t.query(`SELECT rowid, world, upto, drained_at FROM inbox_drains ORDER BY rowid`)
	if err != nil {
		return 0, err
	}
	upto := make(map[string]int64)
	var last int64
	for rows.Next() {
		var (
			id, seq, at int64
			world       string
		)
		if err := rows.Scan(&id, &world, &seq, &at); err != nil {
			rows.Close()
			return 0, err
		}
		if at > cutoff {
			break
		}
		last = id
		upto[world] = max(upto[world], seq)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if last == 0 {
		return 0, nil
	}
	var total int
	for world, seq := range upto {
		res, err := t.exec(`DELETE FROM inbox_dedupe WHERE world = ? AND seq <= ?`, world, seq)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		total += int(n)
	}
	if _, err := t.exec(`DELETE FROM inbox_drains WHERE rowid <= ?`, last); err != nil {
		return 0, err
	}
	return total, nil
}

// sweepConsumed deletes the candidate rows contract.Sweepable allows.
func (t *wtx) sweepConsumed(candidates, remove string, cutoff int64, retention time.Duration) (int, error) {
	rows, err := t.query(candidates, cutoff)
	if err != nil {
		return 0, err
	}
	var sweep []string
	for rows.Next() {
		var (
			hash                string
			completed, inboxSeq int64
			cursor              int64
		)
		if err := rows.Scan(&hash, &completed, &inboxSeq, &cursor); err != nil {
			rows.Close()
			return 0, err
		}
		if contract.Sweepable(fromNS(completed), uint64(inboxSeq), uint64(cursor), retention, t.now) {
			sweep = append(sweep, hash)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	for _, h := range sweep {
		if _, err := t.exec(remove, h); err != nil {
			return 0, err
		}
	}
	return len(sweep), nil
}
