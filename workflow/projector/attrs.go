package projector

import (
	"maps"
	"slices"
	"strings"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
)

// AttrsStep is the base step id of the steps by which a run sets its
// search attributes (the workflow package's SetAttributes writes them:
// "sys:attrs", "sys:attrs#2", ...).
const AttrsStep = "sys:attrs"

// attrsSet reads the search attributes event e sets, if any: the "attrs"
// entry of a RunQueued or RunStarted payload (a start's attributes), or
// the value of a StepCompleted of an attributes step (a map; an empty value
// removes its key). A payload that does not decode sets nothing.
func attrsSet(e *event.Envelope) map[string]string {
	switch e.EventType {
	case event.RunQueued, event.RunStarted:
		var p struct {
			Attrs map[string]string `cbor:"attrs"`
		}
		if len(e.Payload) > 0 && event.Unmarshal(e.Payload, &p) == nil {
			return p.Attrs
		}
	case event.StepCompleted:
		if e.StepID != AttrsStep && !strings.HasPrefix(e.StepID, AttrsStep+"#") {
			return nil
		}
		var p struct {
			Value cbor.RawMessage `cbor:"value"`
		}
		var set map[string]string
		if event.Unmarshal(e.Payload, &p) == nil && event.Unmarshal(p.Value, &set) == nil {
			return set
		}
	}
	return nil
}

// attrIndex maps each attribute key and value to the runs that carry it.
type attrIndex map[string]map[string]map[string]struct{}

func (x attrIndex) add(k, v, run string) {
	byValue := x[k]
	if byValue == nil {
		byValue = map[string]map[string]struct{}{}
		x[k] = byValue
	}
	runs := byValue[v]
	if runs == nil {
		runs = map[string]struct{}{}
		byValue[v] = runs
	}
	runs[run] = struct{}{}
}

func (x attrIndex) remove(k, v, run string) {
	runs := x[k][v]
	delete(runs, run)
	if len(runs) == 0 {
		delete(x[k], v)
		if len(x[k]) == 0 {
			delete(x, k)
		}
	}
}

// setAttrs applies set to run st's attributes and the index.
func (r *Runs) setAttrs(st *runState, set map[string]string) {
	for k, v := range set {
		old, had := st.run.Attributes[k]
		if had && old == v {
			continue
		}
		if had {
			r.index.remove(k, old, st.run.ID)
			delete(st.run.Attributes, k)
		}
		if v == "" {
			continue
		}
		if st.run.Attributes == nil {
			st.run.Attributes = map[string]string{}
		}
		st.run.Attributes[k] = v
		r.index.add(k, v, st.run.ID)
	}
}

// Match returns the ids of the runs whose search attributes include every
// key of filter with its value, sorted; an empty filter matches none. It
// reads the index: its cost grows with the runs that carry the rarest of
// the filter's pairs, not with the runs there are.
func (r *Runs) Match(filter map[string]string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(filter) == 0 {
		return nil
	}
	var smallest map[string]struct{}
	for k, v := range filter {
		runs := r.index[k][v]
		if len(runs) == 0 {
			return nil
		}
		if smallest == nil || len(runs) < len(smallest) {
			smallest = runs
		}
	}
	out := make([]string, 0, len(smallest))
	for id := range smallest {
		if attrs := r.runs[id].run.Attributes; HasAttributes(attrs, filter) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// HasAttributes reports whether attrs has every pair of filter.
func HasAttributes(attrs, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// cloneRun copies run's attribute map, so that a reader's copy never
// shares it with the projection.
func cloneRun(run Run) Run {
	run.Attributes = maps.Clone(run.Attributes)
	return run
}
