package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// SweepDedupe implements store.Dedupe. Inbox items themselves stay.
func (s *backend) SweepDedupe(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "sweep_dedupe"); err != nil {
		return 0, err
	}
	defer s.end()
	now := s.now()
	// A record with no consumption to wait for goes once it completed by
	// the cutoff; an effect's or timer's asks contract.Sweepable.
	cutoff := contract.SweepCutoff(now, s.retention)
	gone := func(completedAt time.Time) bool { return !completedAt.After(cutoff) }
	n := 0
	for _, w := range s.st.worlds {
		for key, k := range w.inboxKeys {
			if k.drained && gone(k.drainedAt) {
				delete(w.inboxKeys, key)
				n++
			}
		}
		w.drains = slices.DeleteFunc(w.drains, func(d store.PortDrain) bool { return gone(d.DrainedAt) })
		for id, r := range w.fabric {
			if gone(r.completedAt) {
				delete(w.fabric, id)
				n++
			}
		}
	}
	// An effect's or timer's record goes only once its world has consumed
	// the delivery: a world offline past the retention still finds it, and
	// re-publishing the intent queues nothing.
	for h, e := range s.st.effects {
		if e.item.State == vocab.EffectWithdrawn && gone(e.completedAt) {
			// No receipt was delivered, so there is nothing for the
			// world to consume first.
			delete(s.st.effects, h)
			n++
			continue
		}
		if e.item.State == vocab.EffectDone &&
			contract.Sweepable(e.completedAt, e.inboxSeq, s.st.worlds[e.item.World].cursor, s.retention, now) {
			delete(s.st.effects, h)
			n++
		}
	}
	for h, t := range s.st.timers {
		if t.item.State == store.TimerDelivered &&
			contract.Sweepable(t.completedAt, t.inboxSeq, s.st.worlds[t.item.World].cursor, s.retention, now) {
			delete(s.st.timers, h)
			n++
		}
	}
	return n, nil
}
