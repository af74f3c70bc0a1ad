package plane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	Store    store.Store
	Kernels  Kernels        // to re-derive replies and read states
	Executor actor.Executor // its clock and parkers; all waiting goes through it
	Replies  *Replies       // shared with in-process hosts (optional)
	Hosts    []*Host        // in-process hosts State may ask first (optional)
	// PollMin and PollMax bound the backoff at which a Call re-checks the
	// journal for a reply no in-process host handed over (default 1ms and
	// 1s).
	PollMin, PollMax time.Duration
	// Tracer writes an orrery.ingress span per Send and Call, a child of
	// the caller's context's span (nil: the global provider, a no-op
	// unless the binary installs an SDK).
	Tracer trace.TracerProvider
	// Links records each ingress span under its inbox item, for the
	// cycle that journals it (optional; share one per process).
	Links *TraceLinks
	// Activator, when set, activates the world of every Send and Call as
	// its input goes in (Activation): an unplaced world is placed and
	// taken at once instead of at the next reconcile.
	Activator Activation
	// Admission bounds Send and Call (nil: unbounded): a refused call
	// answers ErrOverloaded at once, with nothing enqueued.
	Admission *Admission
}

// Client is the Go client of the plane: Send, Call and State.
type Client struct {
	cfg ClientConfig
	in  ingressTrace
}

// NewClient returns a client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Store == nil || cfg.Executor == nil {
		return nil, errorf("client", ErrInvalid, "", detail("a client needs Store and Executor"))
	}
	if cfg.PollMin <= 0 {
		cfg.PollMin = time.Millisecond
	}
	if cfg.PollMax < cfg.PollMin {
		cfg.PollMax = max(time.Second, cfg.PollMin)
	}
	return &Client{cfg: cfg, in: ingressTrace{tr: otrace.Tracer(cfg.Tracer), links: cfg.Links, ex: cfg.Executor}}, nil
}

// Ack acknowledges a durable enqueue.
type Ack struct {
	Seq       uint64 // the item's inbox seq
	Duplicate bool   // the idempotency key was seen before: Seq is the first's
}

// Send enqueues an event carrying v into world's inbox, deduplicated by
// idempotencyKey (empty: no dedupe), and returns once it is durable there.
// A retried Send with the same key is acknowledged with the first seq.
func (c *Client) Send(ctx context.Context, worldID string, v any, idempotencyKey string) (Ack, error) {
	payload, err := world.EncodeEvent(v)
	if err != nil {
		return Ack{}, errorf("send", ErrInvalidIngress, worldID, err)
	}
	activate(ctx, c.cfg.Activator, worldID)
	return c.in.enqueue(ctx, c.cfg.Store, c.cfg.Admission, "send", worldID, store.InboxItem{Kind: vocab.KindEvent, Payload: payload, DedupeKey: idempotencyKey})
}

// ingressTrace writes the orrery.ingress span of an enqueue and records it
// for the cycle that will journal the item.
type ingressTrace struct {
	tr    trace.Tracer
	links *TraceLinks
	ex    actor.Executor // the spans' clock; nil leaves the stamps to the SDK
}

func (t ingressTrace) now() time.Time {
	if t.ex == nil {
		return time.Time{}
	}
	return t.ex.Now()
}

// start opens the span, a child of ctx's span, and returns the context
// the store call runs under (so an instrumented store nests under it).
// The world and kind are not validated yet: their attributes are clipped.
func (t ingressTrace) start(ctx context.Context, worldID, kind string) (context.Context, trace.Span) {
	return t.tr.Start(ctx, otrace.Ingress, trace.WithTimestamp(t.now()), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(otrace.World.String(clip(worldID)), otrace.Kind.String(clip(kind))))
}

// clip bounds an unvalidated string kept as a span attribute to the
// store's identifier limit.
func clip(s string) string {
	if len(s) <= store.MaxIDBytes {
		return s
	}
	return strings.ToValidUTF8(s[:store.MaxIDBytes], "")
}

// end closes the span with the enqueue's answer. A duplicate is not
// recorded as the item's writer: the first enqueue wrote it.
func (t ingressTrace) end(sp trace.Span, worldID string, ack Ack, err error) {
	if err == nil {
		sp.SetAttributes(otrace.Seq.Int64(int64(ack.Seq)), otrace.Duplicate.Bool(ack.Duplicate))
		if !ack.Duplicate && sp.IsRecording() {
			t.links.PutInbox(worldID, ack.Seq, sp.SpanContext())
		}
	}
	otrace.End(sp, t.now(), err)
}

