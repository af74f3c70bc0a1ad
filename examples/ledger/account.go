package ledger

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Account limits and defaults.
const (
	// HistoryLen is how many entries an account's History keeps, and how
	// many settled audits it keeps beside the pending ones.
	HistoryLen = 16
	// DefaultAuditAbove is the audit threshold of an account opened
	// without one: withdrawals above it are reported.
	DefaultAuditAbove = 1000
	// DefaultAuditTimeoutMs bounds an audit request of an account opened
	// without AuditTimeoutMs.
	DefaultAuditTimeoutMs = 10_000
	// MaxVoided bounds the releases an account remembers that came before
	// their hold (see Account.Voided).
	MaxVoided = 256
)

// Audit outcomes.
const (
	AuditPending = "pending" // the request is out; no receipt yet
	AuditOK      = "ok"      // the audit service answered 2xx
	AuditError   = "error"   // any other answer, a transport failure or a timeout
)

// Account is the state of a ledger.account world. Balance counts every
// unit the account owns, held ones included; Available is what it may
// still pay or promise.
type Account struct {
	Owner      string
	AuditURL   string // where withdrawals above AuditAbove are reported ("" = nowhere)
	AuditAbove int64
	// AuditTimeoutMs bounds each audit request (0: DefaultAuditTimeoutMs).
	// Left out of the encoding when 0, so accounts opened without it keep
	// their state hashes.
	AuditTimeoutMs int64 `cbor:",omitempty"`
	Balance        int64
	// Holds are the amounts promised to transfers in flight, sorted by
	// transfer id: a hold is captured (paid out) or released.
	Holds []Hold
	// Voided are transfers whose Release arrived before their Hold. The
	// two messages come from different steps of the transfer and are
	// delivered by different effect executions, so a crash can reorder
	// them; remembering the release makes the late hold be refused
	// instead of promising money forever. The oldest go first beyond
	// MaxVoided.
	Voided  []string
	History []Entry // the last HistoryLen movements, oldest first
	Audits  []Audit // audited withdrawals: the pending ones and the last settled
}

// Held returns the sum of the holds.
func (a Account) Held() int64 {
	var n int64
	for _, h := range a.Holds {
		n += h.Amount
	}
	return n
}

// Available is the balance less the holds.
func (a Account) Available() int64 { return a.Balance - a.Held() }

// HoldFor returns the hold of transfer, if any.
func (a Account) HoldFor(transfer string) (Hold, bool) {
	for _, h := range a.Holds {
		if h.Transfer == transfer {
			return h, true
		}
	}
	return Hold{}, false
}

// Entry is one movement of an account.
type Entry struct {
	Height  uint64 // the journal height of the step that made it
	Kind    string // open, deposit, withdraw, hold, release, capture
	Amount  int64
	Ref     string
	Balance int64 // after the movement
}

// Audit is one audited withdrawal and what became of its request.
type Audit struct {
	Intent     string // the http.request's intent hash, which its receipt names
	Ref        string
	Amount     int64
	Outcome    string // AuditPending, AuditOK or AuditError
	HTTPStatus int    // the answer's status, when there was one
	Detail     string // why, for AuditError
}

// Inputs of an account. Each names itself, so that renaming a Go type
// never changes what the journals and inboxes call it.
type (
	// Open names the owner and the audit service. It comes once.
	Open struct {
		Owner      string
		AuditURL   string
		AuditAbove int64 // 0: DefaultAuditAbove
		// AuditTimeoutMs bounds each audit request (0: DefaultAuditTimeoutMs).
		AuditTimeoutMs int64 `cbor:",omitempty"`
	}
	// Deposit adds Amount. An account that is not open accepts it too, so
	// a transfer's deposit never vanishes. Called, it replies the balance.
	Deposit struct {
		Amount int64
		Ref    string
	}
	// Withdraw pays Amount out of the available balance; above the audit
	// threshold it reports the withdrawal with an http.request POST.
	// Called, it replies the balance.
	Withdraw struct {
		Amount int64
		Ref    string
	}
	// Balance is a call: it replies the balance (int64).
	Balance struct{}
	// Hold promises Amount to Transfer, which hears back (fabric.send) with
	// Held or Refused. A second Hold of the same transfer is answered
	// Held again and promises nothing more.
	Hold struct {
		Transfer string
		Amount   int64
	}
	// Release drops the hold of Transfer.
	Release struct{ Transfer string }
	// Capture pays the hold of Transfer out.
	Capture struct{ Transfer string }
)

