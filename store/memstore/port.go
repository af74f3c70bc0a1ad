package memstore

import (
	"context"
	"crypto/sha256"
	"slices"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

var _ store.PortBackend = (*backend)(nil)

func utc(t time.Time) time.Time { return t.UTC() }

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func fromOpt(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Round(0)
}

func optSeq(s uint64) *uint64 {
	if s == 0 {
		return nil
	}
	return &s
}

// Export implements store.Exporter under the store's lock: the state it
// emits is the one between two operations. emit must not call this store.
func (s *backend) Export(ctx context.Context, emit func(store.PortRecord) error) error {
	const op = "export"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	st := s.st
	rec := func(k store.PortKind) store.PortRecord { return store.PortRecord{Format: store.PortFormat, Kind: k} }
	worlds := sortedKeys(st.worlds)
	for _, id := range worlds {
		if err := emit(portWorld(id, st.worlds[id])); err != nil {
			return err
		}
	}
	streams := sortedKeys(st.streams)
	for _, id := range streams {
		str := st.streams[id]
		if str.head == 0 && str.floor == 0 {
			continue
		}
		if err := emit(portStream(id, str)); err != nil {
			return err
		}
	}
	for _, id := range streams {
		for _, e := range st.streams[id].records {
			if err := emit(portEvent(e)); err != nil {
				return err
			}
		}
	}
	for _, id := range streams {
		str := st.streams[id]
		var keys []store.PortEventKey
		for key, k := range str.byKey {
			if str.live(k.appended.RunSeq) {
				continue
			}
			keys = append(keys, portEventKey(id, key, k))
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].IdempotencyKey < keys[j].IdempotencyKey })
		for i := range keys {
			r := rec(store.PortKindEventKey)
			r.EventKey = &keys[i]
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	for _, id := range worlds {
		w := st.worlds[id]
		for _, h := range sortedKeys(w.snapshots) {
			sn := w.snapshots[h]
			sn.State, sn.CreatedAt = cloneBytes(sn.State), utc(sn.CreatedAt)
			r := rec(store.PortKindSnapshot)
			r.Snapshot = &store.PortSnapshot{Snapshot: sn}
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	for _, id := range worlds {
		w := st.worlds[id]
		for _, it := range w.inbox {
			if err := emit(portInbox(id, w, it)); err != nil {
				return err
			}
		}
	}
	for _, id := range worlds {
		for _, d := range st.worlds[id].drains {
			r := rec(store.PortKindDrain)
			d.DrainedAt = utc(d.DrainedAt)
			r.Drain = &d
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	for _, id := range sortedKeys(st.leases) {
		if err := emit(portLease(id, st.leases[id])); err != nil {
			return err
		}
	}
	for _, id := range sortedKeys(st.assignments) {
		r := rec(store.PortKindAssignment)
		r.Assignment = &store.PortAssignment{World: id, Assignment: st.assignments[id]}
		if err := emit(r); err != nil {
			return err
		}
	}
	effects := make([]*effect, 0, len(st.effects))
	for _, e := range st.effects {
		effects = append(effects, e)
	}
	sort.Slice(effects, func(i, j int) bool { return effects[i].item.Seq < effects[j].item.Seq })
	for _, e := range effects {
		r := rec(store.PortKindEffect)
		r.Effect = e.port()
		if err := emit(r); err != nil {
			return err
		}
	}
	for _, h := range sortedKeys(st.timers) {
		if err := emit(portTimer(h, st.timers[h])); err != nil {
			return err
		}
	}
	for _, id := range worlds {
		w := st.worlds[id]
		for _, m := range sortedKeys(w.fabric) {
			d := w.fabric[m]
			r := rec(store.PortKindFabric)
			r.Fabric = &store.PortFabric{Dest: id, MessageID: m, Seq: d.seq, CompletedAt: utc(d.completedAt)}
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	marks := make([]watermarkKey, 0, len(st.watermarks))
	for k := range st.watermarks {
		marks = append(marks, k)
	}
	sort.Slice(marks, func(i, j int) bool {
		if marks[i].projector != marks[j].projector {
			return marks[i].projector < marks[j].projector
		}
		return marks[i].stream < marks[j].stream
	})
	for _, k := range marks {
		r := rec(store.PortKindWatermark)
		r.Watermark = &store.PortWatermark{Projector: k.projector, Stream: k.stream, Value: st.watermarks[k]}
		if err := emit(r); err != nil {
			return err
		}
	}
	ids := make([]string, 0, len(st.schedules))
	for id := range st.schedules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := emit(portSchedule(st.schedules[id])); err != nil {
			return err
		}
	}
	for _, r := range st.portQueues() {
		if err := emit(r); err != nil {
			return err
		}
	}
	r := rec(store.PortKindCounter)
	r.Counter = &store.PortCounter{Name: store.PortCounterEffectSeq, Value: st.effectSeq}
	return emit(r)
}

// portQueues returns the queues' records in export order: declarations
// by name, entries by run, admissions by queue, partition and time (mu
// held).
func (st *state) portQueues() []store.PortRecord {
	if st.q == nil {
		return nil
	}
	var out []store.PortRecord
	names := make([]string, 0, len(st.q.specs))
	for n := range st.q.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := portRec(store.PortKindQueue)
		r.Queue = store.PortQueueOf(st.q.specs[n])
		out = append(out, r)
	}
	runs := make([]string, 0, len(st.q.entries))
	for run := range st.q.entries {
		runs = append(runs, run)
	}
	sort.Strings(runs)
	for _, run := range runs {
		r := portRec(store.PortKindQueuedRun)
		r.QueuedRun = store.PortQueuedRunOf(*st.q.entries[run])
		out = append(out, r)
	}
	queues := make([]string, 0, len(st.q.admissions))
	for n := range st.q.admissions {
		queues = append(queues, n)
	}
	sort.Strings(queues)
	for _, n := range queues {
		for _, a := range st.q.admissionCounts(n) {
			r := portRec(store.PortKindAdmission)
			r.Admission = &a
			out = append(out, r)
		}
	}
	return out
}

// admissionCounts groups queue's admissions by partition and time, in
// that order.
func (q *queueState) admissionCounts(queue string) []store.PortAdmission {
	type key struct {
		partition string
		at        int64
	}
	n := map[key]int{}
	at := map[key]time.Time{}
	for _, a := range q.admissions[queue] {
		k := key{a.partition, a.at.UnixNano()}
		n[k]++
		at[k] = a.at
	}
	out := make([]store.PortAdmission, 0, len(n))
	for k, c := range n {
		out = append(out, store.PortAdmission{Queue: queue, Partition: k.partition, At: utc(at[k]), Count: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].At.Before(out[j].At)
	})
	return out
}

func portSchedule(sc store.ScheduleRecord) store.PortRecord {
	r := portRec(store.PortKindSchedule)
	r.Schedule = &store.PortSchedule{ID: sc.ID, Spec: cloneBytes(sc.Spec), State: cloneBytes(sc.State), Paused: sc.Paused,
		NextFireAt: utc(sc.NextFireAt), Version: sc.Version, CreatedAt: utc(sc.CreatedAt), UpdatedAt: utc(sc.UpdatedAt)}
	return r
}

// live reports whether the record at runSeq is still in the stream (not
// compacted away).
func (str *stream) live(runSeq uint64) bool {
	i := sort.Search(len(str.records), func(i int) bool { return str.records[i].RunSeq >= runSeq })
	return i < len(str.records) && str.records[i].RunSeq == runSeq
}

func (e *effect) port() *store.PortEffect {
	p := &store.PortEffect{
		Seq: e.item.Seq, IntentHash: e.item.IntentHash, World: e.item.World, Kind: e.item.Kind,
		Params: cloneBytes(e.item.Params), Origin: e.item.Origin, PolicyContextHash: e.item.PolicyContextHash,
		RetryPolicy: cloneBytes(e.item.Retry), State: string(e.item.State), EnqueuedAt: utc(e.item.EnqueuedAt),
		Attempts: e.item.Attempt, ClaimedBy: e.item.ClaimedBy, ClaimExpires: optTime(e.item.ClaimExpires),
		ClaimNode: e.owner.node, ClaimIncarnation: e.owner.incarnation, InboxSeq: optSeq(e.inboxSeq),
		CompletedAt: optTime(e.completedAt), Retries: e.item.Retries, RetryReason: e.retryReason,
		RetryAt: optTime(e.item.RetryAt), Failures: e.item.Failures, LastError: e.lastError,
		HoldReason: e.item.HoldReason, HeldAt: optTime(e.item.HeldAt), ReleaseReason: e.releaseReason,
	}
	if e.receipt != nil {
		rs := string(e.receipt.Status)
		p.ReceiptStatus, p.ReceiptPayload = &rs, cloneBytes(e.receipt.Payload)
	}
	if e.resolveReason != nil {
		rr := *e.resolveReason
		p.ResolveReason = &rr
	}
	return p
}

// Empty implements store.Importer.
func (s *backend) Empty(ctx context.Context) (bool, error) {
	if err := s.begin(ctx, "empty"); err != nil {
		return false, err
	}
	defer s.end()
	st := s.st
	if len(st.worlds)+len(st.leases)+len(st.assignments)+len(st.effects)+len(st.timers)+len(st.watermarks)+len(st.schedules) > 0 {
		return false, nil
	}
	if st.q != nil && len(st.q.specs)+len(st.q.entries)+len(st.q.admissions) > 0 {
		return false, nil
	}
	for _, str := range st.streams {
		if str.head > 0 || str.floor > 0 || len(str.byKey) > 0 {
			return false, nil
		}
	}
	return true, nil
}

// Import implements store.Importer: the whole batch is checked against
// the state and itself before anything is written, so a refused batch
// writes nothing.
func (s *backend) Import(ctx context.Context, batch []store.PortRecord) error {
	const op = "import"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := s.st.checkImport(op, batch); err != nil {
		return err
	}
	now := s.now()
	for _, r := range batch {
		s.st.importRecord(r, now)
	}
	s.st.notify(store.TopicEffects)
	s.st.notify(store.TopicTimers)
	s.st.notify(store.TopicLeases)
	s.st.notify(store.TopicAssignments)
	return nil
}

func conflict(op, world, format string, args ...any) error {
	return store.Errorf(op, store.ErrConflict, world, format, args...)
}

// checkImport refuses a batch with a record whose key exists, in the
// state or earlier in the batch, or whose world does not.
func (st *state) checkImport(op string, batch []store.PortRecord) error {
	seen := map[string]bool{}
	dup := func(k string) bool {
		if seen[k] {
			return true
		}
		seen[k] = true
		return false
	}
	worldOK := func(id string) error {
		if _, ok := st.worlds[id]; ok || seen["w\x00"+id] {
			return nil
		}
		return store.Errorf(op, store.ErrWorldNotFound, id, "a record of a world not imported")
	}
	for _, r := range batch {
		switch r.Kind {
		case store.PortKindWorld:
			if _, ok := st.worlds[r.World.ID]; ok || dup("w\x00"+r.World.ID) {
				return conflict(op, r.World.ID, "world exists")
			}
		case store.PortKindStream:
			if str := st.streams[r.Stream.Stream]; (str != nil && (str.head > 0 || str.floor > 0)) || dup("s\x00"+r.Stream.Stream) {
				return conflict(op, "", "stream %s exists", r.Stream.Stream)
			}
		case store.PortKindEvent:
			e := r.Event
			str := st.streams[e.StreamID]
			if str != nil {
				if _, ok := str.byKey[e.IdempotencyKey]; ok || (len(str.records) > 0 && str.records[len(str.records)-1].RunSeq >= e.RunSeq) {
					return conflict(op, "", "event %s/%d exists", e.StreamID, e.RunSeq)
				}
			}
			if dup("k\x00"+e.StreamID+"\x00"+e.IdempotencyKey) || dup("e\x00"+e.StreamID+"\x00"+u64(e.RunSeq)) {
				return conflict(op, "", "event %s/%d twice", e.StreamID, e.RunSeq)
			}
		case store.PortKindEventKey:
			k := r.EventKey
			if str := st.streams[k.Stream]; str != nil {
				if _, ok := str.byKey[k.IdempotencyKey]; ok {
					return conflict(op, "", "key %s of stream %s exists", k.IdempotencyKey, k.Stream)
				}
			}
			if dup("k\x00" + k.Stream + "\x00" + k.IdempotencyKey) {
				return conflict(op, "", "key %s of stream %s twice", k.IdempotencyKey, k.Stream)
			}
		case store.PortKindSnapshot:
			sn := r.Snapshot
			if err := worldOK(sn.World); err != nil {
				return err
			}
			if w := st.worlds[sn.World]; w != nil {
				if _, ok := w.snapshots[sn.Height]; ok {
					return conflict(op, sn.World, "snapshot at %d exists", sn.Height)
				}
			}
			if dup("n\x00" + sn.World + "\x00" + u64(sn.Height)) {
				return conflict(op, sn.World, "snapshot at %d twice", sn.Height)
			}
		case store.PortKindInbox:
			it := r.Inbox
			if err := worldOK(it.World); err != nil {
				return err
			}
			if w := st.worlds[it.World]; w != nil && len(w.inbox) > 0 && w.inbox[len(w.inbox)-1].Seq >= it.Seq {
				return conflict(op, it.World, "inbox seq %d exists", it.Seq)
			}
			if dup("i\x00" + it.World + "\x00" + u64(it.Seq)) {
				return conflict(op, it.World, "inbox seq %d twice", it.Seq)
			}
			if it.KeyLive {
				if w := st.worlds[it.World]; w != nil && w.inboxKeys[it.DedupeKey] != nil {
					return conflict(op, it.World, "inbox key %s exists", it.DedupeKey)
				}
				if dup("ik\x00" + it.World + "\x00" + it.DedupeKey) {
					return conflict(op, it.World, "inbox key %s twice", it.DedupeKey)
				}
			}
		case store.PortKindDrain:
			d := r.Drain
			if err := worldOK(d.World); err != nil {
				return err
			}
			// The cursor only moves forward: a world's drains are keyed by
			// the seq they reached.
			if w := st.worlds[d.World]; w != nil {
				for _, x := range w.drains {
					if x.Upto == d.Upto {
						return conflict(op, d.World, "drain to %d exists", d.Upto)
					}
				}
			}
			if dup("d\x00" + d.World + "\x00" + u64(d.Upto)) {
				return conflict(op, d.World, "drain to %d twice", d.Upto)
			}
		case store.PortKindLease:
			if err := worldOK(r.Lease.World); err != nil {
				return err
			}
			if st.leases[r.Lease.World] != nil || dup("l\x00"+r.Lease.World) {
				return conflict(op, r.Lease.World, "lease exists")
			}
		case store.PortKindAssignment:
			if err := worldOK(r.Assignment.World); err != nil {
				return err
			}
			if _, ok := st.assignments[r.Assignment.World]; ok || dup("a\x00"+r.Assignment.World) {
				return conflict(op, r.Assignment.World, "assignment exists")
			}
		case store.PortKindEffect:
			e := r.Effect
			if err := worldOK(e.World); err != nil {
				return err
			}
			if !knownEffectState(e.State) {
				return store.Errorf(op, store.ErrInvalid, e.World, "effect state %q", e.State)
			}
			if st.effects[e.IntentHash] != nil || dup("x\x00"+e.IntentHash) || dup("xs\x00"+u64(e.Seq)) {
				return conflict(op, e.World, "effect %s exists", e.IntentHash)
			}
			for _, x := range st.effects {
				if x.item.Seq == e.Seq {
					return conflict(op, e.World, "effect seq %d exists", e.Seq)
				}
			}
		case store.PortKindTimer:
			t := r.Timer
			if err := worldOK(t.World); err != nil {
				return err
			}
			switch store.TimerState(t.State) {
			case store.TimerScheduled, store.TimerClaimed, store.TimerDelivered:
			default:
				return store.Errorf(op, store.ErrInvalid, t.World, "timer state %q", t.State)
			}
			if st.timers[t.IntentHash] != nil || dup("t\x00"+t.IntentHash) {
				return conflict(op, t.World, "timer %s exists", t.IntentHash)
			}
		case store.PortKindFabric:
			f := r.Fabric
			if err := worldOK(f.Dest); err != nil {
				return err
			}
			if w := st.worlds[f.Dest]; (w != nil && w.fabric[f.MessageID] != nil) || dup("f\x00"+f.Dest+"\x00"+f.MessageID) {
				return conflict(op, f.Dest, "fabric message %s exists", f.MessageID)
			}
		case store.PortKindWatermark:
			m := r.Watermark
			if _, ok := st.watermarks[watermarkKey{m.Projector, m.Stream}]; ok || dup("m\x00"+m.Projector+"\x00"+m.Stream) {
				return conflict(op, "", "watermark %s/%s exists", m.Projector, m.Stream)
			}
		case store.PortKindSchedule:
			if _, ok := st.schedules[r.Schedule.ID]; ok || dup("s\x00"+r.Schedule.ID) {
				return conflict(op, "", "schedule %s exists", r.Schedule.ID)
			}
		case store.PortKindQueue:
			if _, ok := st.queues().specs[r.Queue.Name]; ok || dup("q\x00"+r.Queue.Name) {
				return conflict(op, "", "queue %s exists", r.Queue.Name)
			}
		case store.PortKindQueuedRun:
			e := r.QueuedRun
			if err := worldOK(e.Run); err != nil {
				return err
			}
			if _, ok := st.queues().specs[e.Queue]; !ok && !batchQueue(batch, e.Queue) {
				return store.Errorf(op, store.ErrNotFound, e.Run, "no queue %q", e.Queue)
			}
			if _, ok := st.queues().entries[e.Run]; ok || dup("qr\x00"+e.Run) || dup("qs\x00"+u64(e.Seq)) {
				return conflict(op, e.Run, "queued run exists")
			}
			for _, x := range st.queues().entries {
				if x.Seq == e.Seq {
					return conflict(op, e.Run, "queue seq %d exists", e.Seq)
				}
			}
		case store.PortKindAdmission:
			a := r.Admission
			if dup("qa\x00" + a.Queue + "\x00" + a.Partition + "\x00" + a.At.UTC().Format(time.RFC3339Nano)) {
				return conflict(op, "", "queue admission exists")
			}
			for _, x := range st.queues().admissionCounts(a.Queue) {
				if x.Partition == a.Partition && x.At.Equal(a.At) {
					return conflict(op, "", "queue admission exists")
				}
			}
		}
	}
	return nil
}

func batchQueue(batch []store.PortRecord, name string) bool {
	for _, r := range batch {
		if r.Kind == store.PortKindQueue && r.Queue.Name == name {
			return true
		}
	}
	return false
}

func knownEffectState(s string) bool {
	switch vocab.EffectState(s) {
	case vocab.EffectPending, vocab.EffectInflight, vocab.EffectDone, vocab.EffectWithdrawn, vocab.EffectHeld:
		return true
	}
	return false
}

func u64(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// importRecord writes one checked record (mu held).
func (st *state) importRecord(r store.PortRecord, now time.Time) {
	archived := func(id string) bool {
		w := st.worlds[id]
		return w != nil && w.rec.Status == store.WorldArchived
	}
	switch r.Kind {
	case store.PortKindEffect:
		r = store.PortImported(r, archived(r.Effect.World), now)
	default:
		r = store.PortImported(r, false, now)
	}
	switch r.Kind {
	case store.PortKindWorld:
		p := r.World
		w := newWorld(store.World{
			ID: p.ID, Universe: p.Universe, Status: p.Status, StatusReason: p.StatusReason,
			StatusChangedAt: p.StatusChangedAt.Round(0), ParentWorld: p.ParentWorld,
			ParentSnapshotHash: p.ParentSnapshotHash, ForkedAtHeight: p.ForkedAtHeight, CreatedAt: p.CreatedAt.Round(0),
		})
		w.cursor, w.lastSeq = p.InboxCursor, p.LastSeq
		if p.BaselineHeight != nil {
			w.hasBaseline, w.baseline = true, *p.BaselineHeight
		}
		st.worlds[p.ID] = w
	case store.PortKindStream:
		p := r.Stream
		str := st.stream(p.Stream)
		str.head = max(str.head, p.Head)
		if len(str.records) == 0 {
			str.base = p.Head
		}
		str.floor, str.floorAt = p.CompactedTo, fromOpt(p.CompactedAt)
	case store.PortKindEvent:
		e := cloneRecord(r.Event.Record)
		e.EmittedAt, e.PersistedAt = e.EmittedAt.Round(0), e.PersistedAt.Round(0)
		str := st.stream(e.StreamID)
		str.records = append(str.records, e)
		str.head = max(str.head, e.RunSeq)
		str.byKey[e.IdempotencyKey] = keyRecord{
			appended:    store.Appended{EventID: e.EventID, RunSeq: e.RunSeq, PersistedAt: e.PersistedAt},
			eventType:   e.EventType,
			payloadHash: sha256.Sum256(e.Payload),
		}
	case store.PortKindEventKey:
		k := r.EventKey
		str := st.stream(k.Stream)
		kr := keyRecord{appended: store.Appended{EventID: k.EventID, RunSeq: k.RunSeq, PersistedAt: k.PersistedAt.Round(0)}}
		if k.EventType != nil {
			kr.eventType = *k.EventType
		}
		copy(kr.payloadHash[:], k.PayloadSHA256)
		str.byKey[k.IdempotencyKey] = kr
	case store.PortKindSnapshot:
		sn := r.Snapshot.Snapshot
		sn.State, sn.CreatedAt = cloneBytes(sn.State), sn.CreatedAt.Round(0)
		st.worlds[sn.World].snapshots[sn.Height] = sn
	case store.PortKindInbox:
		it := r.Inbox
		w := st.worlds[it.World]
		w.inbox = append(w.inbox, store.InboxItem{Seq: it.Seq, World: it.World, Kind: it.Kind,
			Payload: cloneBytes(it.Payload), DedupeKey: it.DedupeKey, EnqueuedAt: it.EnqueuedAt.Round(0)})
		w.lastSeq = max(w.lastSeq, it.Seq)
		if it.KeyLive && it.DedupeKey != "" {
			w.inboxKeys[it.DedupeKey] = &inboxKey{seq: it.Seq}
		}
		st.notify(store.TopicInbox(it.World))
	case store.PortKindDrain:
		d := r.Drain
		w := st.worlds[d.World]
		w.drains = append(w.drains, store.PortDrain{World: d.World, Upto: d.Upto, DrainedAt: d.DrainedAt.Round(0)})
		for _, k := range w.inboxKeys {
			if !k.drained && k.seq <= d.Upto {
				k.drained, k.drainedAt = true, d.DrainedAt.Round(0)
			}
		}
	case store.PortKindLease:
		l := r.Lease
		st.leases[l.World] = &contract.LeaseRow{Found: true, Holder: l.Holder, Incarnation: l.Incarnation,
			TookOver: l.TookOver, Displaced: l.Displaced, Epoch: l.Epoch, ExpiresAt: l.ExpiresAt.Round(0)}
	case store.PortKindAssignment:
		st.assignments[r.Assignment.World] = r.Assignment.Assignment
	case store.PortKindEffect:
		p := r.Effect
		e := &effect{
			item: vocab.EffectItem{
				Intent: vocab.Intent{IntentHash: p.IntentHash, Kind: p.Kind, Params: cloneBytes(p.Params),
					Origin: p.Origin, PolicyContextHash: p.PolicyContextHash, Retry: cloneBytes(p.RetryPolicy)},
				World: p.World, Seq: p.Seq, EnqueuedAt: p.EnqueuedAt.Round(0), State: vocab.EffectState(p.State),
				Attempt: p.Attempts, ClaimedBy: p.ClaimedBy, ClaimExpires: fromOpt(p.ClaimExpires),
				Retries: p.Retries, Failures: p.Failures, RetryAt: fromOpt(p.RetryAt),
				HoldReason: p.HoldReason, HeldAt: fromOpt(p.HeldAt),
			},
			retryReason: p.RetryReason, lastError: p.LastError, completedAt: fromOpt(p.CompletedAt),
			releaseReason: p.ReleaseReason,
			owner:         owner{node: p.ClaimNode, incarnation: p.ClaimIncarnation},
		}
		if p.InboxSeq != nil {
			e.inboxSeq = *p.InboxSeq
		}
		if p.ReceiptStatus != nil {
			e.receipt = &vocab.Receipt{Status: vocab.ReceiptStatus(*p.ReceiptStatus), Payload: cloneBytes(p.ReceiptPayload)}
		}
		if p.ResolveReason != nil {
			rr := *p.ResolveReason
			e.resolveReason = &rr
		}
		st.effects[p.IntentHash] = e
		st.effectSeq = max(st.effectSeq, p.Seq)
	case store.PortKindTimer:
		p := r.Timer
		t := &timer{
			item: store.TimerItem{World: p.World, IntentHash: p.IntentHash, DeliverAt: p.DeliverAt.Round(0),
				Payload: cloneBytes(p.Payload), State: store.TimerState(p.State), Attempt: p.Attempt,
				ClaimedBy: p.ClaimedBy, ClaimExpires: fromOpt(p.ClaimExpires)},
			completedAt: fromOpt(p.CompletedAt),
			owner:       owner{node: p.ClaimNode, incarnation: p.ClaimIncarnation},
		}
		if p.InboxSeq != nil {
			t.inboxSeq = *p.InboxSeq
		}
		st.timers[p.IntentHash] = t
	case store.PortKindFabric:
		f := r.Fabric
		st.worlds[f.Dest].fabric[f.MessageID] = &dedupeRecord{seq: f.Seq, completedAt: f.CompletedAt.Round(0)}
	case store.PortKindWatermark:
		m := r.Watermark
		st.watermarks[watermarkKey{m.Projector, m.Stream}] = m.Value
	case store.PortKindSchedule:
		p := r.Schedule
		st.schedules[p.ID] = store.ScheduleRecord{ID: p.ID, Spec: cloneBytes(p.Spec), State: cloneBytes(p.State), Paused: p.Paused,
			NextFireAt: p.NextFireAt.Round(0), Version: p.Version, CreatedAt: p.CreatedAt.Round(0), UpdatedAt: p.UpdatedAt.Round(0)}
	case store.PortKindQueue:
		st.queues().specs[r.Queue.Name] = r.Queue.Spec()
	case store.PortKindQueuedRun:
		q := st.queues()
		e := r.QueuedRun.Entry()
		e.EnqueuedAt, e.AdmittedAt = e.EnqueuedAt.Round(0), e.AdmittedAt.Round(0)
		q.entries[e.Run] = &e
		q.seq = max(q.seq, e.Seq)
	case store.PortKindAdmission:
		q := st.queues()
		a := r.Admission
		as := q.admissions[a.Queue]
		for range a.Count {
			as = append(as, admission{partition: a.Partition, at: a.At.Round(0)})
		}
		// The rate window prunes from the front: kept in time order.
		sort.SliceStable(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
		q.admissions[a.Queue] = as
	case store.PortKindCounter:
		st.effectSeq = max(st.effectSeq, r.Counter.Value)
	}
}

// FinishImport implements store.Importer: memstore keeps no counter apart
// from its rows' (the effect seq's is raised as they are imported).
func (s *backend) FinishImport(ctx context.Context) error {
	if err := s.begin(ctx, "finish_import"); err != nil {
		return err
	}
	s.end()
	return nil
}

// PortLookup implements store.PortBackend.
func (s *backend) PortLookup(ctx context.Context, batch []store.PortRecord) ([]*store.PortRecord, error) {
	if err := s.begin(ctx, "import"); err != nil {
		return nil, err
	}
	defer s.end()
	st := s.st
	out := make([]*store.PortRecord, len(batch))
	for i, r := range batch {
		var found []store.PortRecord
		// The stored record is the one Export emits under r's key: an
		// export of the one row, filtered.
		emit := func(x store.PortRecord) {
			found = append(found, x)
		}
		st.lookupRecord(r, emit)
		if len(found) > 0 {
			f := found[0]
			f.Format = store.PortFormat
			out[i] = &f
		}
	}
	return out, nil
}

// lookupRecord emits the stored record under r's key, if any (mu held).
func (st *state) lookupRecord(r store.PortRecord, emit func(store.PortRecord)) {
	rec := func(k store.PortKind) store.PortRecord { return store.PortRecord{Format: store.PortFormat, Kind: k} }
	switch r.Kind {
	case store.PortKindWorld:
		w := st.worlds[r.World.ID]
		if w == nil {
			return
		}
		emit(portWorld(r.World.ID, w))
	case store.PortKindStream:
		str := st.streams[r.Stream.Stream]
		if str == nil || (str.head == 0 && str.floor == 0) {
			return
		}
		emit(portStream(r.Stream.Stream, str))
	case store.PortKindEvent:
		str := st.streams[r.Event.StreamID]
		if str == nil {
			return
		}
		i := sort.Search(len(str.records), func(i int) bool { return str.records[i].RunSeq >= r.Event.RunSeq })
		if i == len(str.records) || str.records[i].RunSeq != r.Event.RunSeq {
			return
		}
		emit(portEvent(str.records[i]))
	case store.PortKindEventKey:
		str := st.streams[r.EventKey.Stream]
		if str == nil {
			return
		}
		k, ok := str.byKey[r.EventKey.IdempotencyKey]
		if !ok || str.live(k.appended.RunSeq) {
			return
		}
		pk := portEventKey(r.EventKey.Stream, r.EventKey.IdempotencyKey, k)
		x := rec(store.PortKindEventKey)
		x.EventKey = &pk
		emit(x)
	case store.PortKindSnapshot:
		w := st.worlds[r.Snapshot.World]
		if w == nil {
			return
		}
		sn, ok := w.snapshots[r.Snapshot.Height]
		if !ok {
			return
		}
		sn.State, sn.CreatedAt = cloneBytes(sn.State), utc(sn.CreatedAt)
		x := rec(store.PortKindSnapshot)
		x.Snapshot = &store.PortSnapshot{Snapshot: sn}
		emit(x)
	case store.PortKindInbox:
		w := st.worlds[r.Inbox.World]
		if w == nil {
			return
		}
		for _, it := range w.inbox {
			if it.Seq != r.Inbox.Seq {
				continue
			}
			emit(portInbox(r.Inbox.World, w, it))
			return
		}
	case store.PortKindDrain:
		w := st.worlds[r.Drain.World]
		if w == nil {
			return
		}
		for _, d := range w.drains {
			if d.Upto == r.Drain.Upto {
				d.DrainedAt = utc(d.DrainedAt)
				x := rec(store.PortKindDrain)
				x.Drain = &d
				emit(x)
				return
			}
		}
	case store.PortKindLease:
		l := st.leases[r.Lease.World]
		if l == nil {
			return
		}
		emit(portLease(r.Lease.World, l))
	case store.PortKindAssignment:
		a, ok := st.assignments[r.Assignment.World]
		if !ok {
			return
		}
		x := rec(store.PortKindAssignment)
		x.Assignment = &store.PortAssignment{World: r.Assignment.World, Assignment: a}
		emit(x)
	case store.PortKindEffect:
		e := st.effects[r.Effect.IntentHash]
		if e == nil {
			return
		}
		x := rec(store.PortKindEffect)
		x.Effect = e.port()
		emit(x)
	case store.PortKindTimer:
		t := st.timers[r.Timer.IntentHash]
		if t == nil {
			return
		}
		emit(portTimer(r.Timer.IntentHash, t))
	case store.PortKindFabric:
		w := st.worlds[r.Fabric.Dest]
		if w == nil || w.fabric[r.Fabric.MessageID] == nil {
			return
		}
		d := w.fabric[r.Fabric.MessageID]
		x := rec(store.PortKindFabric)
		x.Fabric = &store.PortFabric{Dest: r.Fabric.Dest, MessageID: r.Fabric.MessageID, Seq: d.seq, CompletedAt: utc(d.completedAt)}
		emit(x)
	case store.PortKindWatermark:
		v, ok := st.watermarks[watermarkKey{r.Watermark.Projector, r.Watermark.Stream}]
		if !ok {
			return
		}
		x := rec(store.PortKindWatermark)
		x.Watermark = &store.PortWatermark{Projector: r.Watermark.Projector, Stream: r.Watermark.Stream, Value: v}
		emit(x)
	case store.PortKindSchedule:
		sc, ok := st.schedules[r.Schedule.ID]
		if !ok {
			return
		}
		emit(portSchedule(sc))
	case store.PortKindQueue:
		spec, ok := st.queues().specs[r.Queue.Name]
		if !ok {
			return
		}
		x := rec(store.PortKindQueue)
		x.Queue = store.PortQueueOf(spec)
		emit(x)
	case store.PortKindQueuedRun:
		e, ok := st.queues().entries[r.QueuedRun.Run]
		if !ok {
			return
		}
		x := rec(store.PortKindQueuedRun)
		x.QueuedRun = store.PortQueuedRunOf(*e)
		emit(x)
	case store.PortKindAdmission:
		for _, a := range st.queues().admissionCounts(r.Admission.Queue) {
			if a.Partition == r.Admission.Partition && a.At.Equal(r.Admission.At) {
				x := rec(store.PortKindAdmission)
				x.Admission = &a
				emit(x)
			}
		}
	}
}

// The records of one row each, as Export emits them and PortLookup
// answers them.

func portRec(k store.PortKind) store.PortRecord {
	return store.PortRecord{Format: store.PortFormat, Kind: k}
}

func portWorld(id string, w *world) store.PortRecord {
	pw := store.PortWorld{
		ID: id, Universe: w.rec.Universe, Status: w.rec.Status, StatusReason: w.rec.StatusReason,
		StatusChangedAt: utc(w.rec.StatusChangedAt), ParentWorld: w.rec.ParentWorld,
		ParentSnapshotHash: w.rec.ParentSnapshotHash, ForkedAtHeight: w.rec.ForkedAtHeight,
		CreatedAt: utc(w.rec.CreatedAt), InboxCursor: w.cursor, LastSeq: w.lastSeq,
	}
	if w.hasBaseline {
		h := w.baseline
		pw.BaselineHeight = &h
	}
	r := portRec(store.PortKindWorld)
	r.World = &pw
	return r
}

func portStream(id string, str *stream) store.PortRecord {
	r := portRec(store.PortKindStream)
	r.Stream = &store.PortStream{Stream: id, Head: str.head, CompactedTo: str.floor, CompactedAt: optTime(str.floorAt)}
	return r
}

func portEvent(e store.Record) store.PortRecord {
	e = cloneRecord(e)
	e.EmittedAt, e.PersistedAt = utc(e.EmittedAt), utc(e.PersistedAt)
	r := portRec(store.PortKindEvent)
	r.Event = &store.PortEvent{Record: e}
	return r
}

func portEventKey(stream, key string, k keyRecord) store.PortEventKey {
	et := k.eventType
	return store.PortEventKey{
		Stream: stream, IdempotencyKey: key, EventID: k.appended.EventID, RunSeq: k.appended.RunSeq,
		PersistedAt: utc(k.appended.PersistedAt), EventType: &et, PayloadSHA256: slices.Clone(k.payloadHash[:]),
	}
}

func portInbox(id string, w *world, it store.InboxItem) store.PortRecord {
	k := w.inboxKeys[it.DedupeKey]
	r := portRec(store.PortKindInbox)
	r.Inbox = &store.PortInboxItem{
		World: id, Seq: it.Seq, Kind: it.Kind, Payload: cloneBytes(it.Payload), DedupeKey: it.DedupeKey,
		EnqueuedAt: utc(it.EnqueuedAt), KeyLive: it.DedupeKey != "" && k != nil && k.seq == it.Seq,
	}
	return r
}

func portLease(id string, l *contract.LeaseRow) store.PortRecord {
	r := portRec(store.PortKindLease)
	r.Lease = &store.PortLease{World: id, Holder: l.Holder, Incarnation: l.Incarnation, Epoch: l.Epoch,
		ExpiresAt: utc(l.ExpiresAt), TookOver: l.TookOver, Displaced: l.Displaced}
	return r
}

func portTimer(h string, t *timer) store.PortRecord {
	r := portRec(store.PortKindTimer)
	r.Timer = &store.PortTimer{
		IntentHash: h, World: t.item.World, DeliverAt: utc(t.item.DeliverAt), Payload: cloneBytes(t.item.Payload),
		State: string(t.item.State), Attempt: t.item.Attempt, ClaimedBy: t.item.ClaimedBy,
		ClaimExpires: optTime(t.item.ClaimExpires), ClaimNode: t.owner.node, ClaimIncarnation: t.owner.incarnation,
		InboxSeq: optSeq(t.inboxSeq), CompletedAt: optTime(t.completedAt),
	}
	return r
}