func (t ingressTrace) enqueue(ctx context.Context, st store.Store, adm *Admission, op, worldID string, item store.InboxItem) (Ack, error) {
	ctx, sp := t.start(ctx, worldID, item.Kind)
	ack, err := enqueue(ctx, st, adm, op, worldID, item)
	t.end(sp, worldID, ack, err)
	return ack, err
}

// enqueue writes a producer's item. The store checks what it checks of
// every producer's item (the world id, the kind outside the store's own,
// the key outside its namespaces, the size) once, before it writes: its
// refusal is the input's, answered as ErrInvalidIngress, and nothing here
// checks the item again.
func enqueue(ctx context.Context, st store.Store, adm *Admission, op, worldID string, item store.InboxItem) (Ack, error) {
	item, over := adm.bounded(ctx, item)
	seq, dup, err := st.Enqueue(ctx, worldID, item)
	if errors.Is(err, store.ErrOverloaded) && adm != nil {
		return Ack{}, adm.refused(op, worldID, over, err)
	}
	if errors.Is(err, store.ErrInvalid) {
		return Ack{}, errorf(op, ErrInvalidIngress, worldID, err)
	}
	if err != nil {
		return Ack{}, err
	}
	return Ack{Seq: seq, Duplicate: dup}, nil
}

// NewCallID returns a call id no other call of any process has: 128 bits
// of the operating system's entropy (actor.UniqueID), or of the lab's
// seeded randomness under a deterministic executor. A call's reply is
// found by its id, so an id drawn from a seed two processes share would
// answer one call with another's reply.
func (c *Client) NewCallID() string { return actor.UniqueID(c.cfg.Executor) }

// CallKey is the inbox dedupe key of call callID.
// Calls and events never share a key: the store keeps the "call:" prefix
// for items of kind call alone (store.CallKeyPrefix).
func CallKey(callID string) string { return store.CallKeyPrefix + callID }

// Call sends v to world as a call and waits for the handler's reply:
// applied, journaled, returned. The reply value is canonical CBOR
// (world.Decode reads it; CallAs does both). A handler that failed or did
// not reply gives ErrCallFailed wrapping the world's error.
func (c *Client) Call(ctx context.Context, worldID string, v any) ([]byte, error) {
	return c.call(ctx, worldID, c.NewCallID(), v, true)
}

// CallWithID is Call with the caller's call id: a caller that retries
// after its own crash with the same id waits for the same call, which the
// inbox holds once.
func (c *Client) CallWithID(ctx context.Context, worldID, callID string, v any) ([]byte, error) {
	return c.call(ctx, worldID, callID, v, false)
}

// CallNew is CallWithID for an id the caller drew for this call alone
// (NewCallID) and never sent before: as Call's, such a call cannot be a
// duplicate, so it may be refused without asking the store when its world
// was found full a moment ago (Admission.refuseFresh).
func (c *Client) CallNew(ctx context.Context, worldID, callID string, v any) ([]byte, error) {
	return c.call(ctx, worldID, callID, v, true)
}

// call makes a call; fresh says its id was drawn for it, so it cannot be
// a duplicate and may be refused without asking the store
// (Admission.refuseFresh).
func (c *Client) call(ctx context.Context, worldID, callID string, v any, fresh bool) ([]byte, error) {
	if fresh {
		if err := c.cfg.Admission.refuseFresh(ctx, "call", worldID); err != nil {
			return nil, err
		}
	}
	payload, err := world.EncodeCall(callID, v)
	if err != nil {
		return nil, errorf("call", ErrInvalidIngress, worldID, err)
	}
	p := c.cfg.Executor.NewParker()
	var w *replyWaiter
	if c.cfg.Replies != nil {
		w = c.cfg.Replies.register(callID, p)
		defer c.cfg.Replies.forget(callID, w)
	}
	activate(ctx, c.cfg.Activator, worldID)
	ack, err := c.in.enqueue(ctx, c.cfg.Store, c.cfg.Admission, "call", worldID, store.InboxItem{Kind: vocab.KindCall, Payload: payload, DedupeKey: CallKey(callID)})
	if err != nil {
		return nil, err
	}
	delay := c.cfg.PollMin
	for {
		if w != nil {
			if rep, ok := c.cfg.Replies.take(callID, w); ok {
				return replyResult(worldID, rep)
			}
		}
		// While an in-process host runs the world, the reply is its to
		// hand over, right after the commit that recorded it: re-deriving
		// it from the journal (a read of the journal and a replay, per
		// waiting call) would only race that hand-off, and under overload
		// it is what starves the host, whose cycles are late exactly when
		// many calls wait, so more of them re-derive. Once the polls are
		// at their slowest the journal is read all the same, in case the
		// host lost the world between its commit and the hand-off. A
		// duplicate (a retried call) may have been answered before this
		// wait began, to nobody: only the journal has its reply.
		slowest := delay >= c.cfg.PollMax
		if w != nil && !ack.Duplicate && !slowest && c.runsHere(worldID) {
			if err := c.pause(ctx, p, delay); err != nil {
				return nil, err
			}
			delay = min(2*delay, c.cfg.PollMax)
			continue
		}
		// Once the polls are at their slowest, each also checks that the
		// store still holds the call (a lost item is enqueued again).
		rep, height, ok, err := c.replyFromJournal(ctx, worldID, ack.Seq, callID, slowest)
		if errors.Is(err, errCallLost) {
			// Accepted work put back: never shed.
			ack, err = c.in.enqueue(ctx, c.cfg.Store, nil, "call", worldID, store.InboxItem{Kind: vocab.KindCall, Payload: payload, DedupeKey: CallKey(callID)})
		}
		if err != nil {
			return nil, err
		}
		if ok && c.caughtUp(worldID, height) {
			return replyResult(worldID, rep)
		}
		if err := c.pause(ctx, p, delay); err != nil {
			return nil, err
		}
		delay = min(2*delay, c.cfg.PollMax)
	}
}

