package world_test

import (
	"errors"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/world"
)

// Ledger is the state of the test world that exercises every Ctx feature.
type Ledger struct {
	Balance int64
	Timers  map[string]string // reminder name → timer hash
	Fired   []string
	Notes   []string
	Causes  []world.Cause
	Rolls   []uint64
	NowNs   int64
	Paid    []string // receipts handled: "intent/status"
}

type (
	Burst  struct{ N int }
	Fail   struct{}
	Boom   struct{}
	Remind struct {
		Name     string
		AfterSec int64
	}
	Ping      struct{ Name string }
	Forget    struct{ Name string }
	Tell      struct{ Dest, Text string }
	Note      struct{ Text string }
	Roll      struct{}
	Ask       struct{}
	Silent    struct{}
	Twice     struct{}
	SendEmail struct{ To string }
	Email     struct{ To string }
	Bogus     struct{}
	Stamp     struct{}
	Nameless  struct{}
)

// Renamed has a stable routing name of its own.
type Renamed struct{ V int }

func (Renamed) WorldType() string { return "ledger/Renamed@1" }

func effectsDef() *world.Def[Ledger] { return ledgerDef("ledger", 1, 1) }

// ledgerDef builds the ledger world; mult scales deposits, so a "changed
// handler" is the same world with another mult.
func ledgerDef(name string, version uint64, mult int64) *world.Def[Ledger] {
	def := world.New[Ledger](name, version)
	world.EffectKind[Email](def, "email.send")
	world.On(def, func(c *world.Ctx, s *Ledger, d Deposit) error {
		s.Balance += d.Amount * mult
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, w Withdraw) error {
		if w.Amount > s.Balance {
			return errors.New("insufficient funds")
		}
		s.Balance -= w.Amount
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: "https://pay.example/" + strconv.FormatInt(w.Amount*mult, 10)})
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, b Burst) error {
		for i := range b.N {
			c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://x.example/" + strconv.Itoa(i)})
		}
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Fail) error {
		s.Balance = -1
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://x.example/lost"})
		c.SetTimer(c.Now().Add(time.Hour), Ping{Name: "lost"})
		c.Log("about to fail")
		return errors.New("refused")
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Boom) error {
		s.Balance = -2
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://x.example/boom"})
		var m map[string]int
		//lint:ignore SA5000 the handler must panic, and a nil map write is how it does
		m["x"] = 1
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, r Remind) error {
		if s.Timers == nil {
			s.Timers = map[string]string{}
		}
		s.Timers[r.Name] = c.SetTimer(c.Now().Add(time.Duration(r.AfterSec)*time.Second), Ping{Name: r.Name})
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, p Ping) error {
		s.Fired = append(s.Fired, p.Name)
		delete(s.Timers, p.Name)
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, f Forget) error {
		c.CancelTimer(s.Timers[f.Name])
		delete(s.Timers, f.Name)
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, m Tell) error {
		c.Send(m.Dest, Note{Text: m.Text})
		c.Reply("sent")
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, n Note) error {
		s.Notes = append(s.Notes, n.Text)
		s.Causes = append(s.Causes, c.Cause())
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Roll) error {
		s.Rolls = append(s.Rolls, c.Rand().Uint64(), c.Rand().Uint64())
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Ask) error {
		c.Reply(s.Balance)
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Silent) error { return nil })
	world.On(def, func(c *world.Ctx, s *Ledger, _ Twice) error {
		c.Reply(1)
		c.Reply(2)
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, m SendEmail) error {
		c.Effect("email.send", Email(m))
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Bogus) error {
		c.Effect("sms.send", Email{To: "x"})
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, _ Stamp) error {
		s.NowNs = c.Now().UnixNano()
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, r Renamed) error {
		s.Balance += int64(r.V)
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, r world.Receipt) error {
		s.Paid = append(s.Paid, r.IntentHash[:8]+"/"+string(r.Status))
		return nil
	})
	return def
}
