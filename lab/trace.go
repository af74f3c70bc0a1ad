package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// eventJSON is the wire form of an Event in crash packs and trace files.
// Field order is fixed (declaration order) and zero fields are omitted, so
// equal traces encode to equal bytes.
type eventJSON struct {
	AtNS    int64  `json:"at_ns"`
	Kind    string `json:"kind"`
	PID     uint64 `json:"pid,omitempty"`
	Peer    uint64 `json:"peer,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// MarshalJSON encodes the event as
// {"at_ns":…,"kind":…,"pid":…,"peer":…,"seq":…,"outcome":…,"detail":…}
// with zero fields left out.
func (ev Event) MarshalJSON() ([]byte, error) {
	return json.Marshal(eventJSON{AtNS: ev.At.Nanoseconds(), Kind: ev.Kind, PID: ev.PID, Peer: ev.Peer, Seq: ev.Seq, Outcome: ev.Outcome, Detail: ev.Detail})
}

// UnmarshalJSON decodes what MarshalJSON encodes. Unknown fields are
// rejected, and so is an event without a kind.
func (ev *Event) UnmarshalJSON(data []byte) error {
	var w eventJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	if w.Kind == "" {
		return errors.New("event without a kind")
	}
	if w.AtNS < 0 {
		return fmt.Errorf("event at negative virtual time %d", w.AtNS)
	}
	*ev = Event{At: time.Duration(w.AtNS), Kind: w.Kind, PID: w.PID, Peer: w.Peer, Seq: w.Seq, Outcome: w.Outcome, Detail: w.Detail}
	return nil
}

// ---- trace info and verification ----

// KindCount is one row of a trace's kind histogram.
type KindCount struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
}

// TraceInfo summarises a trace (what `orrery lab trace info` prints).
type TraceInfo struct {
	Events int `json:"events"`
	// Kinds is the histogram of event kinds, sorted by kind.
	Kinds []KindCount `json:"kinds"`
	// Processes is the number of distinct process ids in the trace.
	Processes int `json:"processes"`
	// VirtualTime is the virtual time of the last event.
	VirtualTime time.Duration `json:"virtual_time_ns"`
	Fingerprint string        `json:"fingerprint"`
}

// Info summarises events.
func Info(events []Event) TraceInfo {
	kinds := map[string]int{}
	pids := map[uint64]bool{}
	var last time.Duration
	for _, ev := range events {
		kinds[ev.Kind]++
		if ev.PID != 0 {
			pids[ev.PID] = true
		}
		if ev.At > last {
			last = ev.At
		}
	}
	info := TraceInfo{Events: len(events), Processes: len(pids), VirtualTime: last, Fingerprint: Fingerprint(events)}
	for k, n := range kinds {
		info.Kinds = append(info.Kinds, KindCount{Kind: k, Count: n})
	}
	sort.Slice(info.Kinds, func(i, j int) bool { return info.Kinds[i].Kind < info.Kinds[j].Kind })
	return info
}

func (i TraceInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events:       %d\n", i.Events)
	fmt.Fprintf(&b, "processes:    %d\n", i.Processes)
	fmt.Fprintf(&b, "virtual time: %v\n", i.VirtualTime)
	fmt.Fprintf(&b, "fingerprint:  %s\n", i.Fingerprint)
	b.WriteString("kinds:\n")
	for _, k := range i.Kinds {
		fmt.Fprintf(&b, "  %-18s %d\n", k.Kind, k.Count)
	}
	return b.String()
}

// FingerprintMismatchError is returned by Verify when a trace does not hash
// to its recorded fingerprint (the trace or the fingerprint was altered, or
// the canonical encoding changed between versions).
type FingerprintMismatchError struct {
	Recorded string
	Computed string
}

func (e *FingerprintMismatchError) Error() string {
	return fmt.Sprintf("lab: trace fingerprint mismatch: recorded %s, computed %s", e.Recorded, e.Computed)
}

// Verify recomputes the fingerprint of events and compares it with the
// recorded one. It returns nil or a *FingerprintMismatchError.
func Verify(events []Event, fingerprint string) error {
	if got := Fingerprint(events); got != fingerprint {
		return &FingerprintMismatchError{Recorded: fingerprint, Computed: got}
	}
	return nil
}

// ---- divergence ----

// DivergenceContext is how many events before the first divergence a
// Divergence keeps for context.
const DivergenceContext = 5

// Divergence is the first point at which two traces differ.
type Divergence struct {
	// Index is the position of the first differing event. When one trace is
	// a strict prefix of the other, Index is the shorter one's length and
	// the missing side is nil.
	Index int
	// Want is the recorded (first) trace's event at Index; Got is the other
	// trace's. Either is nil when its trace ended before Index.
	Want, Got *Event
	// Before holds the events (common to both traces) just before Index, at
	// most DivergenceContext of them, oldest first.
	Before []Event
	// WantLen and GotLen are the traces' lengths.
	WantLen, GotLen int
	// WantFingerprint and GotFingerprint are the traces' fingerprints.
	WantFingerprint, GotFingerprint string
}

func (d *Divergence) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "traces diverge at event %d (recorded: %d events, fingerprint %.16s; replayed: %d events, fingerprint %.16s)\n",
		d.Index, d.WantLen, d.WantFingerprint, d.GotLen, d.GotFingerprint)
	for i, ev := range d.Before {
		fmt.Fprintf(&b, "    %6d  %s\n", d.Index-len(d.Before)+i, ev)
	}
	show := func(ev *Event) string {
		if ev == nil {
			return "<end of trace>"
		}
		return ev.String()
	}
	fmt.Fprintf(&b, "  - %6d  %s\n", d.Index, show(d.Want))
	fmt.Fprintf(&b, "  + %6d  %s\n", d.Index, show(d.Got))
	return b.String()
}

// Diff compares two traces event by event. It returns nil when they are
// equal, else their first divergence (a is the "want" side, b the "got").
func Diff(a, b []Event) *Divergence {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == len(a) && i == len(b) {
		return nil
	}
	d := &Divergence{Index: i, WantLen: len(a), GotLen: len(b), WantFingerprint: Fingerprint(a), GotFingerprint: Fingerprint(b)}
	if i < len(a) {
		ev := a[i]
		d.Want = &ev
	}
	if i < len(b) {
		ev := b[i]
		d.Got = &ev
	}
	from := max(0, i-DivergenceContext)
	d.Before = append([]Event(nil), a[from:i]...)
	return d
}

// Replay re-runs scenario under cfg (the recorded run's seed and config)
// and compares the new trace with recorded, event by event. It returns the
// new run and nil when the traces are identical, or the first divergence.
// A divergence under the same seed means the code under test changed, or it
// depends on something the lab does not control (wall clock, a raw
// goroutine, map order, an unseeded random source).
func Replay(recorded []Event, cfg Config, scenario Scenario) (*Result, *Divergence) {
	res := Run(cfg, scenario)
	return res, Diff(recorded, res.Events)
}

// ---- trace files ----

// TraceFileSchemaVersion is the version of the trace file format.
const TraceFileSchemaVersion = 1

// TraceFile is a recorded trace on its own (what `orrery lab trace info`,
// `verify` and `diff` read when not given a crash pack).
type TraceFile struct {
	SchemaVersion int     `json:"schema_version"`
	Fingerprint   string  `json:"fingerprint"`
	Events        []Event `json:"events"`
}

// WriteTraceFile writes events to path as a TraceFile (indented JSON).
func WriteTraceFile(path string, events []Event) error {
	if events == nil {
		events = []Event{}
	}
	data, err := json.MarshalIndent(TraceFile{SchemaVersion: TraceFileSchemaVersion, Fingerprint: Fingerprint(events), Events: events}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// LoadTrace reads a recorded trace from path, which holds either a crash
// pack or a trace file. It returns the events and their recorded
// fingerprint, unverified (see Verify). Malformed input yields an error
// matching ErrMalformed.
func LoadTrace(path string) (events []Event, fingerprint string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var probe struct {
		Events json.RawMessage `json:"events"`
		Trace  json.RawMessage `json:"trace"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, "", &MalformedError{Path: path, Field: "", Err: err}
	}
	if probe.Trace != nil {
		p, err := DecodeCrashPack(data)
		if err != nil {
			var me *MalformedError
			if errors.As(err, &me) {
				me.Path = path
			}
			return nil, "", err
		}
		return p.Trace, p.Fingerprint, nil
	}
	var tf TraceFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		return nil, "", &MalformedError{Path: path, Err: err}
	}
	if tf.SchemaVersion != TraceFileSchemaVersion {
		return nil, "", &MalformedError{Path: path, Field: "schema_version", Err: fmt.Errorf("unsupported trace file version %d (want %d)", tf.SchemaVersion, TraceFileSchemaVersion)}
	}
	if tf.Events == nil {
		return nil, "", &MalformedError{Path: path, Field: "events", Err: errors.New("missing")}
	}
	return tf.Events, tf.Fingerprint, nil
}
