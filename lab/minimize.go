package lab

import (
	"sort"
	"strconv"
	"strings"
)

// TraceOracle is a scenario-specific invariant checked on a trace, like the
// built-in oracles of CheckOracles: it returns the first violation (with
// Failure.Event its trace index and Failure.Oracle its name) or nil. It
// must read nothing but events, so that it gives the same answer on a
// recorded trace, on a replayed one and on any prefix of either (which is
// what lets the explorer minimise its failures).
type TraceOracle func(events []Event) *Failure

// CheckTrace checks events against the built-in oracles (CheckOracles) and
// the given extra ones, and returns the earliest violation by trace
// position (the built-in oracles first, then extra in order, on a tie).
func CheckTrace(events []Event, extra ...TraceOracle) *Failure {
	best := CheckOracles(events)
	for _, o := range extra {
		if f := o(events); f != nil && (best == nil || f.Event < best.Event) {
			best = f
		}
	}
	return best
}

// RunChecked is Run followed, when the run passed, by the extra trace
// oracles: the first violation becomes the result's Failure.
func RunChecked(cfg Config, scenario Scenario, extra ...TraceOracle) *Result {
	res := Run(cfg, scenario)
	if res.Failure == nil && len(extra) > 0 {
		var best *Failure
		for _, o := range extra {
			if f := o(res.Events); f != nil && (best == nil || f.Event < best.Event) {
				best = f
			}
		}
		res.Failure = best
	}
	return res
}

// OracleFailedExit is the name of the NoFailedExits oracle.
const OracleFailedExit = "failed-exit"

// NoFailedExits is an opt-in TraceOracle: it fails at the first process
// that completed with an Err or Panicked outcome. Use it for scenarios in
// which every process is expected to end Ok or be cancelled, so that a
// check made inside a process (returning an error) is found on the trace,
// at the event where it happened, and can be minimised.
func NoFailedExits(events []Event) *Failure {
	for i, ev := range events {
		if ev.Kind == "exit" && (strings.HasPrefix(ev.Outcome, "err(") || strings.HasPrefix(ev.Outcome, "panicked(")) {
			return &Failure{Oracle: OracleFailedExit, Message: "process " + strconv.FormatUint(ev.PID, 10) + " exited with " + ev.Outcome, Event: i}
		}
	}
	return nil
}

// Minimisation methods (CrashPack.Minimization.Method).
const (
	// MinimizeExact: the prefix reports the very failure of the run (same
	// oracle, same event index).
	MinimizeExact = "exact"
	// MinimizeOracle: the run's failure was detected at its end (a system
	// close that was not quiescent, say), and the trace shows the same
	// oracle earlier; the prefix ends at that earlier event.
	MinimizeOracle = "oracle"
	// MinimizeNone: the failure cannot be checked on a trace (a scenario's
	// own error, a deadlock, the step budget): the prefix is the whole
	// trace.
	MinimizeNone = "none"
)

// Minimization is the result of MinimizePrefix.
type Minimization struct {
	// PrefixLen is the length of the shortest failing prefix.
	PrefixLen int
	// Method is MinimizeExact, MinimizeOracle or MinimizeNone.
	Method string
	// Failure is what CheckTrace reports on the prefix (nil for
	// MinimizeNone).
	Failure *Failure
	// Checks is how many prefixes were checked.
	Checks int
}

// MinimizePrefix finds the shortest prefix of events that still exhibits
// failure, the failure of the run that produced events (extra are the
// trace oracles that run was checked with, beyond CheckOracles).
//
// A prefix "exhibits" the failure when CheckTrace on it, read as a complete
// run (so the end-of-run oracles apply at the prefix's end: a permit or a
// lease still held there counts as never released), reports the same
// oracle at the same event index. That predicate is monotone in the prefix
// length for the built-in oracles: an event-triggered violation appears
// exactly when its event is included, and a prefix that ends while some
// earlier permit or lease is still held reports that one first, which stops
// being true as the prefix grows past its release. So the shortest prefix
// is found by binary search over the length, in O(log n) checks of O(n)
// each; the answer is always one for which the predicate was checked true.
//
// When the full trace does not report the run's failure itself (failures
// detected by Run at the end of the run), but reports the same oracle at
// some event, the search is for that oracle at any index (MinimizeOracle).
// Failures that only re-execution can check (a scenario's own error, a
// deadlock, the step budget) are not minimised (MinimizeNone): express the
// property as a TraceOracle to have it minimised.
func MinimizePrefix(events []Event, failure *Failure, extra ...TraceOracle) Minimization {
	m := Minimization{PrefixLen: len(events), Method: MinimizeNone}
	if failure == nil {
		return m
	}
	check := func(n int) *Failure {
		m.Checks++
		return CheckTrace(events[:n], extra...)
	}
	full := check(len(events))
	var pred func(f *Failure) bool
	switch {
	case full != nil && full.Oracle == failure.Oracle && full.Event == failure.Event:
		m.Method = MinimizeExact
		pred = func(f *Failure) bool { return f != nil && f.Oracle == failure.Oracle && f.Event == failure.Event }
	case full != nil && full.Oracle == failure.Oracle:
		m.Method = MinimizeOracle
		pred = func(f *Failure) bool { return f != nil && f.Oracle == failure.Oracle }
	default:
		return m
	}
	// Smallest n in [0, len] with pred(check(n)); pred holds at len.
	found := map[int]*Failure{len(events): full}
	n := sort.Search(len(events), func(n int) bool {
		f := check(n)
		if pred(f) {
			found[n] = f
			return true
		}
		return false
	})
	m.PrefixLen = n
	m.Failure = found[n]
	return m
}
