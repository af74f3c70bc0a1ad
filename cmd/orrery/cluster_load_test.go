//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
)

// payTarget is the effect target: an HTTP server in the test process that
// counts the POSTs it receives per key (the body), and the idempotency
// keys they carried, as a target that deduplicates by them would.
type payTarget struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  map[string]int
	idem map[string]map[string]bool // body → the Idempotency-Key headers it came with
}

func newPayTarget(t *testing.T) *payTarget {
	p := &payTarget{got: map[string]int{}, idem: map[string]map[string]bool{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.got[string(b)]++
		if p.idem[string(b)] == nil {
			p.idem[string(b)] = map[string]bool{}
		}
		p.idem[string(b)][r.Header.Get("Idempotency-Key")] = true
		p.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *payTarget) seen(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[key]
}

// total is how many POSTs the target received.
func (p *payTarget) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.got {
		n += v
	}
	return n
}

// idemKeys returns the idempotency keys the POSTs of key carried.
func (p *payTarget) idemKeys(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return keys(p.idem[key])
}

// Operation kinds of the load.
const (
	opAdd   = "add"
	opAlarm = "alarm"
	opPay   = "pay"
	opGet   = "get"
	opRun   = "run"
	// opMark is v2's input: the load sends it once every world is on v2
	// (load.marks).
	opMark = "mark"
)

// acked is an event the API acknowledged: durable in the world's inbox
// at Seq under idempotency key Key.
type acked struct {
	World, Kind, Key string
	Seq              uint64
	G                int       // the load goroutine (client) that sent it
	At               time.Time // when the API acknowledged it
}

// ackedRun is a workflow run whose start the API acknowledged: the run
// exists under ID. Again says the load started it a second time after the
// acknowledgement (as a client unsure of the first answer would), and
// AgainCreated whether that second start answered that it created the run,
// which would make it a second run of one id.
type ackedRun struct {
	ID           string
	G            int
	At           time.Time
	Again        bool
	AgainCreated bool
}

// ackLog is what the load got acknowledged, and what went wrong.
type ackLog struct {
	mu        sync.Mutex
	events    []acked
	runs      []ackedRun
	tried     map[string]bool // every run id the load asked to start, acknowledged or not
	calls     int             // calls answered
	retries   int             // attempts refused or lost, then retried
	abandoned int             // operations still unacknowledged when the load stopped
	permanent []string
	samples   []opSample // every answered operation's timing
}

// opSample is one operation the API answered: the load goroutine that
// sent it, when it was answered and how long the answer took from the
// first attempt (retries included: what the client waited).
type opSample struct {
	G    int
	At   time.Time
	Took time.Duration
}

func (l *ackLog) sample(g int, began time.Time) {
	now := time.Now()
	l.mu.Lock()
	l.samples = append(l.samples, opSample{G: g, At: now, Took: now.Sub(began)})
	l.mu.Unlock()
}

// timings returns the samples answered in [from, to).
func (l *ackLog) timings(from, to time.Time) []opSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []opSample
	for _, s := range l.samples {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

func (l *ackLog) ack(a acked) {
	l.mu.Lock()
	l.events = append(l.events, a)
	l.mu.Unlock()
}

func (l *ackLog) tryRun(id string) {
	l.mu.Lock()
	if l.tried == nil {
		l.tried = map[string]bool{}
	}
	l.tried[id] = true
	l.mu.Unlock()
}

func (l *ackLog) ackRun(r ackedRun) {
	l.mu.Lock()
	l.runs = append(l.runs, r)
	l.mu.Unlock()
}

// ackedRuns returns the acknowledged runs, in ack order, and the ids of
// every run the load tried to start.
func (l *ackLog) ackedRuns() ([]ackedRun, map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tried := make(map[string]bool, len(l.tried))
	for id := range l.tried {
		tried[id] = true
	}
	return slices.Clone(l.runs), tried
}

// byWorld returns the acknowledged events grouped by world, in ack order.
func (l *ackLog) byWorld() map[string][]acked {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]acked{}
	for _, a := range l.events {
		out[a.World] = append(out[a.World], a)
	}
	return out
}

func (l *ackLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for _, a := range l.events {
		n[a.Kind]++
	}
	again := 0
	for _, r := range l.runs {
		if r.Again {
			again++
		}
	}
	marks := ""
	if n[opMark] > 0 {
		marks = fmt.Sprintf("%d marks, ", n[opMark])
	}
	return fmt.Sprintf("%d adds, %s%d alarms, %d pays, %d workflow runs (%d of them started twice) acknowledged, %d calls answered, %d retries, %d abandoned at stop",
		n[opAdd], marks, n[opAlarm], n[opPay], len(l.runs), again, l.calls, l.retries, l.abandoned)
}

// load drives events with idempotency keys, calls, alarms, pays and
// workflow runs from several goroutines at the worlds, through any running
// child's API.
type load struct {
	c      *cluster
	worlds []string
	led    *ackLog
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Int64
	// marks turns some of the adds into v2's marks: set once every world
	// is on v2, which alone handles them.
	marks atomic.Bool
}

// startLoad starts n goroutines of load; stop ends them.
func (c *cluster) startLoad(worlds []string, n int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{c: c, worlds: worlds, led: &ackLog{}, cancel: cancel}
	for g := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 0x636c7573746572))
			for ctx.Err() == nil {
				l.one(ctx, rng, g)
			}
		}()
	}
	c.t.Cleanup(l.stop)
	return l
}

