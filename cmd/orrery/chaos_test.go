//go:build unix

package main

// TestChaos is a black-box fault checker in the manner of Jepsen: three
// real `orrery serve` processes on one PostgreSQL database, each through
// its own TCP proxy, a client that records every request it makes and
// retries what was not acknowledged with the same key (sometimes on
// another node), faults one at a time on a seeded schedule, and then a
// judge (chaos_check_test.go) that reads the database with its own SQL and
// CBOR decoding. See the README's "Reliability" section.
//
//	ORRERY_TEST_CHAOS=1 ORRERY_TEST_POSTGRES_DSN=... go test -run '^TestChaos$' -v ./cmd/orrery/
//
// CHAOS_SECONDS sets the load's length (default 60), CHAOS_SEED the
// schedule's seed, CHAOS_OUT where the history and the logs go, and
// ORRERY_TEST_PG_RESTART_CMD, when set, adds real restarts of PostgreSQL.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

const (
	chaosEnv = "ORRERY_TEST_CHAOS"

	chaosTallies  = 16
	chaosAccounts = 6
	chaosSeedBal  = 1000 // each account's opening deposit
	chaosClients  = 4

	// chaosTTL is the children's lease TTL here: long enough that a
	// worker killed and started again at once (the test binary boots in a
	// second or two, more under the race detector) is back before its
	// leases run out, which is the case "restart within the TTL" tests.
	chaosTTL = 5 * time.Second
	// killSlack covers a renewal the victim sent before it died (or
	// stopped) and that commits just after: a lease that runs past the
	// fault by more than the TTL and this was renewed by someone alive.
	killSlack = 500 * time.Millisecond
)

// The faults.
const (
	fKillAfterTTL  = "kill -9, restart after the TTL"
	fKillWithinTTL = "kill -9, restart within the TTL"
	fStop          = "SIGSTOP past the TTL"
	fTerminate     = "backend connections terminated"
	fPGRestart     = "PostgreSQL restarted"
	fCut           = "proxy cuts (a 3s burst)"
	fBlackHole     = "proxy black hole"
)

// faultRun is one fault injected.
type faultRun struct {
	Kind     string  `json:"kind"`
	Node     string  `json:"node,omitempty"`
	At       float64 `json:"at"`
	Took     float64 `json:"took"`               // the fault itself, to its heal
	Failover float64 `json:"failover,omitempty"` // node loss: to the last of its worlds held again (seconds)
	Detail   string  `json:"detail,omitempty"`
	// Missed: the fault did not happen as named (a restart meant to land
	// within the TTL came after it, on a loaded machine); it does not
	// count toward the schedule's coverage.
	Missed bool `json:"missed,omitempty"`
}

// histEntry is one line of the history: one attempt of one request.
type histEntry struct {
	T       float64         `json:"t"`
	Node    string          `json:"node"`
	Op      string          `json:"op"` // create, send, call, start (a workflow run)
	Kind    string          `json:"kind"`
	World   string          `json:"world"`
	Key     string          `json:"key,omitempty"`
	CallID  string          `json:"call_id,omitempty"`
	Attempt int             `json:"attempt"`
	Result  string          `json:"result"` // ok, error
	Status  int             `json:"status,omitempty"`
	Err     string          `json:"err,omitempty"`
	Seq     uint64          `json:"seq,omitempty"`
	Dup     bool            `json:"dup,omitempty"`
	Reply   json.RawMessage `json:"reply,omitempty"`
	Fault   *faultRun       `json:"fault,omitempty"` // a fault line instead of a request
}

type chaos struct {
	t       *testing.T
	c       *cluster
	db      *clusterDB
	proxies []*pgProxy
	pool    *pgxpool.Pool
	rng     *rand.Rand // the schedule's; only the test goroutine uses it
	start   time.Time
	out     string

	hmu  sync.Mutex
	hw   *bufio.Writer
	hf   *os.File
	acks []ackOp
	clls []callOp
	runs *ackLog // the workflow runs' starts (its runs and tried only)

	// runsElsewhere counts the second starts of a run answered by another
	// node than the one that acknowledged the first.
	runsElsewhere atomic.Int64

	ops, acked, retries, switched, unacked, status5xx atomic.Int64
	five00                                            []string // under hmu: 500 answers

	faults   []faultRun
	figures  []string
	restarts []restartSight
	mon      *leaseMonitor
}

func (ch *chaos) since() float64 { return time.Since(ch.start).Seconds() }