// pause parks p until it is unparked (a reply handed over) or delay
// passes on the executor's clock.
func (c *Client) pause(ctx context.Context, p actor.Parker, delay time.Duration) error {
	t := c.cfg.Executor.AfterFunc(delay, p.Unpark)
	defer t.Stop()
	return p.Park(ctx)
}

// runsHere reports whether an in-process host runs a live process of
// world, which hands each reply it records to this process's waiters.
func (c *Client) runsHere(world string) bool {
	for _, h := range c.cfg.Hosts {
		if h.runs(world) {
			return true
		}
	}
	return false
}

// CallAs is Call with the reply decoded into R.
func CallAs[R any](ctx context.Context, c *Client, worldID string, v any) (R, error) {
	var r R
	b, err := c.Call(ctx, worldID, v)
	if err != nil {
		return r, err
	}
	if err := world.Decode(b, &r); err != nil {
		return r, errorf("call", ErrCallFailed, worldID, err)
	}
	return r, nil
}

func replyResult(worldID string, rep world.Reply) ([]byte, error) {
	if rep.Err != nil {
		return nil, errorf("call", ErrCallFailed, worldID, rep.Err)
	}
	return rep.Value, nil
}

// caughtUp reports whether no in-process host's running process of world
// is still below height. The journal holds a commit before its host has
// recorded it (the commit returns to the host after it lands), so a reply
// re-derived from the journal may come first: the caller waits for the
// host, whose delivery of the reply follows its record, so that State read
// next from this node sees what the reply saw. A host without a process
// of the world holds nothing back (Host.behind).
func (c *Client) caughtUp(worldID string, height uint64) bool {
	for _, h := range c.cfg.Hosts {
		if h.behind(worldID, height) {
			return false
		}
	}
	return true
}

// errCallLost: the store no longer holds a call's inbox item at the seq
// its enqueue was acknowledged at (it lost commits: a failover to an
// asynchronous standby).
var errCallLost = errors.New("plane: the call's inbox item is lost")

// holdsCall reports whether world's inbox item at seq is callID's call, or
// was consumed (a failed read says yes: only a lost item is enqueued
// again).
func (c *Client) holdsCall(ctx context.Context, world string, seq uint64, callID string) bool {
	st := c.cfg.Store
	items, err := st.ReadInbox(ctx, world, seq-1, 1)
	if err != nil || len(items) == 1 && items[0].Seq == seq && items[0].DedupeKey == CallKey(callID) {
		return true
	}
	// Not there: lost, unless the world consumed it since the cursor was
	// read.
	cur, err := st.Cursor(ctx, world)
	return err != nil || cur >= seq
}

