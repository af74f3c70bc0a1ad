package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
)

// Asking a run how it is doing: published values (SetEvent, read with
// GetEvent and Events from the journal) and queries (OnQuery, answered by
// Client.Query from a replay of the journal). Neither writes anything for
// the reader.

const (
	kindEvent = "event"
	eventBase = "sys:event:"
)

// ErrUnknownQuery: the run registered no query handler of that name by the
// point its journal reaches. It matches ErrNotFound.
var ErrUnknownQuery = fmt.Errorf("%w: no such query", ErrNotFound)

// SetEvent publishes value under key, as DBOS's SetEvent: a durable step
// written at once (its StepStarted and StepCompleted in one append), which
// clients read with GetEvent and Events, and the dashboard and `orrery run
// show` list. Published again, the latest value wins. Keys follow step
// names' rules.
func SetEvent(c *Ctx, key string, value any) error {
	if err := checkName("set event", key); err != nil {
		return err
	}
	b, err := event.Marshal(value)
	if err != nil {
		return errorf("set event", ErrInvalid, "", err)
	}
	if err := checkValue("the event's value", b); err != nil {
		return errorf("set event", ErrInvalid, "", err)
	}
	id, h, err := c.begin(kindEvent, eventBase+key)
	if err != nil {
		return err
	}
	if h != nil && h.completed != nil {
		return nil
	}
	return c.writeAtOnce(kindEvent, id, h, b)
}

// writeAtOnce records step id (of kind, begun with h) as started and
// completed with value in one append: a step whose value is known when it
// is asked for (SetEvent, SetAttributes).
func (c *Ctx) writeAtOnce(kind, id string, h *stepHist, value []byte) error {
	r := c.r
	attempt := uint64(1)
	if h != nil {
		attempt = h.attempt + 1
	}
	e1, err := r.envelope(event.StepStarted, id, attempt, stepStarted{Kind: kind})
	if err != nil {
		return c.halt(&stop{kind: stopError, cause: err})
	}
	e2, err := r.envelope(event.StepCompleted, id, attempt, stepCompleted{Value: value})
	if err != nil {
		return c.halt(&stop{kind: stopError, cause: err})
	}
	if err := r.append(c.ctx, e1, e2); err != nil {
		return c.halt(err)
	}
	r.emitStep(id, StepCompleted, nil)
	return nil
}

// eventKey is the key of an event step's id ("sys:event:<key>[#n]").
func eventKey(stepID string) (string, bool) {
	rest, ok := strings.CutPrefix(stepID, eventBase)
	if !ok {
		return "", false
	}
	if i := strings.LastIndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

// Events returns the values the run published (SetEvent), the latest per
// key, as canonical CBOR.
func (c *Client) Events(ctx context.Context, runID string) (map[string][]byte, error) {
	if _, err := c.run(ctx, "events", runID); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	var after uint64
	for {
		evs, err := c.st.Read(ctx, runID, after, 512)
		if err != nil {
			return nil, wrap("events", runID, err)
		}
		for i := range evs {
			e := &evs[i]
			after = e.RunSeq
			if e.EventType != event.StepCompleted {
				continue
			}
			k, ok := eventKey(e.StepID)
			if !ok {
				continue
			}
			var p stepCompleted
			if err := event.Unmarshal(e.Payload, &p); err == nil {
				out[k] = p.Value
			}
		}
		if len(evs) < 512 {
			return out, nil
		}
	}
}

// GetEvent returns the latest value the run published under key; ok is
// false when it published none (yet).
func (c *Client) GetEvent(ctx context.Context, runID, key string) (value []byte, ok bool, err error) {
	all, err := c.Events(ctx, runID)
	if err != nil {
		return nil, false, err
	}
	v, ok := all[key]
	return v, ok, nil
}

// OnQuery registers fn as the run's answer to the query name, from this
// point of the execution on (registered again, the latest wins). It is not
// journaled and takes no step position: a query reads the run's state,
// never changes it. fn runs on the querying side's replay of the run, so
// it must only read what the function computed.
func OnQuery[T any](c *Ctx, name string, fn func() (T, error)) error {
	if err := checkName("query", name); err != nil {
		return err
	}
	if fn == nil {
		return errorf("query", ErrInvalid, "", detail("query "+name+" has no function"))
	}
	if err := c.exclusive("query", name); err != nil {
		return err
	}
	if c.queries == nil {
		c.queries = map[string]func() (any, error){}
	}
	c.queries[name] = func() (any, error) { return fn() }
	return nil
}

// Query answers the query name of run runID from the run's current state:
// the run's function is replayed against its journal (no step runs, no
// store write, the run is not disturbed), up to where the journal ends,
// and the handler registered by then answers (its value as canonical
// CBOR). It works for a run held by any node, and for an ended one. A
// handler of that name not registered by then is ErrUnknownQuery; a
// handler's error or panic is returned as an error matching ErrInvalid.
func (c *Client) Query(ctx context.Context, runID, name string) ([]byte, error) {
	const op = "query"
	if err := checkName(op, name); err != nil {
		return nil, err
	}
	if _, err := c.run(ctx, op, runID); err != nil {
		return nil, err
	}
	start, err := readStart(ctx, c.st, runID)
	if err != nil {
		return nil, err
	}
	if start == nil {
		return nil, errorf(op, ErrNotFound, runID, detail("the run has no start"))
	}
	def, ok := c.wf.LookupVersion(start.Workflow, start.Version)
	if !ok {
		return nil, errorf(op, ErrVersionNotCarried, runID, detail(fmt.Sprintf("this process does not carry %s@%d", start.Workflow, start.Version)))
	}
	h := newHistory()
	if _, err := h.load(ctx, c.st, runID); err != nil {
		return nil, wrap(op, runID, err)
	}
	r := &runner{id: runID, h: h, replay: true, ex: actor.NewExecutor(0), start: start}
	rc := newCtx(r, ctx)
	input := h.input
	if !h.started {
		input = start.Input
	}
	// The handler answers where the replay can go no further (the first
	// step the journal does not hold ended), before the function unwinds
	// from there: the state is the run's as it stands, not what its error
	// paths or defers would make of it.
	var v any
	var qerr error
	asked := false
	r.atEnd = func() {
		asked = true
		fn := rc.queries[name]
		if fn == nil {
			qerr = &Error{Op: op, Kind: ErrNotFound, Run: runID, Err: fmt.Errorf("%w %q", ErrUnknownQuery, name)}
			return
		}
		if v, qerr = answer(fn); qerr != nil {
			qerr = errorf(op, ErrInvalid, runID, qerr)
		}
	}
	_, _ = def.invoke(rc, input)
	r.closeBranches(rc)
	if !asked {
		r.journalEnd() // an ended run: the state its function returned with
	}
	if qerr != nil {
		return nil, qerr
	}
	b, err := event.Marshal(v)
	if err != nil {
		return nil, errorf(op, ErrInvalid, runID, err)
	}
	return b, nil
}

// journalEnd runs atEnd (a query's answer) the first time the replay can
// go no further.
func (r *runner) journalEnd() {
	if f := r.atEnd; f != nil {
		r.atEnd = nil
		f()
	}
}

// answer calls a query handler, a panic an error.
func answer(fn func() (any, error)) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("the query handler panicked: %v", p)
		}
	}()
	v, err = fn()
	if err != nil && !errors.Is(err, ErrInvalid) {
		err = fmt.Errorf("the query handler failed: %w", err)
	}
	return v, err
}