func (ch *chaos) record(e histEntry) {
	ch.hmu.Lock()
	defer ch.hmu.Unlock()
	b, _ := json.Marshal(e)
	_, _ = ch.hw.Write(append(b, '\n'))
}

func TestChaos(t *testing.T) {
	if os.Getenv(chaosEnv) != "1" {
		t.Skipf("%s is not 1: the chaos checker runs three servers under faults for a minute or more (.ci/run runs it in its own step)", chaosEnv)
	}
	secs := 60
	if s := os.Getenv("CHAOS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 {
			t.Fatalf("CHAOS_SECONDS=%q: want a whole number of seconds, at least 10", s)
		}
		secs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	db := newClusterDB(t)
	_ = t.TempDir() // its removal is registered now, so it runs after the cleanup below has copied the logs
	out := os.Getenv("CHAOS_OUT")
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", fmt.Sprintf("orrery-chaos-%d-", seed)); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos: seed %d (CHAOS_SEED=%d reruns this schedule), %ds of load, output in %s", seed, seed, secs, out)
	fmt.Printf("chaos: seed %d, %ds of load, output in %s\n", seed, secs, out)

	hf, err := os.Create(filepath.Join(out, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ch := &chaos{t: t, db: db, rng: rand.New(rand.NewPCG(seed, 0x6368616f73)), out: out, hf: hf, hw: bufio.NewWriter(hf), runs: &ackLog{}}
	var keep bool
	t.Cleanup(func() { ch.finish(keep || t.Failed()) })

	ctx := context.Background()
	ch.pool, err = pgxpool.New(ctx, db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ch.pool.Close)
	u, err := url.Parse(db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	var dsns []string
	for range 3 {
		p := newPGProxy(t, u.Host)
		ch.proxies = append(ch.proxies, p)
		dsns = append(dsns, db.via(p.addr))
	}
	ch.c = newClusterOn(t, db, dsns, chaosTTL)
	ch.start = time.Now()
	ch.mon = startLeaseMonitor(t, ch.pool, ch.start)

	tallies, accounts := ch.setup()
	all := append(slices.Clone(tallies), accounts...)

	ld := ch.startLoad(tallies, accounts, seed)
	ch.schedule(time.Duration(secs) * time.Second)
	ld.stop()
	ch.mon.stop()
	fmt.Printf("chaos: load stopped at %.1fs; waiting for quiescence\n", ch.since())

	v := newVerdict()
	ch.judge(ctx, all, v)
	keep = v.failed()
	ch.report(v)
	if v.failed() {
		t.Errorf("the chaos checker found broken promises (seed %d); the history, the node logs and the summary are kept in %s", seed, out)
	}
}

// setup creates the tally worlds and the accounts (opened, each with its
// opening deposit) and waits until every one is held.
func (ch *chaos) setup() (tallies, accounts []string) {
	c := ch.c
	for i := range chaosTallies {
		tallies = append(tallies, fmt.Sprintf("c%02d", i))
	}
	for i := range chaosAccounts {
		accounts = append(accounts, fmt.Sprintf("a%d", i))
	}
	c.createWorlds(tallies)
	for _, id := range accounts {
		if _, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
			w, _, err := cl.CreateWorld(ctx, id, ledger.UniverseAccount)
			return w, err
		}); err != nil {
			ch.t.Fatalf("create account %s: %v", id, err)
		}
	}
	c.awaitPlaced(append(slices.Clone(tallies), accounts...), c.procs, 60*time.Second)
	for _, id := range accounts {
		for _, op := range []struct {
			typ, key string
			val      any
		}{
			{ledger.Open{}.WorldType(), "open-" + id, ledger.Open{Owner: "owner of " + id}},
			{ledger.Deposit{}.WorldType(), "seed-" + id, ledger.Deposit{Amount: chaosSeedBal, Ref: "seed"}},
		} {
			v, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
				return cl.Send(ctx, id, op.typ, op.val, op.key)
			})
			if err != nil {
				ch.t.Fatalf("%s: %s: %v", id, op.key, err)
			}
			ch.hmu.Lock()
			ch.acks = append(ch.acks, ackOp{World: id, Kind: strings.TrimPrefix(op.typ, "ledger/"), Key: op.key, Seq: v.(api.Ack).Seq})
			ch.hmu.Unlock()
		}
	}
	return tallies, accounts
}

// ---- the load ----

type chaosLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (l *chaosLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

func (ch *chaos) startLoad(tallies, accounts []string, seed uint64) *chaosLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &chaosLoad{cancel: cancel}
	for g := range chaosClients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)+1))
			for n := 1; ctx.Err() == nil; n++ {
				ch.one(ctx, rng, g, n, tallies, accounts)
			}
		}()
	}
	ch.t.Cleanup(l.stop)
	return l
}

// one issues one operation and retries it, with the same key or call id,
// until it is acknowledged or the load stops. A tenth of the operations
// start a workflow run (its start, a step, a durable sleep and an effect:
// a few writes more than an event), taken from the adds and the calls so
// that the transfers keep their share.
func (ch *chaos) one(ctx context.Context, rng *rand.Rand, g, n int, tallies, accounts []string) {
	ch.ops.Add(1)
	switch r := rng.IntN(100); {
	case r < 35:
		w, key := tallies[rng.IntN(len(tallies))], fmt.Sprintf("add-%d-%d", g, n)
		ch.send(ctx, rng, w, "add", Add{}.WorldType(), Add{Key: key}, key)
	case r < 48:
		ch.call(ctx, rng, tallies[rng.IntN(len(tallies))], "get", Get{}.WorldType(), Get{}, rng.IntN(2) == 0, fmt.Sprintf("get-%d-%d", g, n))
	case r < 60:
		ch.call(ctx, rng, accounts[rng.IntN(len(accounts))], "balance", ledger.Balance{}.WorldType(), ledger.Balance{}, rng.IntN(2) == 0, fmt.Sprintf("bal-%d-%d", g, n))
	case r < 70:
		ch.startRun(ctx, rng, fmt.Sprintf("r-%d-%d", g, n))
	default:
		id := fmt.Sprintf("t-%d-%d", g, n)
		i := rng.IntN(len(accounts))
		j := (i + 1 + rng.IntN(len(accounts)-1)) % len(accounts)
		start := ledger.Start{From: accounts[i], To: accounts[j], Amount: 1 + rng.Int64N(300), TimeoutMs: 3000}
		if !ch.attempts(ctx, rng, "create", "transfer", id, "", func(cl *api.Client, ctx context.Context, e *histEntry) error {
			_, _, err := cl.CreateWorld(ctx, id, ledger.UniverseTransfer)
			return err
		}) {
			return
		}
		ch.send(ctx, rng, id, "transfer", start.WorldType(), start, "start-"+id)
	}
}

func (ch *chaos) send(ctx context.Context, rng *rand.Rand, w, kind, typ string, val any, key string) {
	var seq uint64
	if ch.attempts(ctx, rng, "send", kind, w, key, func(cl *api.Client, ctx context.Context, e *histEntry) error {
		a, err := cl.Send(ctx, w, typ, val, key)
		seq, e.Seq, e.Dup = a.Seq, a.Seq, a.Duplicate
		return err
	}) {
		ch.hmu.Lock()
		ch.acks = append(ch.acks, ackOp{World: w, Kind: kind, Key: key, Seq: seq})
		ch.hmu.Unlock()
	}
}

// call makes a call, with the client's call id (chosen) or, when not, one
// the server draws afresh for each attempt.
func (ch *chaos) call(ctx context.Context, rng *rand.Rand, w, kind, typ string, val any, chosen bool, name string) {
	var res api.CallResult
	id := ""
	if chosen {
		id = name
	}
	if ch.attempts(ctx, rng, "call", kind, w, name, func(cl *api.Client, ctx context.Context, e *histEntry) error {
		var err error
		res, err = cl.Call(ctx, w, typ, val, api.CallOptions{CallID: id, Timeout: 3 * time.Second})
		e.CallID, e.Reply = res.CallID, res.Reply
		return err
	}) {
		ch.hmu.Lock()
		ch.clls = append(ch.clls, callOp{World: w, Kind: kind, CallID: res.CallID, Chosen: chosen, Attempt: name, ReplyCBOR: res.ReplyCBOR})
		ch.hmu.Unlock()
	}
}

// attempts runs f against a node until it succeeds or the load stops. It
// starts at a random node; after a failure it stays on the same node or
// moves to another at random. A 4xx answer (other than a timeout) is a
// request the server will never accept: recorded, not retried.
func (ch *chaos) attempts(ctx context.Context, rng *rand.Rand, op, kind, w, key string, f func(*api.Client, context.Context, *histEntry) error) bool {
	_, ok := ch.attemptsFrom(ctx, rng, rng.IntN(len(ch.c.current())), op, kind, w, key, f)
	return ok
}

