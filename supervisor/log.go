package supervisor

import (
	"fmt"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Decision is what a log entry records.
type Decision uint8

const (
	// DecisionStart: a fresh instance of the child started (PID is new).
	DecisionStart Decision = iota + 1
	// DecisionIgnore: Start returned no PID and no error; nothing runs.
	DecisionIgnore
	// DecisionStartFailed: Start failed; Outcome is the instance's.
	DecisionStartFailed
	// DecisionRestart: an instance exited (PID, Outcome) and the child will
	// start again after Delay. The new instance has its own Start entry.
	DecisionRestart
	// DecisionStop: an instance exited and is not restarted.
	DecisionStop
	// DecisionBudgetExhausted: a restart was due but the budget is spent;
	// the escalation policy's entry follows.
	DecisionBudgetExhausted
	// DecisionResetCounter: PolicyResetCounter cleared the restart window.
	DecisionResetCounter
	// DecisionEscalate: the supervisor gives up: it stops every child and
	// exits; Err is the *EscalationError.
	DecisionEscalate
	// DecisionShutdown: the supervisor stopped the child on purpose and it
	// stopped within its shutdown timeout.
	DecisionShutdown
	// DecisionKill: the supervisor killed the child (BrutalKill, or its
	// shutdown timeout ran out).
	DecisionKill
	// DecisionDelete: DeleteChild removed a terminated child's spec.
	DecisionDelete
)

func (d Decision) String() string {
	switch d {
	case DecisionStart:
		return "start"
	case DecisionIgnore:
		return "ignore"
	case DecisionStartFailed:
		return "start-failed"
	case DecisionRestart:
		return "restart"
	case DecisionStop:
		return "stop"
	case DecisionBudgetExhausted:
		return "budget-exhausted"
	case DecisionResetCounter:
		return "reset-counter"
	case DecisionEscalate:
		return "escalate"
	case DecisionShutdown:
		return "shutdown"
	case DecisionKill:
		return "kill"
	case DecisionDelete:
		return "delete"
	}
	return fmt.Sprintf("decision(%d)", uint8(d))
}

// LogEntry is one supervision decision. Entries are the supervisor's
// ledger: a restart shows as the failed instance's Restart entry followed,
// possibly after a backoff, by the new instance's Start entry; neither
// rewrites the other.
type LogEntry struct {
	// Seq numbers entries from 1 without gaps, per supervisor instance.
	Seq      uint64
	Time     time.Time // on the executor's clock
	ChildID  string
	PID      actor.PID // the instance the entry is about (zero if none)
	Outcome  actor.Outcome
	Decision Decision
	Delay    time.Duration // the backoff of a Restart
	Err      error         // the start error, or the *EscalationError
}

func (e LogEntry) String() string {
	s := fmt.Sprintf("#%d %s %q %s", e.Seq, e.Decision, e.ChildID, e.PID)
	if !e.Outcome.IsOk() {
		s += " " + e.Outcome.String()
	}
	if e.Delay > 0 {
		s += fmt.Sprintf(" after %v", e.Delay)
	}
	if e.Err != nil {
		s += fmt.Sprintf(": %v", e.Err)
	}
	return s
}

// ChildStatus is where a child is in its life cycle.
type ChildStatus uint8

const (
	StatusRunning ChildStatus = iota + 1
	// StatusRestarting: waiting out a backoff before it starts again.
	StatusRestarting
	// StatusTerminated: not running; its spec is kept (static supervisors).
	StatusTerminated
)

func (s ChildStatus) String() string {
	switch s {
	case StatusRunning:
		return "running"
	case StatusRestarting:
		return "restarting"
	case StatusTerminated:
		return "terminated"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// ChildInfo describes a child, as WhichChildren reports it.
type ChildInfo struct {
	ID      string
	PID     actor.PID // zero unless Status is StatusRunning
	Type    ChildType
	Restart RestartType
	Status  ChildStatus
}

// Counts is what CountChildren reports (OTP's count_children).
type Counts struct {
	Specs       int // child specs, running or not
	Active      int // running children
	Supervisors int // specs of Type Supervisor
	Workers     int // specs of Type Worker
}
