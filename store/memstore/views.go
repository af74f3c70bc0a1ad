package memstore

import (
	"context"
	"slices"
	"sort"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// ListEffects implements store.Views.
func (s *backend) ListEffects(ctx context.Context, worldID string, afterSeq uint64, limit int) ([]vocab.EffectItem, error) {
	const op = "list_effects"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := s.st.checkView(op, worldID, limit); err != nil {
		return nil, err
	}
	var out []vocab.EffectItem
	for _, e := range s.st.queued() {
		if len(out) >= limit {
			break
		}
		if e.item.World == worldID && e.item.Seq > afterSeq {
			out = append(out, e.view())
		}
	}
	return out, nil
}

// ListTimers implements store.Views.
func (s *backend) ListTimers(ctx context.Context, worldID string, limit int) ([]store.TimerItem, error) {
	const op = "list_timers"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := s.st.checkView(op, worldID, limit); err != nil {
		return nil, err
	}
	var ts []*timer
	for _, t := range s.st.timers {
		if t.item.World == worldID && t.item.State != store.TimerDelivered {
			ts = append(ts, t)
		}
	}
	sortTimers(ts)
	out := []store.TimerItem{}
	for _, t := range ts {
		if len(out) >= limit {
			break
		}
		out = append(out, t.view())
	}
	return out, nil
}

func (st *state) checkView(op, worldID string, limit int) error {
	if _, ok := st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	return nil
}

// PendingEffects implements store.Views.
func (s *backend) PendingEffects(ctx context.Context) (map[string]int64, error) {
	if err := s.begin(ctx, "pending_effects"); err != nil {
		return nil, err
	}
	defer s.end()
	out := map[string]int64{}
	for _, e := range s.st.effects {
		if e.item.State == vocab.EffectPending {
			out[e.item.Kind]++
		}
	}
	return out, nil
}

// QueueDepths implements store.Views.
func (s *backend) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	if err := s.begin(ctx, "queue_depths"); err != nil {
		return store.QueueDepths{}, err
	}
	defer s.end()
	var d store.QueueDepths
	for _, e := range s.st.effects {
		switch e.item.State {
		case vocab.EffectPending:
			d.EffectsPending++
		case vocab.EffectInflight:
			d.EffectsInflight++
		case vocab.EffectHeld:
			d.EffectsHeld++
		}
	}
	for _, t := range s.st.timers {
		switch t.item.State {
		case store.TimerScheduled:
			d.TimersScheduled++
		case store.TimerClaimed:
			d.TimersClaimed++
		}
	}
	for _, w := range s.st.worlds {
		d.InboxBacklog += int64(w.lastSeq - w.cursor) // seqs are gapless here
	}
	return d, nil
}

// QueryEffects implements store.Views.
func (s *backend) QueryEffects(ctx context.Context, f store.EffectFilter) ([]vocab.EffectItem, error) {
	if err := s.begin(ctx, "query_effects"); err != nil {
		return nil, err
	}
	defer s.end()
	var es []*effect
	for _, e := range s.st.effects {
		it := e.item
		if it.Seq > f.AfterSeq && (f.World == "" || it.World == f.World) &&
			(f.Kind == "" || it.Kind == f.Kind) && (len(f.States) == 0 || slices.Contains(f.States, it.State)) {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].item.Seq < es[j].item.Seq })
	out := []vocab.EffectItem{}
	for _, e := range es {
		if len(out) >= f.Limit {
			break
		}
		out = append(out, e.view())
	}
	return out, nil
}

// QueryTimers implements store.Views.
func (s *backend) QueryTimers(ctx context.Context, f store.TimerFilter) ([]store.TimerItem, error) {
	if err := s.begin(ctx, "query_timers"); err != nil {
		return nil, err
	}
	defer s.end()
	after := func(t *timer) bool {
		if f.After.IsZero() {
			return true
		}
		at, cur := t.item.DeliverAt, f.After.DeliverAt
		return at.After(cur) || (at.Equal(cur) && t.item.IntentHash > f.After.IntentHash)
	}
	var ts []*timer
	for _, t := range s.st.timers {
		if (f.World == "" || t.item.World == f.World) && (len(f.States) == 0 || slices.Contains(f.States, t.item.State)) && after(t) {
			ts = append(ts, t)
		}
	}
	sortTimers(ts)
	out := []store.TimerItem{}
	for _, t := range ts {
		if len(out) >= f.Limit {
			break
		}
		out = append(out, t.view())
	}
	return out, nil
}