// attemptsFrom is attempts starting at node i; it returns the node that
// acknowledged.
func (ch *chaos) attemptsFrom(ctx context.Context, rng *rand.Rand, i int, op, kind, w, key string, f func(*api.Client, context.Context, *histEntry) error) (int, bool) {
	procs := ch.c.current()
	for attempt := 1; ctx.Err() == nil; attempt++ {
		p := ch.c.current()[i]
		if !p.running() {
			i = (i + 1) % len(procs)
			ch.switched.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		e := histEntry{T: ch.since(), Node: p.worker, Op: op, Kind: kind, World: w, Key: key, Attempt: attempt}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(p.api, actx, &e)
		cancel()
		if err == nil {
			e.Result = "ok"
			ch.record(e)
			if op != "create" {
				ch.acked.Add(1)
			}
			return i, true
		}
		if ctx.Err() != nil {
			break
		}
		e.Result, e.Err = "error", err.Error()
		var ae *api.Error
		if errors.As(err, &ae) {
			e.Status = ae.Status
			if ae.Status >= 500 {
				ch.status5xx.Add(1)
			}
			if ae.Status == 500 {
				ch.hmu.Lock()
				ch.five00 = append(ch.five00, fmt.Sprintf("%.1fs %s %s %s %s: %v", e.T, p.worker, op, w, key, err))
				ch.hmu.Unlock()
			}
		}
		ch.record(e)
		if ae != nil && ae.Status < 500 && ae.Status != 408 {
			ch.hmu.Lock()
			ch.five00 = append(ch.five00, fmt.Sprintf("%.1fs %s %s %s %s refused for good: %v", e.T, p.worker, op, w, key, err))
			ch.hmu.Unlock()
			return i, false
		}
		ch.retries.Add(1)
		if rng.IntN(2) == 0 {
			i = (i + 1 + rng.IntN(len(procs)-1)) % len(procs)
			ch.switched.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
		}
	}
	if op != "create" {
		ch.unacked.Add(1)
	}
	return i, false
}

// ---- the faults ----

// schedule injects faults one at a time, with a recovery gap after each,
// until the load has run for d and every kind of fault has run at least
// once (and at least six in all).
func (ch *chaos) schedule(d time.Duration) {
	kinds := []string{fKillAfterTTL, fKillWithinTTL, fStop, fTerminate, fCut, fBlackHole}
	restartCmd := os.Getenv(restartCmdEnv)
	if restartCmd != "" {
		kinds = append(kinds, fPGRestart)
	} else {
		ch.t.Logf("chaos: %s is not set: no real PostgreSQL restarts in this run", restartCmdEnv)
	}
	time.Sleep(3 * time.Second) // the load gets going
	done := map[string]int{}
	var order []string
	for n := 0; ; n++ {
		if len(order) == 0 {
			// The connection faults take no time of their own, and a
			// fabric.send or a receipt caught by one is where money and
			// holds go wrong: each round has them twice.
			order = append(slices.Clone(kinds), fTerminate, fCut)
			ch.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		if time.Since(ch.start) >= d && n >= 6 && len(done) == len(kinds) {
			break
		}
		if time.Since(ch.start) >= 3*d {
			// A machine so slow that a restart never lands within the
			// TTL: the run says so instead of going on for ever.
			ch.t.Logf("chaos: stopping the faults at %v without every kind counted: %v", 3*d, done)
			fmt.Printf("chaos: stopping the faults at %v without every kind counted: %v\n", 3*d, done)
			break
		}
		kind := order[0]
		order = order[1:]
		f := ch.inject(kind, restartCmd)
		if !f.Missed {
			done[kind]++
		}
		ch.faults = append(ch.faults, f)
		ch.record(histEntry{T: f.At, Op: "fault", Kind: kind, Node: f.Node, Fault: &f})
		fmt.Printf("chaos: %5.1fs %-34s %-3s took %.1fs%s %s\n", f.At, kind, f.Node, f.Took, failoverNote(f), f.Detail)
		// Recovery: every node serves again, then a gap of load.
		ch.c.awaitLive(ch.c.current(), 60*time.Second)
		time.Sleep(time.Duration(2000+ch.rng.IntN(2000)) * time.Millisecond)
	}
}

func failoverNote(f faultRun) string {
	if f.Failover == 0 {
		return ""
	}
	return fmt.Sprintf(", its worlds held again after %.2fs", f.Failover)
}

func (ch *chaos) inject(kind, restartCmd string) faultRun {
	t := ch.t
	i := ch.rng.IntN(len(ch.proxies))
	p := ch.c.current()[i]
	f := faultRun{Kind: kind, Node: p.worker, At: ch.since()}
	begin := time.Now()
	switch kind {
	case fKillAfterTTL, fKillWithinTTL, fStop:
		held := ch.mon.heldBy(p.worker)
		if kind == fStop {
			ch.c.pause(p)
		} else {
			ch.c.kill(p)
		}
		killNs := ch.storeNow() + int64(killSlack)
		var restarted float64
		if kind == fKillWithinTTL {
			ch.c.restart(p)
			restarted = ch.since()
			f.Detail = fmt.Sprintf("restarted %.2fs after the kill", restarted-f.At)
			if restarted-f.At >= chaosTTL.Seconds() {
				f.Missed = true
				f.Detail += ", beyond the TTL: not counted"
			}
			ch.restarts = append(ch.restarts, restartSight{Worker: p.worker, KillNs: killNs, TTLNs: int64(chaosTTL), Before: held, AtSecs: f.At, Restart: restarted})
		}
		f.Failover = ch.mon.awaitRenewed(held, killNs+int64(chaosTTL), begin, 60*time.Second)
		runs := 0
		for w := range held {
			if strings.HasPrefix(w, "r-") {
				runs++
			}
		}
		if f.Detail != "" {
			f.Detail += "; "
		}
		f.Detail += fmt.Sprintf("it held %d worlds, %d of them workflow runs", len(held), runs)
		switch kind {
		case fKillAfterTTL:
			time.Sleep(time.Until(begin.Add(chaosTTL + time.Second)))
			ch.c.restart(p)
		case fStop:
			time.Sleep(time.Until(begin.Add(chaosTTL + 2*time.Second)))
			ch.c.resume(p)
		}
	case fTerminate:
		ports := ch.proxies[i].serverPorts()
		var n int
		if err := ch.query(func(ctx context.Context) error {
			return ch.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND usename = current_user AND pid <> pg_backend_pid() AND client_port = ANY($1)`, ports).Scan(&n)
		}); err != nil {
			t.Fatalf("terminate %s's backends: %v", p.worker, err)
		}
		f.Detail = fmt.Sprintf("%d backends", n)
	case fPGRestart:
		f.Node = ""
		if out, err := exec.Command("sh", "-c", restartCmd).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", restartCmd, err, out)
		}
	case fCut:
		// A burst of cuts: a connection is cut mid-request far more often
		// than by one cut, and a request whose answer is lost on the way
		// (an effect delivered, its acknowledgement not) is what a cut
		// tests.
		n := 0
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			n += ch.proxies[i].cut()
			time.Sleep(time.Duration(50+ch.rng.IntN(200)) * time.Millisecond)
		}
		f.Detail = fmt.Sprintf("%d connections over 3s", n)
	case fBlackHole:
		hole := chaosTTL + 2*time.Second // past the TTL: the node's worlds move while it hears nothing
		f.Detail = fmt.Sprintf("%v", hole)
		ch.proxies[i].blackhole(hole)
	}
	f.Took = time.Since(begin).Seconds()
	return f
}

// storeNow is the database's clock (the store's, at offset zero), in Unix
// nanoseconds: lease expiries are on it.
func (ch *chaos) storeNow() int64 {
	var ns int64
	if err := ch.query(func(ctx context.Context) error {
		return ch.pool.QueryRow(ctx, `SELECT orrery.now_ns(0)`).Scan(&ns)
	}); err != nil {
		ch.t.Fatalf("the store's clock: %v", err)
	}
	return ns
}

// query runs q until it succeeds, for up to 20s: the pool's connections
// die with a database restart, and a fault may follow one closely.
func (ch *chaos) query(q func(ctx context.Context) error) error {
	var err error
	poll(20*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = q(ctx)
		return err == nil
	})
	return err
}

// ---- leases, watched during the run ----

// leaseMonitor polls the leases table with its own SQL and keeps every
// change it sees.
type leaseMonitor struct {
	pool   *pgxpool.Pool
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	obs    []leaseObs
	latest map[string]leaseObs
	errs   int
}

func startLeaseMonitor(t *testing.T, pool *pgxpool.Pool, start time.Time) *leaseMonitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &leaseMonitor{pool: pool, start: start, cancel: cancel, done: make(chan struct{}), latest: map[string]leaseObs{}}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			m.poll(ctx)
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(m.stop)
	return m
}

func (m *leaseMonitor) stop() {
	m.cancel()
	<-m.done
}

func (m *leaseMonitor) poll(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// A world archived (a workflow run that ended) keeps its lease row
	// with the holder cleared, and nobody holds it again.
	rows, err := m.pool.Query(qctx, `SELECT l.world, l.holder, l.epoch, l.expires_at_ns, coalesce(w.status = 'archived', false)
		FROM orrery.leases l LEFT JOIN orrery.worlds w ON w.world = l.world ORDER BY l.world`)
	if err != nil {
		m.mu.Lock()
		m.errs++
		m.mu.Unlock()
		return
	}
	defer rows.Close()
	at := time.Since(m.start).Seconds()
	var got []leaseObs
	for rows.Next() {
		o := leaseObs{At: at}
		if err := rows.Scan(&o.World, &o.Holder, &o.Epoch, &o.ExpiresNs, &o.Ended); err != nil {
			return
		}
		got = append(got, o)
	}
	if rows.Err() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range got {
		if m.latest[o.World] != (leaseObs{At: m.latest[o.World].At, World: o.World, Holder: o.Holder, Epoch: o.Epoch, ExpiresNs: o.ExpiresNs, Ended: o.Ended}) {
			m.obs = append(m.obs, o)
			m.latest[o.World] = o
		}
	}
}

// heldBy returns the worlds worker holds and their epochs, as last seen.
// runsHolderSuffix ends the lease holder id of a node's workflow worker
// (plane/node names it <worker>/runs).
const runsHolderSuffix = "/runs"

func (m *leaseMonitor) heldBy(worker string) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for w, o := range m.latest {
		// A node holds its worlds under its worker id and its workflow
		// runs under its workflow worker's, <worker>/runs.
		if o.Holder == worker || o.Holder == worker+runsHolderSuffix {
			out[w] = o.Epoch
		}
	}
	return out
}

// awaitRenewed waits until every world of held has a holder whose lease
// runs past afterNs (so someone alive acquired or renewed it after the
// fault) or has ended (a run that a successor took up and finished, or
// that finished before it could be taken), and returns how long that took
// from begin, in seconds (-1: not within limit).
func (m *leaseMonitor) awaitRenewed(held map[string]int64, afterNs int64, begin time.Time, limit time.Duration) float64 {
	ok := poll(limit, 20*time.Millisecond, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for w := range held {
			if o := m.latest[w]; !o.Ended && (o.Holder == "" || o.ExpiresNs <= afterNs) {
				return false
			}
		}
		return true
	})
	if !ok {
		return -1
	}
	return time.Since(begin).Seconds()
}

func (m *leaseMonitor) sightings() []leaseObs {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.obs)
}

// ---- the judgement ----

// judge waits (bounded) for quiescence, then reads the database and runs
// every check.
func (ch *chaos) judge(ctx context.Context, ids []string, v *verdict) {
	for _, p := range ch.c.current() {
		if !p.running() {
			v.failf(chkQuiescent, "%s is not running after the faults: %v", p.worker, p.state)
		}
	}
	v.check(chkQuiescent)
	for _, f := range ch.faults {
		if f.Failover < 0 {
			v.failf(chkQuiescent, "%s of %s at %.1fs: its worlds were not all held again within 60s", f.Kind, f.Node, f.At)
		}
	}
	pending := ""
	begin := time.Now()
	if !poll(120*time.Second, 250*time.Millisecond, func() bool {
		pending = ch.pending(ctx)
		return pending == ""
	}) {
		v.failf(chkQuiescent, "not quiescent within 120s: %s", pending)
	}
	quiet := time.Since(begin)
	fmt.Printf("chaos: quiescent after %v\n", quiet.Round(time.Millisecond))

	conn, err := ch.pool.Acquire(ctx)
	if err != nil {
		ch.t.Fatalf("acquire a connection for the checker: %v", err)
	}
	ws, err := readDB(ctx, conn.Conn(), "orrery")
	conn.Release()
	if err != nil {
		ch.t.Fatalf("read the database: %v", err)
	}
	red := map[string]*reduced{}
	for _, id := range keys(ws) {
		r, err := reduce(ws[id])
		if err != nil {
			v.failf(chkReplays, "the checker's reduction of %s: %v", id, err)
			continue
		}
		red[id] = r
	}
	checkJournals(ws, v)
	ch.hmu.Lock()
	acks, calls := slices.Clone(ch.acks), slices.Clone(ch.clls)
	ch.hmu.Unlock()
	lost, dup := checkAcks(ws, red, acks, calls, v)
	checkReplies(ws, red, calls, v)
	total := checkMoney(ws, red, chaosAccounts*chaosSeedBal, v)
	ch.checkReplays(ctx, ws, red, v)
	obs := ch.mon.sightings()
	checkEpochs(obs, v)
	checkRestartEpochs(ch.restarts, obs, v)
	rc := ch.c.newRunChecker(ch.runs)
	judgeRuns(ctx, rc, 60*time.Second, v)
	apiProblems := ch.c.runsAPIProblems(ch.runs, 30*time.Second)
	for _, worker := range keys(apiProblems) {
		for _, p := range apiProblems[worker] {
			v.failf(chkRuns, "%s's API: %s", worker, p)
		}
	}
	ch.hmu.Lock()
	five00 := slices.Clone(ch.five00)
	ch.hmu.Unlock()
	for _, s := range five00 {
		v.failf(chkNo500, "%s", s)
	}
	v.check(chkNo500)

	again := 0
	for _, r := range rc.runs {
		if r.Again {
			again++
		}
	}
	// The final round of the run checks counts the runs taken over; a
	// failed row may not have come to it.
	takenOver := strconv.Itoa(rc.takenOver)
	if len(v.violations[chkRuns]) > 0 {
		takenOver = "not counted (the run check failed)"
	}
	transfers := 0
	for _, w := range ws {
		if w.Universe == ledger.UniverseTransfer {
			transfers++
		}
	}
	ch.figures = []string{
		fmt.Sprintf("operations %d, acknowledged %d (events %d, calls %d, run starts %d), unacknowledged at the stop %d", ch.ops.Load(), ch.acked.Load(), len(acks), len(calls), len(rc.runs)+again, ch.unacked.Load()),
		fmt.Sprintf("lost %d, duplicated %d", lost, dup),
		fmt.Sprintf("retries %d (node switches %d), 5xx answers %d", ch.retries.Load(), ch.switched.Load(), ch.status5xx.Load()),
		fmt.Sprintf("worlds %d (transfers %d), lease changes seen %d; ledger total %d of %d", len(ws), transfers, len(obs), total, chaosAccounts*chaosSeedBal),
		fmt.Sprintf("workflow runs acknowledged %d (started twice %d, the second answered by another node %d), taken up by more than one worker %s", len(rc.runs), again, ch.runsElsewhere.Load(), takenOver),
		fmt.Sprintf("quiescent %v after the load stopped", quiet.Round(time.Millisecond)),
	}
}

// pending says what is not done yet ("" when the cluster is quiescent):
// inboxes not drained, effects not done, timers not fired.
func (ch *chaos) pending(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var inbox, effects, timers int
	err := ch.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM orrery.worlds w JOIN orrery.streams s ON s.stream = w.world WHERE s.inbox_cursor < w.inbox_seq),
		(SELECT count(*) FROM orrery.effects WHERE state <> 'done'),
		(SELECT count(*) FROM orrery.timers WHERE state <> 'delivered')`).Scan(&inbox, &effects, &timers)
	switch {
	case err != nil:
		return err.Error()
	case inbox+effects+timers > 0:
		return fmt.Sprintf("%d inboxes not drained, %d effects not done, %d timers not fired", inbox, effects, timers)
	}
	return ""
}

// checkReplays replays every world with the project's replay: the
// plane's restore (baseline plus tail) and a replay of the whole journal
// from genesis must agree byte for byte. For accounts it also holds the
// checker's own reduction against the replayed state, so that a checker
// that decodes wrongly says so instead of blaming the system.
func (ch *chaos) checkReplays(ctx context.Context, ws map[string]*dbWorld, red map[string]*reduced, v *verdict) {
	v.check(chkReplays)
	kernels := testKernels()
	for _, id := range keys(ws) {
		k, ok := kernels[ws[id].Universe]
		if !ok {
			continue
		}
		journal, err := plane.ReadTail(ctx, ch.db.st, id, 0)
		if err != nil {
			v.failf(chkReplays, "%s: read the journal: %v", id, err)
			continue
		}
		inst, _, err := plane.Restore(ctx, ch.db.st, kernels, id)
		if err != nil {
			v.failf(chkReplays, "%s: restore: %v", id, err)
			continue
		}
		full, err := k.Replay(id, world.Snapshot{}, journal)
		if err != nil {
			v.failf(chkReplays, "%s: replay from genesis: %v", id, err)
			continue
		}
		if full.StateHash() != inst.StateHash() {
			v.failf(chkReplays, "%s: the genesis replay (%.12s) and the restore (%.12s) differ at height %d", id, full.StateHash(), inst.StateHash(), inst.Height())
			continue
		}
		if a := red[id]; a != nil && a.account != nil {
			acc, err := ledger.AccountOf(id, inst.Snapshot())
			if err != nil {
				v.failf(chkReplays, "%s: decode the replayed account: %v", id, err)
				continue
			}
			if acc.Balance != a.account.Balance || len(acc.Holds) != len(a.account.Holds) {
				v.failf(chkReplays, "%s: the checker's reduction (balance %d, %d holds) disagrees with the replay (balance %d, %d holds)",
					id, a.account.Balance, len(a.account.Holds), acc.Balance, len(acc.Holds))
			}
		}
	}
}

// ---- the report ----

func (ch *chaos) faultTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %5s  %s\n", "fault", "count", "failover p50 / max")
	byKind := map[string][]faultRun{}
	for _, f := range ch.faults {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	for _, k := range []string{fKillAfterTTL, fKillWithinTTL, fStop, fTerminate, fPGRestart, fCut, fBlackHole} {
		fs := byKind[k]
		if len(fs) == 0 {
			continue
		}
		var ds []time.Duration
		never := 0
		for _, f := range fs {
			switch {
			case f.Failover > 0:
				ds = append(ds, time.Duration(f.Failover*float64(time.Second)))
			case f.Failover < 0:
				never++
			}
		}
		fo := "-"
		if len(ds) > 0 {
			p50, _, _, mx := quantiles(ds)
			fo = fmt.Sprintf("%v / %v", ms(p50), ms(mx))
		}
		if never > 0 {
			fo += fmt.Sprintf(" (%d never within 60s)", never)
		}
		missed := 0
		for _, f := range fs {
			if f.Missed {
				missed++
			}
		}
		if missed > 0 {
			fo += fmt.Sprintf(" (%d of them missed: %s)", missed, fs[slices.IndexFunc(fs, func(f faultRun) bool { return f.Missed })].Detail)
		}
		fmt.Fprintf(&b, "%-34s %5d  %s\n", k, len(fs), fo)
	}
	fmt.Fprintf(&b, "%-34s %5d\n", "total", len(ch.faults))
	return b.String()
}

func (ch *chaos) report(v *verdict) {
	var all []time.Duration
	for _, f := range ch.faults {
		if f.Failover > 0 {
			all = append(all, time.Duration(f.Failover*float64(time.Second)))
		}
	}
	figs := slices.Clone(ch.figures)
	if len(all) > 0 {
		p50, _, _, mx := quantiles(all)
		figs = append(figs, fmt.Sprintf("failover (node lost → its last world held again) p50 %v, max %v, lease TTL %v", ms(p50), ms(mx), chaosTTL))
	}
	s := "faults:\n" + ch.faultTable() + "\nfigures:\n  " + strings.Join(figs, "\n  ") + "\n\nchecks:\n" + v.table()
	ch.t.Log("chaos summary\n" + s)
	fmt.Println("chaos summary\n" + s)
	_ = os.WriteFile(filepath.Join(ch.out, "summary.txt"), []byte(s), 0o644)
}

// finish flushes the history; on a failure it copies every incarnation's
// log beside it and keeps the directory, else removes it (CHAOS_OUT,
// when set, is always kept).
func (ch *chaos) finish(keep bool) {
	ch.hmu.Lock()
	_ = ch.hw.Flush()
	_ = ch.hf.Close()
	ch.hmu.Unlock()
	if !keep && os.Getenv("CHAOS_OUT") == "" {
		_ = os.RemoveAll(ch.out)
		return
	}
	if ch.mon != nil {
		if b, err := json.Marshal(ch.mon.sightings()); err == nil {
			_ = os.WriteFile(filepath.Join(ch.out, "leases.json"), b, 0o644)
		}
	}
	if ch.c != nil {
		ch.c.mu.Lock()
		all := slices.Clone(ch.c.all)
		ch.c.mu.Unlock()
		n := map[string]int{}
		for _, p := range all {
			n[p.worker]++
			if err := copyFile(p.stderr, filepath.Join(ch.out, fmt.Sprintf("%s.%d.stderr", p.worker, n[p.worker]))); err != nil {
				ch.t.Logf("copy %s's log: %v", p.worker, err)
			}
		}
	}
	ch.t.Logf("chaos: the history, the node logs and the summary are in %s", ch.out)
	fmt.Printf("chaos: the history, the node logs and the summary are in %s\n", ch.out)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
