package workflow

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// A run's function may start branches (Go, and the *Async calls, which
// are branches running one step). Every branch is a coroutine: it has a
// goroutine of its own, but exactly one coroutine of a run runs at a time
// — it holds the run's baton — so the run's state needs no lock and the
// function still reads as sequential code. A coroutine gives the baton up
// only where it waits: for a step's end (an inbox item, a child's end, a
// plain step's function running in parallel), for a branch's end (Get,
// Select), or when a re-run meets a recorded end.
//
// Which coroutine runs next is what makes a re-run take the same path:
//   - a coroutine made ready by another one (a branch just started, whose
//     starter resumes once it waits; a branch that ended, whose waiters
//     resume) runs first, in the order they were made ready;
//   - then a coroutine whose step ended in the journal, in the order of
//     those ends (runSeq): a re-run resumes its branches in the order the
//     first run recorded their steps' ends, so they ask for their next
//     steps in the same order and get the same positions;
//   - then one whose live wait is over, the first by creation order; it
//     records its step's end once it runs, so the journal's order is the
//     order coroutines resumed in.
//
// A branch that is still running when the function returns is stopped:
// its waits end at once and nothing it asks for afterwards is recorded.

// coro is one coroutine of a run.
type coro struct {
	idx  int
	park actor.Parker
	// inflight is the step attempt this coroutine waits for, if any: a
	// cancel skips it.
	inflight *attemptRef
	inFn     atomic.Bool // a Step's function of this coroutine runs
	// What it waits for while blocked: match (a live wait, until
	// deadline), a recorded end (keyed, key its runSeq), or neither (a
	// branch's end: another coroutine makes it ready).
	blocked  bool
	match    func() (bool, error)
	deadline time.Time
	keyed    bool
	key      uint64
	// The wait's outcome, set by whoever resumes it.
	timedOut bool
	err      error
	// done once its function returned; finished is its place in the
	// order branches ended in (from 1), which Select goes by.
	done     bool
	finished uint64
	waiters  []*coro
	// awaiting are the coroutines whose end this one waits for (Get,
	// Select); inq says it is in the run queue.
	awaiting []*coro
	inq      bool
}

// enqueue puts co in the run queue once.
func (s *sched) enqueue(co *coro) {
	if !co.inq {
		co.inq = true
		s.runq = append(s.runq, co)
	}
}

// sched is a run's coroutines.
type sched struct {
	cos      []*coro // the coroutines not done, in creation order
	runq     []*coro // made ready by another coroutine, in that order
	cur      atomic.Pointer[coro]
	made     int
	finishes uint64
	// closing is set once the function returned: the branches still
	// running are stopped with it.
	closing error
}

// main makes the function's own coroutine, the one running.
func (s *sched) main(r *runner) *coro {
	co := &coro{park: r.ex.NewParker()}
	s.made = 1
	s.cos = []*coro{co}
	s.cur.Store(co)
	return co
}

// multi reports whether the run has branches besides the running one.
func (s *sched) multi() bool { return len(s.cos) > 1 }

// errClosed is what a branch still running when its function returned
// gets from every wait.
var errClosed = &stop{kind: stopError, cause: detail("the workflow function returned while this branch was running")}

// spawn starts run as a new coroutine on a Ctx of its own, and runs it
// until it first waits or ends; then c's coroutine carries on.
func (c *Ctx) spawn(run func(bc *Ctx)) *coro {
	r := c.r
	s := &r.sch
	co := &coro{idx: s.made, park: r.ex.NewParker()}
	s.made++
	s.cos = append(s.cos, co)
	bc := &Ctx{cstate: c.cstate, co: co, ctx: c.ctx, detached: c.detached}
	me := c.co
	me.blocked, me.match, me.keyed, me.inq = true, nil, false, true
	s.runq = append([]*coro{me}, s.runq...)
	r.ex.Go(func() {
		for s.cur.Load() != co {
			_ = co.park.Park(context.Background())
		}
		bc.owner = goid()
		run(bc)
		r.finishCo(bc)
	})
	r.switchTo(me, co)
	return co
}

