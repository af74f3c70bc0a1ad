package plane

import "github.com/orrery-run/orrery/world"

// FireLane is the lane, of n, in which a host fires world's timers.
var FireLane = fireLane

// DecodeCount counts the calls an Ops makes of its ingress decoder.
type DecodeCount struct {
	Canonicalize, IsCanonical, Unmarshal int
}

// CountDecodes makes o count its ingress decoder's calls into the
// returned count (o must not be in use by another goroutine).
func CountDecodes(o *Ops) *DecodeCount {
	c := &DecodeCount{}
	o.dec = countingDecoder{ingressDecoder: o.dec, c: c}
	return c
}

type countingDecoder struct {
	ingressDecoder
	c *DecodeCount
}

func (d countingDecoder) Canonicalize(data []byte) ([]byte, error) {
	d.c.Canonicalize++
	return d.ingressDecoder.Canonicalize(data)
}

func (d countingDecoder) IsCanonical(data []byte) error {
	d.c.IsCanonical++
	return d.ingressDecoder.IsCanonical(data)
}

func (d countingDecoder) Unmarshal(data []byte, v any) error {
	d.c.Unmarshal++
	return d.ingressDecoder.Unmarshal(data, v)
}

// Parked returns what id's passivated process parked on h (ok=false if
// nothing is parked).
func Parked(h *Host, id string) (snap world.Snapshot, cursor uint64, ok bool) {
	h.mu.Lock()
	l := h.leases[id]
	h.mu.Unlock()
	if l == nil {
		return snap, 0, false
	}
	pk := l.parked.Load()
	if pk == nil {
		return snap, 0, false
	}
	return pk.snap, pk.cursor, true
}

// Park puts snap and cursor as id's parked state on h, as a predecessor
// that passivated would.
func Park(h *Host, id string, snap world.Snapshot, cursor uint64) {
	h.mu.Lock()
	l := h.leases[id]
	h.mu.Unlock()
	l.parked.Store(&parkedWorld{snap: snap, cursor: cursor})
}
