// Command bank is a small supervised-GenServer example: a ledger server holds
// the accounts and is reached by name through a registry; an auditor worker
// checks every transfer and crashes on a suspicious one; a one-for-one
// supervisor restarts the auditor and leaves the ledger alone. It prints what
// happens, then shuts the tree down in reverse start order.
//
//	go run ./examples/bank
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/registry"
	"github.com/orrery-run/orrery/supervisor"
)

// ---- the ledger: a GenServer ----

type op uint8

const (
	opDeposit op = iota
	opWithdraw
	opBalance
)

type request struct {
	op      op
	account string
	amount  int
}

var errInsufficient = errors.New("insufficient funds")

type ledger struct {
	actor.Base
	out      io.Writer
	reg      *registry.Registry
	accounts map[string]int
	auditor  *registry.ActorName[transfer]
}

func (l *ledger) Init(p *actor.Proc) error {
	l.accounts = map[string]int{}
	_, err := l.reg.Register("ledger", p.Self())
	return err
}

func (l *ledger) HandleCall(p *actor.Proc, r request, _ actor.ReplyTo[int]) (int, error) {
	switch r.op {
	case opDeposit:
		l.accounts[r.account] += r.amount
	case opWithdraw:
		if l.accounts[r.account] < r.amount {
			return l.accounts[r.account], errInsufficient
		}
		l.accounts[r.account] -= r.amount
	}
	// Every movement goes to the auditor; if it is restarting right now the
	// name is briefly unbound and the transfer is reported, not lost silently.
	if r.op != opBalance {
		if err := l.auditor.TrySend(transfer{r.account, r.amount}); err != nil {
			fmt.Fprintf(l.out, "  ledger: auditor unavailable (%v)\n", err)
		}
	}
	return l.accounts[r.account], nil
}

func (l *ledger) HandleCast(*actor.Proc, struct{}) error { return nil }

// ---- the auditor: a plain actor that crashes on what it cannot explain ----

type transfer struct {
	account string
	amount  int
}

type auditor struct {
	actor.Base
	out  io.Writer
	reg  *registry.Registry
	seen int
}

func (a *auditor) OnStart(p *actor.Proc) error {
	fmt.Fprintf(a.out, "  auditor %s: started\n", p.Self())
	_, err := a.reg.Register("auditor", p.Self())
	return err
}

func (a *auditor) Handle(p *actor.Proc, t transfer) error {
	a.seen++
	if t.amount >= 1_000_000 {
		return fmt.Errorf("auditor: cannot explain a transfer of %d to %s", t.amount, t.account)
	}
	fmt.Fprintf(a.out, "  auditor %s: ok %s %+d (%d seen by this instance)\n", p.Self(), t.account, t.amount, a.seen)
	return nil
}

func (a *auditor) OnStop(p *actor.Proc, o actor.Outcome) {
	fmt.Fprintf(a.out, "  auditor %s: stopped with %s\n", p.Self(), o)
}

func main() {
	if _, err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bank:", err)
		os.Exit(1)
	}
}

// run plays the scenario, printing to out, and returns the system's outcome.
func run(w io.Writer) (actor.Outcome, error) {
	out := &lockedWriter{w: w} // several processes print concurrently
	ctx := context.Background()
	sys := actor.NewSystem()
	reg := registry.New(sys.Executor())
	auditorName := registry.Actor[transfer](reg, "auditor")
	ledgerName := registry.Server[request, int, struct{}](reg, "ledger")

	sup, err := supervisor.Start(ctx, sys.Root(), supervisor.Spec{
		Strategy:    supervisor.OneForOne,
		MaxRestarts: 3,
		Window:      5 * time.Second,
		Children: []supervisor.ChildSpec{
			{
				ID: "ledger", Restart: supervisor.Permanent,
				Start: func(ctx context.Context, s *actor.Scope) (actor.PID, error) {
					ref, err := actor.StartServer[request, int, struct{}](ctx, s, &ledger{out: out, reg: reg, auditor: auditorName}, actor.WithName("ledger"))
					if err != nil {
						return actor.PID{}, err
					}
					return ref.PID(), nil
				},
			},
			{
				ID: "auditor", Restart: supervisor.Permanent,
				Start: func(ctx context.Context, s *actor.Scope) (actor.PID, error) {
					ref, err := actor.Spawn[transfer](ctx, s, &auditor{out: out, reg: reg}, actor.WithName("auditor"))
					if err != nil {
						return actor.PID{}, err
					}
					return ref.PID(), nil
				},
			},
		},
		OnLog: func(e supervisor.LogEntry) {
			fmt.Fprintf(out, "  supervisor: %-10s %-8s %s %s\n", e.Decision, e.ChildID, e.PID, e.Outcome)
		},
	}, actor.WithName("bank"))
	if err != nil {
		return actor.Outcome{}, err
	}

	do := func(what string, r request) {
		bal, err := ledgerName.Call(ctx, r)
		if err != nil {
			fmt.Fprintf(out, "%s: %s -> error: %v (balance %d)\n", what, r.account, err, bal)
			return
		}
		fmt.Fprintf(out, "%s: %s -> balance %d\n", what, r.account, bal)
	}
	wait := func() { _ = actor.Sleep(ctx, sys.Executor(), 10*time.Millisecond) }

	fmt.Fprintln(out, "== normal business")
	do("deposit", request{opDeposit, "alice", 100})
	do("deposit", request{opDeposit, "bob", 50})
	do("withdraw", request{opWithdraw, "alice", 30})
	do("withdraw", request{opWithdraw, "bob", 80})
	wait()

	fmt.Fprintln(out, "== a suspicious deposit crashes the auditor; the supervisor restarts it")
	do("deposit", request{opDeposit, "mallory", 5_000_000})
	wait()
	do("deposit", request{opDeposit, "alice", 1})
	wait()

	children, err := sup.WhichChildren(ctx)
	if err != nil {
		return actor.Outcome{}, err
	}
	fmt.Fprintln(out, "== children after the crash (the ledger kept its state, the auditor is new)")
	for _, c := range children {
		fmt.Fprintf(out, "  %-8s %s %s\n", c.ID, c.PID, c.Status)
	}
	do("balance", request{opBalance, "alice", 0})

	fmt.Fprintln(out, "== shutdown (reverse start order)")
	o, err := sup.Stop(ctx)
	if err != nil {
		return actor.Outcome{}, err
	}
	fmt.Fprintf(out, "supervisor outcome: %s\n", o)
	so, err := sys.Close(ctx)
	fmt.Fprintf(out, "system outcome: %s\n", so)
	return so, err
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