// replyFromJournal re-derives the reply of the call drained at inbox seq
// from the journal (see the package doc), and the height of its record:
// ok=false while the cursor has not passed it.
//
// probe (a caller that has waited a while) also checks, while the cursor
// is below seq, that the item at seq is still the call's (errCallLost if
// not).
func (c *Client) replyFromJournal(ctx context.Context, id string, seq uint64, callID string, probe bool) (world.Reply, uint64, bool, error) {
	st := c.cfg.Store
	cur, err := st.Cursor(ctx, id)
	if err != nil || cur < seq {
		if err == nil && probe && !c.holdsCall(ctx, id, seq, callID) {
			return world.Reply{}, 0, false, errCallLost
		}
		return world.Reply{}, 0, false, err
	}
	rec, err := st.GetWorld(ctx, id)
	if err != nil {
		return world.Reply{}, 0, false, err
	}
	kern, err := c.cfg.Kernels.of("call", rec)
	if err != nil {
		return world.Reply{}, 0, false, err
	}
	// Only the journal above the compaction floor can be read; the call's
	// record, or the records between it and the snapshot below it, may be
	// under it.
	floor, err := st.Floor(ctx, id)
	if err != nil {
		return world.Reply{}, 0, false, err
	}
	journal, err := ReadTail(ctx, st, id, floor)
	if errors.Is(err, store.ErrCompacted) { // compacted again since Floor
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, err)
	}
	if err != nil {
		return world.Reply{}, 0, false, err
	}
	at := -1
	for i := range journal {
		if journal[i].StepID == world.StepID(seq) {
			at = i
			break
		}
	}
	if at < 0 {
		// The cursor passed seq but the journal lacks its record: the
		// cursor was read before the store lost what it had committed
		// (a failover to an asynchronous standby, between the reads).
		// Read again: a cursor now below seq means the call is pending
		// again, and its answer is still to come.
		if cur, err := st.Cursor(ctx, id); err != nil || cur < seq {
			if err == nil && !c.holdsCall(ctx, id, seq, callID) {
				// The call's item went with the commits: enqueued
				// again (its key makes that safe), it is answered.
				return world.Reply{}, 0, false, errCallLost
			}
			return world.Reply{}, 0, false, err
		}
		if floor > 0 {
			return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id,
				fmt.Errorf("no journal record of inbox seq %d above the floor: %w", seq, &store.CompactedError{Op: "read", Stream: id, Floor: floor}))
		}
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, detail("no journal record of inbox seq %d", seq))
	}
	if cid, _, err := world.RecordCallID(journal[at]); err == nil && cid != callID {
		// Another input holds the call's seq: the store lost the call's
		// item and gave its seq to the next one (a failover to an
		// asynchronous standby). Enqueued again, the call is answered.
		return world.Reply{}, 0, false, errCallLost
	}
	// The step is derived again from the highest snapshot below it (the
	// active baseline may have passed it: a forked or seeded world's
	// genesis is a snapshot too) and the journal between the two.
	h := journal[at].RunSeq
	base, err := baselineBelow(ctx, st, kern, rec, h)
	if err != nil {
		return world.Reply{}, 0, false, err
	}
	if base.Height < floor {
		// The records between the baseline and the call are compacted: the
		// store's own answer to that read.
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id,
			&store.CompactedError{Op: "read", Stream: id, After: base.Height, Floor: floor})
	}
	var tail = journal[:at]
	for len(tail) > 0 && tail[0].RunSeq <= base.Height {
		tail = tail[1:]
	}
	inst, err := kern.Replay(id, base, tail)
	if err != nil {
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, err)
	}
	if inst.Height()+1 != h {
		// Replay checks the tail's gaps, not that it reaches the call; the
		// floor above said the tail is whole, so this is a journal that
		// lost a record some other way.
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, detail("the journal between the snapshot at %d and height %d has a gap", base.Height, h))
	}
	in, err := world.RecordInput(journal[at])
	if err != nil {
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, err)
	}
	// A step the store refused ran no handler, and is re-derived so.
	refused, err := world.RecordRefused(journal[at])
	if err != nil {
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, err)
	}
	var res world.StepResult
	if refused {
		res, err = inst.Refuse(in, journal[at].EmittedAt, nil)
	} else {
		res, err = inst.Step(in, journal[at].EmittedAt)
	}
	if err != nil || res.Reply == nil || res.Reply.CallID != callID || res.StateHash == "" {
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, err)
	}
	_, replyHash, _ := world.RecordCallID(journal[at])
	if got := hashOrEmpty(res.Reply.Value); got != replyHash {
		return world.Reply{}, 0, false, errorf("call", ErrReplyUnavailable, id, detail("re-derived reply hash %s, journal has %s", got, replyHash))
	}
	return *res.Reply, h, true, nil
}

func hashOrEmpty(b []byte) string {
	if b == nil {
		return ""
	}
	return world.Hash(b)
}

// State returns world's state at its head: the committed state of an
// in-process host that runs it, else a replay of its baseline and journal.
func (c *Client) State(ctx context.Context, worldID string) (world.Snapshot, error) {
	for _, h := range c.cfg.Hosts {
		if s, ok := h.State(worldID); ok {
			return s, nil
		}
	}
	inst, _, err := Restore(ctx, c.cfg.Store, c.cfg.Kernels, worldID)
	if err != nil {
		return world.Snapshot{}, err
	}
	return inst.Snapshot(), nil
}
