package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Options configures Run.
type Options struct {
	// Dir is where the SQLite file (DBName) goes; "" is a temporary
	// directory, removed afterwards. A database left there by an earlier
	// run is replaced.
	Dir string
	// Store, when set, is used instead of SQLite (tests pass memstore).
	// Run does not close it.
	Store store.Store
	// Quick shortens the lease and claim TTLs, so the takeover is quicker.
	Quick bool
	// InProcessAudit serves the audit service inside the process: the
	// http.request adapter's client hands the request to the handler
	// instead of a loopback socket. For testing/synctest, whose fake clock
	// stands still while any goroutine of the bubble waits on the network.
	InProcessAudit bool
}

// DBName is the demo's SQLite file in Options.Dir.
const DBName = "orrery-demo.db"

// ErrCheck: something the demo narrates did not hold (a balance, a
// receipt, a takeover, a fork, the money). The error says which step and
// what.
var ErrCheck = errors.New("demo: check failed")

// waitLimit bounds every wait: far above what any step needs, so hitting it
// means the condition will not come.
const waitLimit = 45 * time.Second

// The workers, and the accounts with what each is opened with.
const (
	worker1 = "demo-1"
	worker2 = "demo-2"
)

type account struct {
	id, owner string
	deposit   int64
}

func accounts() []account {
	return []account{{"alice", "Alice", 1000}, {"bob", "Bob", 500}, {"carol", "Carol", 2000}}
}

// auditAbove is every account's audit threshold.
const auditAbove = 1000

// Run runs the demo, narrating on out, and returns nil only if every check
// held. See the package doc.
func Run(ctx context.Context, out io.Writer, opt Options) (err error) {
	d := &demo{ctx: ctx, out: out, opt: opt, began: time.Now(), commits: &commitLog{by: map[string][]commit{}}}
	d.ttl, d.claimTTL = 2*time.Second, 5*time.Second
	if opt.Quick {
		d.ttl, d.claimTTL = time.Second, 3*time.Second
	}
	defer func() {
		if cerr := d.close(); err == nil {
			err = cerr
		}
	}()
	for _, step := range []func() error{d.start, d.call, d.transfer, d.withdrawAudited, d.crash, d.fork, d.summary} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

type demo struct {
	ctx context.Context
	out io.Writer
	opt Options

	ttl, claimTTL time.Duration

	st       store.Store
	ownStore bool
	dbPath   string // "" when the store was passed in
	tmpDir   string // removed at the end

	audit   *auditServer
	n1, n2  *node.Node
	live    *node.Node // the node whose client the demo uses
	commits *commitLog

	worlds []string // every world created, in order
	money  int64    // what the accounts should hold in all

	began     time.Time
	step      int
	stepBegan time.Time
}

// ---- narration ----

func (d *demo) begin(title string) {
	d.step++
	d.stepBegan = time.Now()
	fmt.Fprintf(d.out, "\n%d. %s\n", d.step, title)
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "   "+format+"\n", args...)
}

func (d *demo) end() {
	fmt.Fprintf(d.out, "   (step %d: %s)\n", d.step, time.Since(d.stepBegan).Round(time.Millisecond))
}

// check is nil if ok, else an ErrCheck naming the step and what failed.
func (d *demo) check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%w: step %d: %s", ErrCheck, d.step, fmt.Sprintf(format, args...))
}

// fail wraps an operation's error with the step it broke.
func (d *demo) fail(what string, err error) error {
	return fmt.Errorf("demo: step %d: %s: %w", d.step, what, err)
}