// finishCo ends coroutine bc's: its waiters become ready, and the baton
// goes on.
func (r *runner) finishCo(bc *Ctx) {
	s := &r.sch
	co := bc.co
	co.done = true
	s.finishes++
	co.finished = s.finishes
	for i, o := range s.cos {
		if o == co {
			s.cos = append(s.cos[:i:i], s.cos[i+1:]...)
			break
		}
	}
	for _, w := range co.waiters {
		if w.blocked && slices.Contains(w.awaiting, co) {
			w.awaiting = nil
			s.enqueue(w)
		}
	}
	co.waiters = nil
	if next := r.pick(bc); next != nil {
		r.switchTo(co, next)
	}
}

// switchTo hands the baton from me to next and, unless me is done, waits
// until it comes back.
func (r *runner) switchTo(me, next *coro) {
	if next == me {
		return
	}
	r.sch.cur.Store(next)
	next.park.Unpark()
	if me.done {
		return
	}
	for r.sch.cur.Load() != me {
		_ = me.park.Park(context.Background())
	}
}

// block gives c's coroutine's baton up until it is resumed, and returns
// the wait's outcome.
func (r *runner) block(c *Ctx) (timedOut bool, err error) {
	me := c.co
	me.blocked, me.timedOut, me.err = true, false, nil
	next := r.pick(c)
	if next == nil {
		me.blocked = false
		if !r.replay && c.halted == nil && r.sch.closing == nil {
			// Nobody can run: every coroutine waits for another. The code
			// can never get on from here, so the run is held as a
			// divergence is (blocked, until code that gets past this
			// point takes it): the wait returns it, the function unwinds.
			if c.div == nil {
				c.div = &DivergenceError{RunID: r.id, StepIndex: c.next, Reason: deadlockReason}
				if c.next < len(r.h.steps) {
					c.div.Recorded = r.h.steps[c.next].id
				}
			}
			return false, c.div
		}
		// A replay: the run waits for what the journal does not hold yet.
		r.journalEnd()
		return false, c.halt(&stop{kind: stopError, cause: detail("every branch of the run waits for another")})
	}
	r.switchTo(me, next)
	return me.timedOut, me.err
}

// deadlockReason is the reason of the divergence by which a deadlocked run
// is held.
const deadlockReason = "deadlock: every branch of the run waits for another"

// yieldRecorded is a recorded step end met by a re-run: when other
// coroutines run, c's resumes in the journal's order (seq).
func (r *runner) yieldRecorded(c *Ctx, seq uint64) error {
	if !r.sch.multi() || seq == 0 {
		return nil
	}
	c.co.keyed, c.co.key, c.co.match = true, seq, nil
	_, err := r.block(c)
	c.co.keyed = false
	return err
}

// waitFor blocks c's coroutine until one of cos has ended.
func (r *runner) waitFor(c *Ctx, cos ...*coro) error {
	for _, o := range cos {
		if o.done {
			return nil
		}
	}
	if c.halted != nil {
		return c.halted
	}
	for _, o := range cos {
		o.waiters = append(o.waiters, c.co)
	}
	c.co.match, c.co.keyed, c.co.awaiting = nil, false, cos
	_, err := r.block(c)
	c.co.awaiting = nil
	return err
}

// ready resumes co with its outcome set: it is taken off the blocked.
func ready(co *coro) *coro {
	co.blocked, co.inq = false, false
	return co
}

