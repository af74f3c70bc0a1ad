package plane

import (
	"slices"
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
	mu sync.Mutex
	// waiters are the callers waiting for each call id: more than one
	// when the same call is waited for twice in this process (a caller
	// that retries its call while its first wait goes on), and each gets
	// the reply.
	waiters map[string][]*replyWaiter
}

type replyWaiter struct {
	p     actor.Parker
	done  bool
	reply world.Reply
}

// NewReplies returns an empty hub; share it between a process's hosts and
// clients (HostConfig.Replies, ClientConfig.Replies).
func NewReplies() *Replies { return &Replies{waiters: map[string][]*replyWaiter{}} }

func (r *Replies) register(callID string, p actor.Parker) *replyWaiter {
	w := &replyWaiter{p: p}
	r.mu.Lock()
	r.waiters[callID] = append(r.waiters[callID], w)
	r.mu.Unlock()
	return w
}

func (r *Replies) take(callID string, w *replyWaiter) (world.Reply, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.reply, w.done
}

// forget removes w, and only w, from callID's waiters.
func (r *Replies) forget(callID string, w *replyWaiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := slices.DeleteFunc(r.waiters[callID], func(x *replyWaiter) bool { return x == w })
	if len(ws) == 0 {
		delete(r.waiters, callID)
		return
	}
	r.waiters[callID] = ws
}

func (r *Replies) deliver(rep world.Reply) {
	if r == nil {
		return
	}
	r.mu.Lock()
	ws := slices.Clone(r.waiters[rep.CallID])
	for _, w := range ws {
		if !w.done {
			w.done, w.reply = true, rep
		}
	}
	r.mu.Unlock()
	for _, w := range ws {
		w.p.Unpark()
	}
}