// heights names the journal heights from a to b.
func heights(a, b uint64) string {
	if a == b {
		return fmt.Sprintf("height %d", a)
	}
	return fmt.Sprintf("heights %d–%d", a, b)
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// ---- waiting ----

// waitFor re-checks cond with a backoff until it holds. Every wait is
// bounded by the context and by waitLimit, whose passing is a failed
// check: what the demo waits for is something it claims will happen.
func (d *demo) waitFor(what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(d.ctx, waitLimit)
	defer cancel()
	delay := time.Millisecond
	for {
		ok, err := cond()
		if err != nil {
			return d.fail("waiting for "+what, err)
		}
		if ok {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if d.ctx.Err() != nil {
				return d.fail("waiting for "+what, d.ctx.Err())
			}
			return d.check(false, "%s did not happen within %s", what, waitLimit)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// ---- reading state ----

func (d *demo) client() *plane.Client { return d.live.Client() }

func (d *demo) account(id string) (ledger.Account, error) {
	snap, err := d.client().State(d.ctx, id)
	if err != nil {
		return ledger.Account{}, err
	}
	return ledger.AccountOf(id, snap)
}

func (d *demo) transferState(id string) (ledger.Transfer, error) {
	snap, err := d.client().State(d.ctx, id)
	if err != nil {
		return ledger.Transfer{}, err
	}
	return ledger.TransferOf(id, snap)
}

// settled waits until transfer id has ended and its accounts show it: the
// source holds nothing for it and, when it completed, the source captured
// it and the destination received it.
func (d *demo) settled(id string) (ledger.Transfer, error) {
	var tr ledger.Transfer
	err := d.waitFor(id+" to settle", func() (bool, error) {
		var err error
		if tr, err = d.transferState(id); err != nil {
			return false, err
		}
		if tr.Phase != ledger.PhaseCompleted && tr.Phase != ledger.PhaseFailed {
			return false, nil
		}
		from, err := d.account(tr.From)
		if err != nil {
			return false, err
		}
		if _, held := from.HoldFor(id); held {
			return false, nil
		}
		if tr.Phase == ledger.PhaseFailed {
			return true, nil
		}
		to, err := d.account(tr.To)
		if err != nil {
			return false, err
		}
		return hasEntry(from, "capture", id) && hasEntry(to, "deposit", "transfer:"+id), nil
	})
	return tr, err
}

func hasEntry(a ledger.Account, kind, ref string) bool {
	for _, e := range a.History {
		if e.Kind == kind && e.Ref == ref {
			return true
		}
	}
	return false
}

// leases reads the lease of each world, and the store's time.
func (d *demo) leases(ids []string) (map[string]store.Lease, time.Time, error) {
	now, err := d.st.Now(d.ctx)
	if err != nil {
		return nil, now, err
	}
	out := map[string]store.Lease{}
	for _, id := range ids {
		l, _, err := d.st.GetLease(d.ctx, id)
		if err != nil {
			return nil, now, err
		}
		out[id] = l
	}
	return out, now, nil
}

func held(l store.Lease, now time.Time) bool { return l.Holder != "" && l.ExpiresAt.After(now) }

func (d *demo) create(universe, id string) error {
	if _, err := d.st.CreateWorld(d.ctx, universe, id, nil); err != nil {
		return d.fail("creating world "+id, err)
	}
	d.worlds = append(d.worlds, id)
	return nil
}

// ---- the steps ----

func (d *demo) start() error {
	d.begin("Start a node, an audit service and three accounts")
	if err := d.openStore(); err != nil {
		return err
	}
	var err error
	if d.audit, err = startAudit(d.opt.InProcessAudit); err != nil {
		return d.fail("starting the audit service", err)
	}
	where := "a local HTTP server"
	if d.opt.InProcessAudit {
		where = "an HTTP handler served in process"
	}
	d.say("audit service: %s at %s, counting the POSTs it receives", where, d.audit.url)
	if d.n1, err = d.startNode(worker1); err != nil {
		return d.fail("starting "+worker1, err)
	}
	d.live = d.n1
	d.say("node %s started: orchestrator, host, effect adapters (http.request, fabric.send), durable timers, reapers", worker1)
	d.say("lease TTL %s: a crashed node's worlds move once their leases have expired", d.ttl)
	for _, a := range accounts() {
		if err := d.create(ledger.UniverseAccount, a.id); err != nil {
			return err
		}
		open := ledger.Open{Owner: a.owner, AuditURL: d.audit.url, AuditAbove: auditAbove}
		if _, err := d.client().Call(d.ctx, a.id, open); err != nil {
			return d.fail("opening "+a.id, err)
		}
		bal, err := plane.CallAs[int64](d.ctx, d.client(), a.id, ledger.Deposit{Amount: a.deposit, Ref: "opening deposit"})
		if err != nil {
			return d.fail("funding "+a.id, err)
		}
		if err := d.check(bal == a.deposit, "%s's balance is %d after depositing %d", a.id, bal, a.deposit); err != nil {
			return err
		}
		d.money += a.deposit
		d.say("%-6s opened for %s, deposited %d (balance %d; withdrawals above %d are audited)", a.id, a.owner, a.deposit, bal, auditAbove)
	}
	d.say("money in the ledger: %d", d.money)
	d.end()
	return nil
}

func (d *demo) call() error {
	d.begin("A call with a reply")
	bal, err := plane.CallAs[int64](d.ctx, d.client(), "alice", ledger.Balance{})
	if err != nil {
		return d.fail("calling alice", err)
	}
	head, err := d.st.Head(d.ctx, "alice")
	if err != nil {
		return d.fail("reading alice's journal", err)
	}
	if err := d.check(bal == accounts()[0].deposit, "alice's balance is %d, want %d", bal, accounts()[0].deposit); err != nil {
		return err
	}
	d.say("Call(alice, Balance{}) = %d", bal)
	d.say("the call entered alice's inbox like any input; her handler replied, and the reply came back")
	d.say("once the step was journaled (alice's journal is now at height %d)", head)
	d.end()
	return nil
}

func (d *demo) transfer() error {
	d.begin("A transfer saga: alice sends 300 to bob")
	const id, amount = "t-1", 300
	if err := d.create(ledger.UniverseTransfer, id); err != nil {
		return err
	}
	start := ledger.Start{From: "alice", To: "bob", Amount: amount, TimeoutMs: 10_000}
	if _, err := d.client().Send(d.ctx, id, start, "start"); err != nil {
		return d.fail("starting "+id, err)
	}
	var tr ledger.Transfer
	if err := d.waitFor(id+" to start", func() (bool, error) {
		var err error
		tr, err = d.transferState(id)
		return tr.Phase != "", err
	}); err != nil {
		return err
	}
	d.say("%s started: Hold{%d} sent to alice with fabric.send (intent %s)", id, amount, short(tr.HoldMsg))
	d.say("%s armed a durable timeout of %ds (timer %s): if alice does not answer, it releases", id, start.TimeoutMs/1000, short(tr.Timer))
	tr, err := d.settled(id)
	if err != nil {
		return err
	}
	if err := d.check(tr.Phase == ledger.PhaseCompleted, "%s ended %s (%s)", id, tr.Phase, tr.Reason); err != nil {
		return err
	}
	if err := d.check(tr.TimerState == ledger.TimerCancelled, "%s's timer is %s, want cancelled", id, tr.TimerState); err != nil {
		return err
	}
	d.say("alice held 300 and answered Held (fabric.send); %s cancelled its timer and sent Deposit to bob", id)
	d.say("once the deposit was delivered, %s sent Capture to alice: %s", id, tr.Phase)
	alice, err := d.account("alice")
	if err != nil {
		return d.fail("reading alice", err)
	}
	bob, err := d.account("bob")
	if err != nil {
		return d.fail("reading bob", err)
	}
	if err := d.check(alice.Balance == 700 && bob.Balance == 800 && len(alice.Holds) == 0,
		"alice %d (holds %v), bob %d; want 700 and 800", alice.Balance, alice.Holds, bob.Balance); err != nil {
		return err
	}
	d.say("balances: alice %d, bob %d", alice.Balance, bob.Balance)
	d.end()
	return nil
}

func (d *demo) withdrawAudited() error {
	d.begin("A large withdrawal, audited by an http.request effect")
	const amount = 1500
	bal, err := plane.CallAs[int64](d.ctx, d.client(), "carol", ledger.Withdraw{Amount: amount, Ref: "new car"})
	if err != nil {
		return d.fail("withdrawing from carol", err)
	}
	d.money -= amount
	d.say("carol withdrew %d (balance %d): above %d, so the same step emitted an http.request POST", amount, bal, auditAbove)
	var a ledger.Account
	if err := d.waitFor("the audit receipt", func() (bool, error) {
		var err error
		a, err = d.account("carol")
		return err == nil && len(a.Audits) == 1 && a.Audits[0].Outcome != ledger.AuditPending, err
	}); err != nil {
		return err
	}
	au := a.Audits[0]
	if err := d.check(au.Outcome == ledger.AuditOK, "the audit receipt says %s (%s)", au.Outcome, au.Detail); err != nil {
		return err
	}
	posts := d.audit.posts.Load()
	if err := d.check(posts == 1, "the audit service received %d requests, want 1", posts); err != nil {
		return err
	}
	d.say("the effect adapter POSTed it; the receipt came back through carol's inbox")
	d.say("receipt recorded in carol's state: %s, HTTP %d (intent %s)", au.Outcome, au.HTTPStatus, short(au.Intent))
	d.say("the audit service received exactly %d request", posts)
	d.end()
	return nil
}

func (d *demo) crash() error {
	d.begin("A worker crash: demo-2 takes over from demo-1")
	var err error
	if d.n2, err = d.startNode(worker2); err != nil {
		return d.fail("starting "+worker2, err)
	}
	workers := []string{worker1, worker2}
	d.say("node %s started beside %s; the orchestrator spreads the worlds by rendezvous hashing", worker2, worker1)
	if err := d.waitFor("the worlds to spread over both nodes", func() (bool, error) {
		ls, now, err := d.leases(d.worlds)
		if err != nil {
			return false, err
		}
		for _, id := range d.worlds {
			if l := ls[id]; !held(l, now) || l.Holder != plane.Place(id, workers) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	spread, _, err := d.leases(d.worlds)
	if err != nil {
		return d.fail("reading leases", err)
	}
	for _, id := range d.worlds {
		if l := spread[id]; l.Holder == worker2 {
			d.say("%-6s moved to %s (epoch %d): %s released it at once, so a planned move waits for no TTL", id, l.Holder, l.Epoch, worker1)
		} else {
			d.say("%-6s stays on %s (epoch %d)", id, l.Holder, l.Epoch)
		}
	}

	// A transfer the crash interrupts: hosted on demo-1, and unable to
	// finish before the crash because its source is paused.
	id := ""
	for k := 2; k < 100 && id == ""; k++ {
		if c := fmt.Sprintf("t-%d", k); plane.Place(c, workers) == worker1 {
			id = c
		}
	}
	if _, err := d.st.SetWorldStatus(d.ctx, "alice", store.WorldPaused, "demo: maintenance"); err != nil {
		return d.fail("pausing alice", err)
	}
	d.say("an operator pauses alice: her lease ends, her inbox keeps accepting input")
	if err := d.create(ledger.UniverseTransfer, id); err != nil {
		return err
	}
	const amount = 200
	start := ledger.Start{From: "alice", To: "carol", Amount: amount, TimeoutMs: 30_000}
	if _, err := d.client().Send(d.ctx, id, start, "start"); err != nil {
		return d.fail("starting "+id, err)
	}
	var tr ledger.Transfer
	if err := d.waitFor(id+"'s hold to reach alice's inbox", func() (bool, error) {
		var err error
		if tr, err = d.transferState(id); err != nil || tr.HoldMsg == "" {
			return false, err
		}
		es, err := d.st.EffectStatus(d.ctx, tr.HoldMsg)
		return err == nil && es.State == vocab.EffectDone, err
	}); err != nil {
		return err
	}
	timers, err := d.st.ListTimers(d.ctx, id, 10)
	if err != nil {
		return d.fail("listing "+id+"'s timers", err)
	}
	before, _, err := d.leases(d.worlds)
	if err != nil {
		return d.fail("reading leases", err)
	}
	if err := d.check(before[id].Holder == worker1 && tr.Phase == ledger.PhasePending && len(timers) == 1,
		"%s is %s on %q with %d timers; want pending on %s with its timer", id, tr.Phase, before[id].Holder, len(timers), worker1); err != nil {
		return err
	}
	d.say("transfer %s (alice → carol, %d), named so that rendezvous places it on %s, the node about to crash:", id, amount, worker1)
	d.say("it runs on %s (epoch %d): %s, its Hold waiting in alice's inbox", worker1, before[id].Epoch, tr.Phase)
	d.say("its timeout timer %s is durable in the store, due %s after the start",
		short(timers[0].IntentHash), time.Duration(tr.DeadlineMs-tr.StartedMs)*time.Millisecond)

	d.n1.Kill(d.ctx)
	killed := time.Now()
	d.live = d.n2
	d.say("%s killed: a crash, nothing released; its leases stay until they expire", worker1)
	if _, err := d.st.SetWorldStatus(d.ctx, "alice", store.WorldActive, "demo: maintenance over"); err != nil {
		return d.fail("resuming alice", err)
	}
	d.say("the operator resumes alice")
	if err := d.waitFor(worker2+" to hold every world", func() (bool, error) {
		ls, now, err := d.leases(d.worlds)
		if err != nil {
			return false, err
		}
		for _, id := range d.worlds {
			if l := ls[id]; !held(l, now) || l.Holder != worker2 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	d.say("%s takes over after the lease TTL: it holds every world %s after the crash (TTL %s)", worker2, time.Since(killed).Round(time.Millisecond), d.ttl)
	after, _, err := d.leases(d.worlds)
	if err != nil {
		return d.fail("reading leases", err)
	}
	for _, w := range d.worlds {
		b, a := before[w], after[w]
		switch {
		case b.Holder == worker2:
			d.say("%-6s stays on %s (epoch %d)", w, worker2, a.Epoch)
			continue
		case b.Holder == "":
			d.say("%-6s (paused at the crash) now on %s, epoch %d → %d", w, a.Holder, b.Epoch, a.Epoch)
		default:
			d.say("%-6s %s → %s, epoch %d → %d", w, b.Holder, a.Holder, b.Epoch, a.Epoch)
		}
		if err := d.check(a.Holder == worker2 && a.Epoch > b.Epoch, "%s: held by %s at epoch %d, was %s at %d", w, a.Holder, a.Epoch, b.Holder, b.Epoch); err != nil {
			return err
		}
	}

	if tr, err = d.settled(id); err != nil {
		return err
	}
	if err := d.check(tr.Phase == ledger.PhaseCompleted && tr.TimerState == ledger.TimerCancelled,
		"%s is %s (%s), its timer %s; want completed with the timer cancelled", id, tr.Phase, tr.Reason, tr.TimerState); err != nil {
		return err
	}
	if timers, err = d.st.ListTimers(d.ctx, id, 10); err != nil {
		return d.fail("listing "+id+"'s timers", err)
	}
	if err := d.check(len(timers) == 0, "%s still has %d timers", id, len(timers)); err != nil {
		return err
	}
	// The host reports a commit after the store has it, and the transfer's
	// last receipts may still be stepped after it settled: wait until the
	// commits reported reach the journal's head before reading them.
	var upTo, head uint64
	var onTwo []uint64
	if err := d.waitFor(id+"'s commits to be reported", func() (bool, error) {
		upTo, onTwo = 0, nil
		for _, c := range d.commits.of(id) {
			if c.worker == worker1 {
				upTo = max(upTo, c.height)
			} else {
				onTwo = append(onTwo, c.height)
			}
		}
		var err error
		if head, err = d.st.Head(d.ctx, id); err != nil {
			return false, err
		}
		return len(onTwo) > 0 && onTwo[len(onTwo)-1] == head, nil
	}); err != nil {
		return err
	}
	if err := d.check(upTo >= 1 && len(onTwo) > 0 && onTwo[len(onTwo)-1] == head,
		"%s's commits: %s up to height %d, %s at %v; head %d", id, worker1, upTo, worker2, onTwo, head); err != nil {
		return err
	}
	d.say("%s: %s journaled %s (Start: timer armed, Hold sent); %s journaled %s", id, worker1, heights(1, upTo), worker2, heights(upTo+1, head))
	d.say("on %s: alice took the hold and answered Held; %s cancelled its timer (armed by %s), deposited to carol, captured from alice: %s",
		worker2, id, worker1, tr.Phase)
	alice, err := d.account("alice")
	if err != nil {
		return d.fail("reading alice", err)
	}
	carol, err := d.account("carol")
	if err != nil {
		return d.fail("reading carol", err)
	}
	if err := d.check(alice.Balance == 500 && carol.Balance == 700, "alice %d, carol %d; want 500 and 700", alice.Balance, carol.Balance); err != nil {
		return err
	}
	d.say("balances: alice %d, carol %d", alice.Balance, carol.Balance)
	d.end()
	return nil
}

func (d *demo) fork() error {
	d.begin("A fork: what if bob spent 250?")
	const forkID, amount = "bob-what-if", 250
	// Every commit snapshots (the nodes run with SnapshotEvery 1), so
	// bob's active snapshot is his head once he is idle.
	var snap store.Snapshot
	if err := d.waitFor("bob's snapshot to reach his head", func() (bool, error) {
		s, ok, err := d.st.ActiveSnapshot(d.ctx, "bob")
		if err != nil || !ok {
			return false, err
		}
		head, err := d.st.Head(d.ctx, "bob")
		snap = s
		return s.Height == head, err
	}); err != nil {
		return err
	}
	if _, err := d.live.Ops().WorldFork(d.ctx, "bob", 0, forkID); err != nil {
		return d.fail("forking bob", err)
	}
	d.worlds = append(d.worlds, forkID)
	bobState, err := ledger.AccountOf("bob", world.Snapshot{Height: snap.Height, State: snap.State})
	if err != nil {
		return d.fail("reading bob's snapshot", err)
	}
	d.say("forked bob at his snapshot (height %d, state %s) into %s", snap.Height, short(snap.StateHash), forkID)
	boot, err := d.client().State(d.ctx, forkID)
	if err != nil {
		return d.fail("reading "+forkID, err)
	}
	want, err := ledger.Kernels()[ledger.UniverseAccount].ForkState(snap.State)
	if err != nil {
		return d.fail("deriving the fork's state", err)
	}
	if err := d.check(boot.Height == snap.Height && bytes.Equal(boot.State, want),
		"%s boots at height %d with state %s; want bob's at %d, %s", forkID, boot.Height, short(world.Hash(boot.State)), snap.Height, short(world.Hash(want))); err != nil {
		return err
	}
	d.say("%s boots at exactly bob's state: height %d, balance %d", forkID, boot.Height, bobState.Balance)
	bal, err := plane.CallAs[int64](d.ctx, d.client(), forkID, ledger.Withdraw{Amount: amount, Ref: "what if"})
	if err != nil {
		return d.fail("withdrawing from "+forkID, err)
	}
	d.say("%s withdraws %d: balance %d", forkID, amount, bal)
	bobNow, err := d.client().State(d.ctx, "bob")
	if err != nil {
		return d.fail("reading bob", err)
	}
	bob, err := ledger.AccountOf("bob", bobNow)
	if err != nil {
		return d.fail("reading bob", err)
	}
	forkNow, err := d.client().State(d.ctx, forkID)
	if err != nil {
		return d.fail("reading "+forkID, err)
	}
	if err := d.check(bobNow.Height == snap.Height && world.Hash(bobNow.State) == snap.StateHash,
		"bob moved to height %d (state %s) while only his fork was written", bobNow.Height, short(world.Hash(bobNow.State))); err != nil {
		return err
	}
	if err := d.check(bal == bob.Balance-amount && forkNow.Height == snap.Height+1 && world.Hash(forkNow.State) != snap.StateHash,
		"fork at height %d with balance %d, bob %d: they did not diverge", forkNow.Height, bal, bob.Balance); err != nil {
		return err
	}
	d.say("they diverge: bob %d at height %d (untouched), %s %d at height %d", bob.Balance, bobNow.Height, forkID, bal, forkNow.Height)
	d.end()
	return nil
}

func (d *demo) summary() error {
	d.begin("Summary")
	ls, now, err := d.leases(d.worlds)
	if err != nil {
		return d.fail("reading leases", err)
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   world\tuniverse\tjournal height\tholder\tepoch\t")
	kernels := ledger.Kernels()
	for _, id := range d.worlds {
		rec, err := d.st.GetWorld(d.ctx, id)
		if err != nil {
			return d.fail("reading "+id, err)
		}
		head, err := d.st.Head(d.ctx, id)
		if err != nil {
			return d.fail("reading "+id+"'s journal", err)
		}
		holder := "-"
		if l := ls[id]; held(l, now) {
			holder = l.Holder
		}
		note := ""
		if rec.ParentWorld != "" {
			note = fmt.Sprintf("fork of %s at %d", rec.ParentWorld, rec.ForkedAtHeight)
		}
		fmt.Fprintf(tw, "   %s\t%s\t%d\t%s\t%d\t%s\n", id, rec.Universe, head, holder, ls[id].Epoch, note)
		// Replay parity: the journal replays to what the host holds.
		if hosted, ok := d.live.Host().State(id); ok {
			inst, _, err := plane.Restore(d.ctx, d.st, kernels, id)
			if err != nil {
				return d.fail("restoring "+id, err)
			}
			if err := d.check(inst.StateHash() == world.Hash(hosted.State), "%s replays to %s, its host holds %s", id, short(inst.StateHash()), short(world.Hash(hosted.State))); err != nil {
				return err
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(table.String(), "\n"), "\n") {
		fmt.Fprintln(d.out, strings.TrimRight(line, " "))
	}
	var sum int64
	parts := ""
	for _, a := range accounts() {
		acc, err := d.account(a.id)
		if err != nil {
			return d.fail("reading "+a.id, err)
		}
		if err := d.check(len(acc.Holds) == 0, "%s still holds %v", a.id, acc.Holds); err != nil {
			return err
		}
		sum += acc.Balance
		if parts != "" {
			parts += " + "
		}
		parts += fmt.Sprintf("%s %d", a.id, acc.Balance)
	}
	if err := d.check(sum == d.money, "the accounts hold %d, want %d", sum, d.money); err != nil {
		return err
	}
	if err := d.check(d.audit.posts.Load() == 1, "the audit service received %d requests, want 1", d.audit.posts.Load()); err != nil {
		return err
	}
	d.say("every hosted world replays from its journal to the state its host holds")
	d.say("money conserved: %s = %d (deposits less carol's withdrawal; transfers moved it, never made or lost it)", parts, sum)
	d.say("nothing held, exactly one audit request, the fork apart from the books")
	d.say("demo finished in %s", time.Since(d.began).Round(time.Millisecond))
	d.say("try next:")
	d.say("  orrery serve        host these worlds behind the HTTP API")
	d.say("  orrery world list   list the worlds with their heads and holders")
	if d.dbPath != "" && d.tmpDir == "" {
		d.say("the database stays at %s", d.dbPath)
	}
	d.end()
	return nil
}

// ---- setup and teardown ----

func (d *demo) openStore() error {
	if d.opt.Store != nil {
		d.st = d.opt.Store
		d.say("store: the one passed in")
		return nil
	}
	dir := d.opt.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "orrery-demo-"); err != nil {
			return d.fail("creating a temporary directory", err)
		}
		d.tmpDir = dir
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return d.fail("creating "+dir, err)
	}
	d.dbPath = filepath.Join(dir, DBName)
	if _, err := os.Stat(d.dbPath); err == nil {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(d.dbPath + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return d.fail("removing the previous demo database", err)
			}
		}
		d.say("replaced the database of an earlier demo run")
	}
	st, err := sqlite.Open(d.ctx, d.dbPath)
	if err != nil {
		return d.fail("opening "+d.dbPath, err)
	}
	d.st, d.ownStore = st, true
	d.say("store: SQLite at %s", d.dbPath)
	return nil
}

func (d *demo) startNode(worker string) (*node.Node, error) {
	return node.Start(d.ctx, node.Config{
		Worker: worker, Store: d.st, Kernels: ledger.Kernels(),
		LeaseTTL: d.ttl, ClaimTTL: d.claimTTL,
		HTTP:    adapter.HTTPConfig{Client: &http.Client{Transport: d.audit.transport()}},
		Observe: d.commits.observer(worker),
		// A snapshot at every commit, so a fork can start at a head.
		Host: func(hc *plane.HostConfig) { hc.SnapshotEvery = 1 },
	})
}

// close stops what Run started, in reverse: nodes, audit service, store,
// temporary directory. It returns the first error.
func (d *demo) close() error {
	ctx := context.WithoutCancel(d.ctx)
	var errs []error
	if d.n2 != nil {
		errs = append(errs, d.n2.Stop(ctx))
	}
	if d.n1 != nil {
		errs = append(errs, d.n1.Stop(ctx)) // a no-op after the Kill
	}
	if d.audit != nil {
		errs = append(errs, d.audit.close())
	}
	if d.ownStore {
		errs = append(errs, d.st.Close())
	}
	if d.tmpDir != "" {
		errs = append(errs, os.RemoveAll(d.tmpDir))
	}
	return errors.Join(errs...)
}

// commitLog keeps every commit the nodes' hosts report, by world, so the
// demo can say which node journaled which heights.
type commitLog struct {
	mu sync.Mutex
	by map[string][]commit
}

type commit struct {
	worker string
	height uint64 // the head after the commit
}

func (l *commitLog) observer(worker string) func(plane.HostEvent) {
	return func(ev plane.HostEvent) {
		if ev.Kind != plane.EvCommit {
			return
		}
		l.mu.Lock()
		l.by[ev.World] = append(l.by[ev.World], commit{worker: worker, height: ev.Height})
		l.mu.Unlock()
	}
}

func (l *commitLog) of(world string) []commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]commit(nil), l.by[world]...)
}

// auditServer is the audit service: an HTTP handler that counts the POSTs
// it receives, on a loopback port or in process.
type auditServer struct {
	url   string
	srv   *http.Server  // nil in process
	done  chan struct{} // closed when srv has stopped serving
	posts atomic.Int64
}

func startAudit(inProcess bool) (*auditServer, error) {
	if inProcess {
		return &auditServer{url: "http://audit.in-process/audit"}, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &auditServer{url: "http://" + ln.Addr().String() + "/audit", done: make(chan struct{})}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(a.done)
		_ = a.srv.Serve(ln)
	}()
	return a, nil
}

// transport is what the nodes' http.request adapters send with.
func (a *auditServer) transport() http.RoundTripper {
	if a.srv == nil {
		return handlerTransport{http.HandlerFunc(a.serve)}
	}
	// No kept-alive connections: nothing outlives the demo.
	return &http.Transport{DisableKeepAlives: true}
}

func (a *auditServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/audit" {
		http.Error(w, "POST /audit only", http.StatusMethodNotAllowed)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	a.posts.Add(1)
	w.WriteHeader(http.StatusOK)
}

func (a *auditServer) close() error {
	if a.srv == nil {
		return nil
	}
	err := a.srv.Close()
	<-a.done
	return err
}

// handlerTransport answers every request with its handler, in the
// caller's goroutine: HTTP without a socket.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := &responseRecorder{header: http.Header{}}
	t.h.ServeHTTP(w, r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.header,
		Body: io.NopCloser(&w.body), ContentLength: int64(w.body.Len()), Request: r,
	}, nil
}

type responseRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *responseRecorder) Header() http.Header { return w.header }

func (w *responseRecorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *responseRecorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}