// stop ends the load and waits for its goroutines.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// one runs one operation until the API acknowledges it or the load stops.
func (l *load) one(ctx context.Context, rng *rand.Rand, g int) {
	w := l.worlds[rng.IntN(len(l.worlds))]
	n := l.seq.Add(1)
	var kind string
	// A run is a few writes more than an event (its start, its steps, a
	// timer and an effect), so runs take a small share from the calls and
	// the load's total rate stays about what it was without them.
	switch r := rng.IntN(100); {
	case r < 20 && l.marks.Load():
		kind = opMark
	case r < 50:
		kind = opAdd
	case r < 65:
		kind = opAlarm
	case r < 80:
		kind = opPay
	case r < 92:
		kind = opGet
	default:
		kind = opRun
	}
	key := fmt.Sprintf("%s-%d-%d", kind, g, n)
	began := time.Now()
	if kind == opRun {
		l.run(ctx, rng, g, key, began)
		return
	}
	var send func(cl *api.Client, ctx context.Context) (uint64, error)
	switch kind {
	case opAdd:
		send = func(cl *api.Client, ctx context.Context) (uint64, error) {
			a, err := cl.Send(ctx, w, Add{}.WorldType(), Add{Key: key}, key)
			return a.Seq, err
		}
	case opMark:
		send = func(cl *api.Client, ctx context.Context) (uint64, error) {
			a, err := cl.Send(ctx, w, Mark{}.WorldType(), Mark{Key: key}, key)
			return a.Seq, err
		}
	case opAlarm:
		after := 200 + rng.Int64N(601)
		send = func(cl *api.Client, ctx context.Context) (uint64, error) {
			a, err := cl.Send(ctx, w, Alarm{}.WorldType(), Alarm{Key: key, AfterMs: after}, key)
			return a.Seq, err
		}
	case opPay:
		url := l.c.target.srv.URL + "/pay"
		send = func(cl *api.Client, ctx context.Context) (uint64, error) {
			a, err := cl.Send(ctx, w, Pay{}.WorldType(), Pay{Key: key, URL: url}, key)
			return a.Seq, err
		}
	case opGet:
		// A retried call names the same call id, so it waits for the
		// call the world's inbox already holds instead of adding one.
		send = func(cl *api.Client, ctx context.Context) (uint64, error) {
			_, err := cl.Call(ctx, w, Get{}.WorldType(), Get{}, api.CallOptions{CallID: key, Timeout: 3 * time.Second})
			return 0, err
		}
	}
	seq, ok := l.retry(ctx, rng, send)
	if ok {
		l.led.sample(g, began)
	}
	switch {
	case !ok:
	case kind == opGet:
		l.led.mu.Lock()
		l.led.calls++
		l.led.mu.Unlock()
	default:
		l.led.ack(acked{World: w, Kind: kind, Key: key, Seq: seq, G: g, At: time.Now()})
	}
}

// run starts an errand run of id through the API until it is acknowledged,
// and a third of the acknowledged ones a second time, through any node:
// the second start must answer the run the first made, not create one.
func (l *load) run(ctx context.Context, rng *rand.Rand, g int, id string, began time.Time) {
	in := errand{Key: id, URL: l.c.target.srv.URL + "/run", SleepMs: 200 + rng.Int64N(601)}
	var created bool
	start := func(cl *api.Client, ctx context.Context) (uint64, error) {
		v, c, err := cl.StartRun(ctx, clusterErrand, id, in)
		if err == nil && v.ID != id {
			// Recorded as the API's refusals are: verify fails on it.
			l.led.mu.Lock()
			l.led.permanent = append(l.led.permanent, fmt.Sprintf("starting run %s answered run %q", id, v.ID))
			l.led.mu.Unlock()
		}
		created = c
		return 0, err
	}
	l.led.tryRun(id)
	if _, ok := l.retry(ctx, rng, start); !ok {
		return
	}
	l.led.sample(g, began)
	r := ackedRun{ID: id, G: g, At: time.Now()}
	if rng.IntN(3) == 0 {
		if _, ok := l.retry(ctx, rng, start); ok {
			r.Again, r.AgainCreated = true, created
		}
	}
	l.led.ackRun(r)
}

// retry sends through the running children's APIs, starting at a random
// one and moving on after a refusal, a transport failure or a timeout,
// until an answer or the load's end. An attempt is bounded, so a stopped
// process only delays it. A 4xx other than a timeout is a bug in the test
// or the server: it is recorded and not retried.
func (l *load) retry(ctx context.Context, rng *rand.Rand, send func(*api.Client, context.Context) (uint64, error)) (uint64, bool) {
	i := rng.IntN(len(l.c.current()))
	for skipped := 0; ctx.Err() == nil; {
		procs := l.c.current()
		p := procs[i%len(procs)]
		i++
		if !p.serves() {
			if skipped++; skipped%len(procs) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 4*time.Second)
		seq, err := send(p.api, actx)
		cancel()
		if err == nil {
			return seq, true
		}
		if ctx.Err() != nil {
			break
		}
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status < 500 {
			l.led.mu.Lock()
			l.led.permanent = append(l.led.permanent, fmt.Sprintf("%s: %v", p.worker, err))
			l.led.mu.Unlock()
			return 0, false
		}
		l.led.mu.Lock()
		l.led.retries++
		l.led.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	l.led.mu.Lock()
	l.led.abandoned++
	l.led.mu.Unlock()
	return 0, false
}

// worldIDs are the ids of n test worlds.
func worldIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%02d", i)
	}
	return ids
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
