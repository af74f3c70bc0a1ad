package lab

import (
	"fmt"
	"sort"
	"strings"

	"github.com/orrery-run/orrery/actor"
)

// Oracle names, as they appear in failures and crash packs.
const (
	OracleReplyLeak        = "reply-obligation-leak"
	OracleQuiescence       = "quiescence"
	OracleUnreleasedLease  = "unreleased-lease"
	OracleUnreleasedPermit = "unreleased-permit"
	OracleMailboxFIFO      = "mailbox-fifo"
	OracleMonotone         = "monotone-outcome"
)

// CheckOracles checks a complete trace against every oracle and returns the
// first violation (by trace position), or nil. The oracles read only the
// trace, so a recorded trace can be re-checked offline.
//
//   - reply-obligation-leak: a deferred reply was still unresolved when its
//     server ended normally (Ok) or was stopped (requested or shutdown), so
//     the runtime had to abort it: the server dropped the obligation. Aborts
//     caused by a crash or a kill are not leaks.
//   - quiescence: a scope's Close returned while process goroutines were
//     still running (a child outlived its closed scope).
//   - unreleased-lease / unreleased-permit: a registry lease or a mailbox
//     permit never reached a terminal state by the end of the run.
//   - mailbox-fifo: a process handled its messages out of mailbox order.
//   - monotone-outcome: a Panicked (or Cancelled) child was restarted, or a
//     process completed twice (an outcome rewritten).
func CheckOracles(events []Event) *Failure {
	var fails []*Failure
	add := func(oracle string, at int, format string, args ...any) {
		fails = append(fails, &Failure{Oracle: oracle, Message: fmt.Sprintf(format, args...), Event: at})
	}

	lastHandled := map[uint64]uint64{}
	exited := map[uint64]int{}
	permits := map[string]int{} // permit id -> reserve event
	leases := map[string]int{}  // "gen name" -> register event

	for i, ev := range events {
		switch ev.Kind {
		case actor.TraceObligation.String():
			if ev.Detail == "abort-on-stop" && (ev.Outcome == "" || strings.HasPrefix(ev.Outcome, "cancelled(requested") || strings.HasPrefix(ev.Outcome, "cancelled(shutdown")) {
				add(OracleReplyLeak, i, "process %d ended (%s) with deferred reply obligation %d unresolved", ev.PID, outcomeOrOk(ev.Outcome), ev.Seq)
			}
		case actor.TraceScopeClosed.String():
			if ev.Seq > 0 {
				add(OracleQuiescence, i, "scope %q closed with %d process goroutines still running", ev.Detail, ev.Seq)
			}
		case actor.TracePermit.String():
			switch ev.Detail {
			case "reserve":
				permits[fmt.Sprint(ev.Seq)] = i
			default:
				delete(permits, fmt.Sprint(ev.Seq))
			}
		case actor.TraceRegistry.String():
			name := strings.SplitN(ev.Detail, " ", 2)
			key := fmt.Sprintf("%d", ev.Seq)
			if name[0] == "register" {
				leases[key] = i
			} else {
				delete(leases, key)
			}
		case actor.TraceHandle.String():
			if last, ok := lastHandled[ev.PID]; ok && ev.Seq <= last {
				add(OracleMailboxFIFO, i, "process %d handled message %d after message %d", ev.PID, ev.Seq, last)
			}
			lastHandled[ev.PID] = ev.Seq
		case actor.TraceExit.String():
			if first, ok := exited[ev.PID]; ok {
				add(OracleMonotone, i, "process %d completed twice (first at event %d): an outcome was rewritten", ev.PID, first)
			}
			exited[ev.PID] = i
		case actor.TraceSupervision.String():
			if strings.HasPrefix(ev.Detail, "restart ") && (strings.HasPrefix(ev.Outcome, "panicked") || strings.HasPrefix(ev.Outcome, "cancelled")) {
				add(OracleMonotone, i, "supervisor restarted child %q after %s", strings.TrimPrefix(ev.Detail, "restart "), ev.Outcome)
			}
		}
	}
	for _, at := range sortedValues(permits) {
		add(OracleUnreleasedPermit, at, "mailbox permit %d of process %d reserved and never sent or aborted", events[at].Seq, events[at].PID)
	}
	for _, at := range sortedValues(leases) {
		add(OracleUnreleasedLease, at, "registry lease %s never released", events[at].Detail)
	}
	if len(fails) == 0 {
		return nil
	}
	sort.SliceStable(fails, func(i, j int) bool { return fails[i].Event < fails[j].Event })
	return fails[0]
}

func sortedValues(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Ints(out)
	return out
}

func outcomeOrOk(o string) string {
	if o == "" {
		return "ok"
	}
	return o
}