func (Open) WorldType() string     { return "ledger/Open" }
func (Deposit) WorldType() string  { return "ledger/Deposit" }
func (Withdraw) WorldType() string { return "ledger/Withdraw" }
func (Balance) WorldType() string  { return "ledger/Balance" }
func (Hold) WorldType() string     { return "ledger/Hold" }
func (Release) WorldType() string  { return "ledger/Release" }
func (Capture) WorldType() string  { return "ledger/Capture" }

// auditBody is what the audit service receives, as JSON.
type auditBody struct {
	Account string `json:"account"`
	Owner   string `json:"owner"`
	Amount  int64  `json:"amount"`
	Ref     string `json:"ref"`
	Height  uint64 `json:"height"`
}

// AccountDef is the definition of ledger.account worlds.
func AccountDef() *world.Def[Account] {
	d := world.New[Account](UniverseAccount, 1)
	world.On(d, func(c *world.Ctx, s *Account, o Open) error {
		switch {
		case s.Owner != "":
			return fmt.Errorf("%w: owned by %s", ErrAlreadyOpen, s.Owner)
		case o.Owner == "" || o.AuditAbove < 0 || o.AuditTimeoutMs < 0:
			return fmt.Errorf("%w: an owner, and a threshold and an audit timeout of 0 or more", ErrInvalid)
		}
		s.Owner, s.AuditURL, s.AuditAbove, s.AuditTimeoutMs = o.Owner, o.AuditURL, o.AuditAbove, o.AuditTimeoutMs
		if s.AuditAbove == 0 {
			s.AuditAbove = DefaultAuditAbove
		}
		s.record(c, "open", 0, o.Owner)
		c.Reply(s.Balance)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Account, m Deposit) error {
		if m.Amount <= 0 {
			return fmt.Errorf("%w: deposit of %d", ErrInvalid, m.Amount)
		}
		s.Balance += m.Amount
		s.record(c, "deposit", m.Amount, m.Ref)
		c.Reply(s.Balance)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Account, m Withdraw) error {
		switch {
		case m.Amount <= 0:
			return fmt.Errorf("%w: withdrawal of %d", ErrInvalid, m.Amount)
		case s.Owner == "":
			return ErrNotOpen
		case s.Available() < m.Amount:
			return fmt.Errorf("%w: %d available, %d asked", ErrInsufficientFunds, s.Available(), m.Amount)
		}
		s.Balance -= m.Amount
		s.record(c, "withdraw", m.Amount, m.Ref)
		if m.Amount > s.AuditAbove && s.AuditURL != "" {
			body, err := json.Marshal(auditBody{Account: c.World(), Owner: s.Owner, Amount: m.Amount, Ref: m.Ref, Height: c.Height()})
			if err != nil {
				return err
			}
			h := c.Effect(world.KindHTTPRequest, world.HTTPRequest{
				Method: http.MethodPost, URL: s.AuditURL, Body: body, TimeoutMs: uint64(cmp.Or(s.AuditTimeoutMs, DefaultAuditTimeoutMs)),
				Headers: map[string][]string{"Content-Type": {"application/json"}},
			})
			s.Audits = append(s.Audits, Audit{Intent: h, Ref: m.Ref, Amount: m.Amount, Outcome: AuditPending})
			s.trimAudits()
		}
		c.Reply(s.Balance)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Account, _ Balance) error {
		c.Reply(s.Balance)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Account, m Hold) error {
		if m.Transfer == "" || m.Amount <= 0 {
			return fmt.Errorf("%w: hold of %d for %q", ErrInvalid, m.Amount, m.Transfer)
		}
		refuse := func(reason string) error {
			_, err := sendTo(c, UniverseTransfer, m.Transfer, Refused{Account: c.World(), Reason: reason})
			return err
		}
		if h, ok := s.HoldFor(m.Transfer); ok {
			_, err := sendTo(c, UniverseTransfer, m.Transfer, Held{Account: c.World(), Amount: h.Amount})
			return err
		}
		if i := slices.Index(s.Voided, m.Transfer); i >= 0 {
			s.Voided = slices.Delete(s.Voided, i, i+1)
			return refuse("released before the hold arrived")
		}
		if s.Owner == "" {
			return refuse("account not open")
		}
		if s.Available() < m.Amount {
			return refuse(fmt.Sprintf("insufficient funds: %d available, %d asked", s.Available(), m.Amount))
		}
		s.Holds = append(s.Holds, m)
		slices.SortFunc(s.Holds, func(a, b Hold) int { return strings.Compare(a.Transfer, b.Transfer) })
		s.record(c, "hold", m.Amount, m.Transfer)
		_, err := sendTo(c, UniverseTransfer, m.Transfer, Held{Account: c.World(), Amount: m.Amount})
		return err
	})
	world.On(d, func(c *world.Ctx, s *Account, m Release) error {
		if m.Transfer == "" {
			return fmt.Errorf("%w: release of no transfer", ErrInvalid)
		}
		if h, ok := s.HoldFor(m.Transfer); ok {
			s.dropHold(m.Transfer)
			s.record(c, "release", h.Amount, m.Transfer)
			return nil
		}
		if !slices.Contains(s.Voided, m.Transfer) {
			s.Voided = append(s.Voided, m.Transfer)
			if len(s.Voided) > MaxVoided {
				s.Voided = s.Voided[len(s.Voided)-MaxVoided:]
			}
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Account, m Capture) error {
		h, ok := s.HoldFor(m.Transfer)
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownHold, m.Transfer)
		}
		s.dropHold(m.Transfer)
		s.Balance -= h.Amount
		s.record(c, "capture", h.Amount, m.Transfer)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Account, r world.Receipt) error {
		for i := range s.Audits {
			if a := &s.Audits[i]; a.Intent == r.IntentHash {
				settleAudit(a, r)
				s.trimAudits()
				return nil
			}
		}
		// The receipt of a Held or Refused: the transfer's own timer
		// covers an answer that could not be delivered.
		if r.Status != vocab.ReceiptOK {
			c.Log("answer to a transfer undelivered", "intent", r.IntentHash, "status", string(r.Status))
		}
		return nil
	})
	return d
}

