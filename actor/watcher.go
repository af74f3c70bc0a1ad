package actor

import (
	"context"
	"sync"
)

// ErrWatcherClosed is returned by Watcher.Receive once the watcher is
// closed and every Down it had received has been taken.
const ErrWatcherClosed sentinel = "actor: watcher closed"

// Watcher monitors processes from outside any process: from a test, from
// main, from a plain goroutine. It receives the Downs of the processes it
// monitors in the order they are delivered, as a process's mailbox would,
// with the same guarantees: one Down per monitor, an immediate Down with
// Err(ErrNoProc) for a process that is already dead, and none after
// Demonitor. Its queue is unbounded, like the system messages of a
// mailbox. Close it when done. Monitor, Demonitor, TryReceive and Close are safe
// for concurrent use; Receive has one caller at a time.
type Watcher struct {
	c core

	mu     sync.Mutex
	queue  []Down
	active map[uint64]PID // monitors set and not yet Down or demonitored
	closed bool
	wait   Parker
}

// NewWatcher returns a watcher on sys. It is not a process: it has no
// scope, no mailbox and no goroutine.
func NewWatcher(sys *System) *Watcher {
	w := &Watcher{active: make(map[uint64]PID), wait: sys.ex.NewParker()}
	w.c.id = sys.ids.next()
	w.c.name = "watcher"
	w.c.sys = sys
	w.c.impl = (*watcherImpl)(w)
	return w
}

// Monitor starts monitoring pid and returns the monitor's reference.
func (w *Watcher) Monitor(pid PID) MonitorRef {
	ref := MonitorRef{id: w.c.sys.ids.next(), target: pid}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ref
	}
	w.active[ref.id] = pid
	w.mu.Unlock()
	w.c.sys.trace(TraceEvent{Kind: TraceMonitor, Peer: pid, Seq: ref.id})
	if pid.c == nil || !pid.c.addMonitor(ref.id, &w.c) {
		w.deliver(Down{Ref: ref, PID: pid, Outcome: ErrOutcome(ErrNoProc)})
	}
	return ref
}

// Demonitor stops a monitor and removes its Down if it is already queued,
// so that Receive never returns it. It reports whether the monitor was
// active (no Down had been taken for it).
func (w *Watcher) Demonitor(ref MonitorRef) bool {
	w.mu.Lock()
	_, ok := w.active[ref.id]
	delete(w.active, ref.id)
	for i, d := range w.queue {
		if d.Ref.id == ref.id {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			break
		}
	}
	w.mu.Unlock()
	if ok && ref.target.c != nil {
		ref.target.c.removeMonitor(ref.id)
	}
	return ok
}

// Receive returns the next Down, waiting for one until ctx is done.
func (w *Watcher) Receive(ctx context.Context) (Down, error) {
	for {
		if d, ok, closed := w.take(); ok {
			return d, nil
		} else if closed {
			return Down{}, ErrWatcherClosed
		}
		if err := w.wait.Park(ctx); err != nil {
			return Down{}, err
		}
	}
}

// TryReceive returns the next Down if one is queued.
func (w *Watcher) TryReceive() (Down, bool) {
	d, ok, _ := w.take()
	return d, ok
}

func (w *Watcher) take() (d Down, ok, closed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return Down{}, false, w.closed
	}
	d = w.queue[0]
	w.queue[0] = Down{}
	w.queue = w.queue[1:]
	delete(w.active, d.Ref.id)
	return d, true, false
}

// Close removes every monitor still active, so monitored processes no
// longer refer to the watcher, and wakes a Receive waiting for a Down.
// Downs already queued can still be taken. Close is idempotent.
func (w *Watcher) Close() {
	w.mu.Lock()
	w.closed = true
	refs := make([]MonitorRef, 0, len(w.active))
	for id, pid := range w.active {
		refs = append(refs, MonitorRef{id: id, target: pid})
	}
	w.active = make(map[uint64]PID)
	w.mu.Unlock()
	// Removing monitors has no observable order; map order is harmless.
	for _, ref := range refs {
		if ref.target.c != nil {
			ref.target.c.removeMonitor(ref.id)
		}
	}
	w.wait.Unpark()
}

func (w *Watcher) deliver(d Down) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	if _, ok := w.active[d.Ref.id]; !ok {
		w.mu.Unlock()
		return false // demonitored while the Down was on its way
	}
	w.queue = append(w.queue, d)
	w.mu.Unlock()
	w.wait.Unpark()
	return true
}

// watcherImpl is what a monitored process sees of a watcher.
type watcherImpl Watcher

func (w *watcherImpl) interrupt() {}

func (w *watcherImpl) deliverSystem(msg any) bool {
	d, ok := msg.(Down)
	return ok && (*Watcher)(w).deliver(d)
}

func (w *watcherImpl) abandon(Outcome) bool { return true }
