package plane

import (
	"sync"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/world"
)

// Replies is the in-process hand-off of call replies from hosts to waiting
// clients: a host delivers each reply after the commit that made it
// durable, and a Call waiting in the same process is unparked at once. It
// holds only the calls being waited for; a reply nobody waits for here is
// dropped, since the journal keeps what re-derives it (see the package doc).
type Replies struct {
	mu      sync.Mutex
	waiters map[string]*replyWaiter
}

type replyWaiter struct {
	p     actor.Parker
	done  bool
	reply world.Reply
}

// NewReplies returns an empty hub; share it between a process's hosts and
// clients (HostConfig.Replies, ClientConfig.Replies).
func NewReplies() *Replies { return &Replies{waiters: map[string]*replyWaiter{}} }

func (r *Replies) register(callID string, p actor.Parker) *replyWaiter {
	w := &replyWaiter{p: p}
	r.mu.Lock()
	r.waiters[callID] = w
	r.mu.Unlock()
	return w
}

func (r *Replies) take(callID string, w *replyWaiter) (world.Reply, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.reply, w.done
}

func (r *Replies) forget(callID string) {
	r.mu.Lock()
	delete(r.waiters, callID)
	r.mu.Unlock()
}

func (r *Replies) deliver(rep world.Reply) {
	if r == nil {
		return
	}
	r.mu.Lock()
	w, ok := r.waiters[rep.CallID]
	if ok && !w.done {
		w.done, w.reply = true, rep
	}
	r.mu.Unlock()
	if ok {
		w.p.Unpark()
	}
}