// pick chooses the coroutine to resume next (see the comment at the top),
// polling the run's inbox and parking while nobody is ready. It runs on
// the goroutine of c's coroutine, which is giving the baton up (or ended);
// it returns nil only when no coroutine could ever run again.
func (r *runner) pick(c *Ctx) *coro {
	s := &r.sch
	for {
		if len(s.runq) > 0 {
			next := s.runq[0]
			s.runq = s.runq[1:]
			return ready(next)
		}
		if len(s.cos) == 0 {
			return nil
		}
		// A stopped run, or a returned function, ends every wait.
		stopErr := c.halted
		if s.closing != nil {
			stopErr = s.closing
		}
		if stopErr != nil {
			var main *coro
			for _, co := range s.cos {
				switch {
				case !co.blocked || co.inq:
				case s.closing != nil && co.idx == 0:
					main = co // the function, waiting for its branches to stop
				default:
					s.enqueue(co)
				}
			}
			for _, co := range s.runq {
				co.err = stopErr
			}
			if len(s.runq) == 0 {
				if main != nil && len(s.cos) == 1 {
					return ready(main)
				}
				return nil
			}
			continue
		}
		var k *coro
		live := false
		for _, co := range s.cos {
			switch {
			case !co.blocked:
			case co.keyed && (k == nil || co.key < k.key):
				k = co
			case co.match != nil:
				live = true
			}
		}
		if k != nil {
			return ready(k)
		}
		if !live || r.replay {
			return nil
		}
		if next := r.lookOnce(c); next != nil {
			return next
		}
	}
}

// lookOnce is one look for a live wait that is over: it reads the inbox (on
// a hint, or once the poll interval passed), records what control
// requests ask, and asks each waiting coroutine's match in creation order.
// With nothing ready it parks until a hint, a deadline or the poll
// interval; it returns nil to be called again (also once the run stopped:
// c.halted is set then).
func (r *runner) lookOnce(c *Ctx) *coro {
	s := &r.sch
	ctx := c.ctx
	if err := r.writable(ctx); err != nil {
		c.halt(err)
		return nil
	}
	if err := r.refreshDue(ctx); err != nil {
		c.halt(r.failed(ctx, "read inbox", err))
		return nil
	}
	if p := r.plan(); p.stops() || len(p.catchUp) > 0 {
		if err := r.applyPlan(ctx, p, r.inflights()); err != nil {
			if !isCancellation(err) {
				c.halt(err)
				return nil
			}
			// The cancel is told to every coroutine whose attempt it
			// skipped, in creation order.
			for _, co := range s.cos {
				if co.blocked && co.inflight != nil && !co.inflight.detached && co.match != nil {
					co.err = err
					co.inflight = nil
					s.enqueue(co)
				}
			}
			if len(s.runq) > 0 {
				next := s.runq[0]
				s.runq = s.runq[1:]
				return ready(next)
			}
		}
	}
	now := r.ex.Now()
	var soonest time.Time
	for _, co := range s.cos {
		if !co.blocked || co.match == nil {
			continue
		}
		ok, err := co.match()
		if err != nil {
			c.halt(r.failed(ctx, "wait", err))
			return nil
		}
		if ok {
			return ready(co)
		}
		if !co.deadline.IsZero() {
			if !now.Before(co.deadline) {
				co.timedOut = true
				return ready(co)
			}
			if soonest.IsZero() || co.deadline.Before(soonest) {
				soonest = co.deadline
			}
		}
	}
	d := r.poll
	if !soonest.IsZero() && soonest.Sub(now) < d {
		d = soonest.Sub(now)
	}
	t := r.ex.AfterFunc(d, r.park.Unpark)
	perr := r.park.Park(ctx)
	t.Stop()
	if perr != nil {
		c.halt(&stop{kind: stopShutdown, cause: perr})
	}
	return nil
}

// inflights are the attempts the run's coroutines wait for.
func (r *runner) inflights() []*attemptRef {
	var out []*attemptRef
	for _, co := range r.sch.cos {
		if co.inflight != nil {
			out = append(out, co.inflight)
		}
	}
	return out
}

// closeBranches stops the branches still running once the function
// returned: their waits end with errClosed, and they unwind one at a time.
func (r *runner) closeBranches(c *Ctx) {
	s := &r.sch
	if len(s.cos) <= 1 {
		return
	}
	s.closing = errClosed
	c.co.match, c.co.keyed = nil, false
	_, _ = r.block(c)
	s.closing = nil
}