// settleAudit records an audit request's receipt: ok only for a 2xx answer.
func settleAudit(a *Audit, r world.Receipt) {
	a.Outcome = AuditError
	if r.Status != vocab.ReceiptOK {
		var f struct {
			Error string `cbor:"error"`
		}
		_ = r.Decode(&f)
		a.Detail = string(r.Status) + ": " + f.Error
		return
	}
	var resp world.HTTPResponse
	if err := r.Decode(&resp); err != nil {
		a.Detail = "unreadable response: " + err.Error()
		return
	}
	a.HTTPStatus = resp.Status
	if resp.Status >= 200 && resp.Status < 300 {
		a.Outcome = AuditOK
		return
	}
	a.Detail = fmt.Sprintf("HTTP %d", resp.Status)
}

// record appends a history entry, keeping the last HistoryLen.
func (s *Account) record(c *world.Ctx, kind string, amount int64, ref string) {
	s.History = append(s.History, Entry{Height: c.Height(), Kind: kind, Amount: amount, Ref: ref, Balance: s.Balance})
	if len(s.History) > HistoryLen {
		s.History = s.History[len(s.History)-HistoryLen:]
	}
}

// trimAudits keeps every pending audit, whose receipt must still find it,
// and the last HistoryLen settled ones.
func (s *Account) trimAudits() {
	settled := 0
	for _, a := range s.Audits {
		if a.Outcome != AuditPending {
			settled++
		}
	}
	if settled <= HistoryLen {
		return
	}
	drop := settled - HistoryLen
	kept := s.Audits[:0]
	for _, a := range s.Audits {
		if a.Outcome != AuditPending && drop > 0 {
			drop--
			continue
		}
		kept = append(kept, a)
	}
	s.Audits = kept
}

func (s *Account) dropHold(transfer string) {
	s.Holds = slices.DeleteFunc(s.Holds, func(h Hold) bool { return h.Transfer == transfer })
}
