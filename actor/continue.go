package actor

import "time"

// Continue asks for f to run on the process right after the current
// callback (Init, a handler, or another continuation) returns, before the
// process handles any other message: OTP's handle_continue. A continuation
// asked for in Init runs after Start has returned, so Start stays quick
// while a message sent right after Start still sees what the continuation
// did. Continuations run in the order asked. An error from f ends the
// process with Outcome Err, a panic with Panicked, as from a handler.
// Continuations still pending when the process is asked to stop are
// dropped, and during drain and the stop hook Continue does nothing.
func (p *Proc) Continue(f func(p *Proc) error) {
	if p.phase == phaseStop || f == nil {
		return
	}
	x := p.extra()
	x.cont = append(x.cont, f)
}

// IdleTimeout is the info message of an idle timeout (see Proc.IdleTimeout).
type IdleTimeout struct {
	// After is the timeout that elapsed.
	After time.Duration
}

// idleFire is the timer's system message; dispatch turns it into an
// IdleTimeout if it is still current.
type idleFire struct{ gen uint64 }

type idleState struct {
	after time.Duration
	asked bool // the current callback asked; armed when it returns
	armed bool
	gen   uint64
	timer Timer
}

func (st *idleState) disarm() {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	st.armed = false
}

// IdleTimeout asks to be woken if no user message arrives within d after
// the current callback returns: the process then receives an IdleTimeout
// info message (through HandleInfo; a plain actor needs an InfoHandler).
// It is OTP's gen_server timeout. A user message (a call, cast, Send or
// Info) that arrives in time cancels it; system messages (Down, Exit,
// SendAfter timers, the idle timeout itself) do not, and their handlers
// leave it armed unless they ask again. A later IdleTimeout replaces the
// pending one, and d <= 0 cancels it. Like OTP's, it applies to the callback
// that asked: after a user message, ask again to keep one.
func (p *Proc) IdleTimeout(d time.Duration) {
	if p.phase == phaseStop {
		return
	}
	x := p.extra()
	x.idle.after, x.idle.asked = d, true
}

// Shutdown ends the process after the current callback returns, as a
// shutdown with reason: it stops handling messages, drains, runs its stop
// hook, and completes Cancelled with CancelShutdown and Cause reason, which
// errors.Is and errors.As reach from the outcome's AsError (OTP's
// {shutdown, Reason}). A nil reason is a plain shutdown.
func (p *Proc) Shutdown(reason error) {
	p.c.requestCancel(CancelReason{Kind: CancelShutdown, Cause: reason}, false)
}

// Shutdown asks the process to shut down with reason, from outside, and
// returns without waiting (see Proc.Shutdown; Wait for the outcome).
func (p PID) Shutdown(reason error) {
	p.Cancel(CancelReason{Kind: CancelShutdown, Cause: reason})
}
