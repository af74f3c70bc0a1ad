package dispatch

// mailbox is the runtime's FIFO: a growable ring. It is plain data guarded by
// the Runtime's mutex and holds no reference to the runtime, which is what
// makes processing pull-based (the dispatcher contract §4): the mailbox cannot push.
//
// The ring grows by doubling and shrinks by halving once it is at most a
// quarter full, so an unbounded burst does not pin its memory after the loop
// has caught up, and a consumed payload is released at once.
type mailbox struct {
	ring []Message // len is zero or a power of two
	head int
	n    int
}

// minRing is the smallest ring allocated, and the size below which the ring
// never shrinks.
const minRing = 16

func (m *mailbox) len() int { return m.n }

func (m *mailbox) push(msg Message) {
	if m.n == len(m.ring) {
		m.resize(max(minRing, 2*len(m.ring)))
	}
	m.ring[(m.head+m.n)&(len(m.ring)-1)] = msg
	m.n++
}

// pop removes and returns the oldest message.
func (m *mailbox) pop() (Message, bool) {
	if m.n == 0 {
		return Message{}, false
	}
	msg := m.ring[m.head]
	m.ring[m.head] = Message{} // drop the reference: the payload belongs to the handler now
	m.head = (m.head + 1) & (len(m.ring) - 1)
	m.n--
	if len(m.ring) > minRing && m.n <= len(m.ring)/4 {
		m.resize(len(m.ring) / 2)
	}
	return msg, true
}

// resize moves the queued messages, oldest first, into a ring of size slots.
func (m *mailbox) resize(size int) {
	ring := make([]Message, size)
	for i := 0; i < m.n; i++ {
		ring[i] = m.ring[(m.head+i)&(len(m.ring)-1)]
	}
	m.ring, m.head = ring, 0
}
