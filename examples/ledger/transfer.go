package ledger

import (
	"fmt"
	"time"

	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// DefaultTimeoutMs is a transfer's timeout when Start names none.
const DefaultTimeoutMs = 30_000

// Phase is where a transfer saga is.
type Phase string

// Phases. A saga moves forward only: pending → held → completed, or to
// failed from pending or held.
const (
	PhasePending   Phase = "pending"   // the hold is asked for; the timeout is armed
	PhaseHeld      Phase = "held"      // the source holds the amount; the deposit is on its way
	PhaseCompleted Phase = "completed" // the deposit landed; the capture is sent
	PhaseFailed    Phase = "failed"    // refused, timed out or undeliverable; nothing stays held
)

// Timer states of the saga's timeout.
const (
	TimerArmed     = "armed"
	TimerCancelled = "cancelled" // the hold was answered (or unreachable) first
	TimerFired     = "fired"     // it fired while the saga still waited
)

// Transfer is the state of a ledger.transfer world: one saga moving Amount
// from account From to account To. Its messages to the accounts are
// fabric.send effects, and each field ending in Msg is the intent hash of
// one (its receipt says whether it was delivered).
type Transfer struct {
	ID     string
	From   string
	To     string
	Amount int64
	Phase  Phase
	Reason string // why it failed

	// Times are the inputs' times (the store's clock at enqueue), in Unix
	// milliseconds.
	StartedMs  int64
	DeadlineMs int64
	EndedMs    int64

	Timer      string // the timeout's intent hash
	TimerState string // TimerArmed, TimerCancelled or TimerFired

	HoldMsg    string
	DepositMsg string
	CaptureMsg string
	ReleaseMsg string
	// Undelivered lists messages sent after the saga was decided whose
	// delivery failed (an account archived meanwhile): an operator's
	// business, since no message of the saga can repair it.
	Undelivered []string
}

// Inputs of a transfer world.
type (
	// Start starts the saga: it arms a timeout of TimeoutMs (0:
	// DefaultTimeoutMs) and asks From to hold Amount. Called, it replies
	// the Transfer.
	Start struct {
		From      string
		To        string
		Amount    int64
		TimeoutMs int64
	}
	// Status is a call: it replies the Transfer.
	Status struct{}
	// Held is an account's answer to a Hold: the amount is promised.
	Held struct {
		Account string
		Amount  int64
	}
	// Refused is an account's answer to a Hold it will not honour.
	Refused struct {
		Account string
		Reason  string
	}
	// Timeout is the saga's timer firing.
	Timeout struct{}
)

func (Start) WorldType() string   { return "ledger/Start" }
func (Status) WorldType() string  { return "ledger/Status" }
func (Held) WorldType() string    { return "ledger/Held" }
func (Refused) WorldType() string { return "ledger/Refused" }
func (Timeout) WorldType() string { return "ledger/Timeout" }

// TransferDef is the definition of ledger.transfer worlds.
func TransferDef() *world.Def[Transfer] {
	d := world.New[Transfer](UniverseTransfer, 1)
	world.On(d, func(c *world.Ctx, s *Transfer, m Start) error {
		switch {
		case s.Phase != "":
			return fmt.Errorf("%w: %s is %s", ErrStarted, c.World(), s.Phase)
		case m.From == "" || m.To == "" || m.From == m.To:
			return fmt.Errorf("%w: a transfer between two accounts, not %q and %q", ErrInvalid, m.From, m.To)
		case m.Amount <= 0 || m.TimeoutMs < 0:
			return fmt.Errorf("%w: amount %d, timeout %dms", ErrInvalid, m.Amount, m.TimeoutMs)
		}
		timeout := m.TimeoutMs
		if timeout == 0 {
			timeout = DefaultTimeoutMs
		}
		now := c.Now()
		deadline := now.Add(time.Duration(timeout) * time.Millisecond)
		*s = Transfer{
			ID: c.World(), From: m.From, To: m.To, Amount: m.Amount, Phase: PhasePending,
			StartedMs: now.UnixMilli(), DeadlineMs: deadline.UnixMilli(),
			Timer: c.SetTimer(deadline, Timeout{}), TimerState: TimerArmed,
		}
		var err error
		if s.HoldMsg, err = sendTo(c, UniverseAccount, m.From, Hold{Transfer: c.World(), Amount: m.Amount}); err != nil {
			return err
		}
		c.Reply(*s)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Transfer, _ Status) error {
		c.Reply(*s)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Transfer, m Held) error {
		if s.Phase != PhasePending || m.Account != s.From || m.Amount != s.Amount {
			// A late answer to a saga already decided (its Release is
			// on the way), or a message from elsewhere: nothing to do.
			c.Log("held ignored", "account", m.Account, "phase", string(s.Phase))
			return nil
		}
		s.cancelTimer(c)
		s.Phase = PhaseHeld
		var err error
		s.DepositMsg, err = sendTo(c, UniverseAccount, s.To, Deposit{Amount: s.Amount, Ref: "transfer:" + s.ID})
		return err
	})
	world.On(d, func(c *world.Ctx, s *Transfer, m Refused) error {
		if s.Phase != PhasePending || m.Account != s.From {
			c.Log("refused ignored", "account", m.Account, "phase", string(s.Phase))
			return nil
		}
		s.cancelTimer(c)
		return s.fail(c, fmt.Sprintf("refused by %s: %s", m.Account, m.Reason), true)
	})
	world.On(d, func(c *world.Ctx, s *Transfer, _ Timeout) error {
		s.TimerState = TimerFired
		if s.Phase != PhasePending {
			return nil
		}
		return s.fail(c, fmt.Sprintf("no answer from %s within %dms", s.From, s.DeadlineMs-s.StartedMs), true)
	})
	world.On(d, func(c *world.Ctx, s *Transfer, r world.Receipt) error {
		ok := r.Status == vocab.ReceiptOK
		switch r.IntentHash {
		case s.HoldMsg:
			if !ok && s.Phase == PhasePending {
				// Nothing was held: there is nothing to release.
				s.cancelTimer(c)
				return s.fail(c, "source "+s.From+" unreachable", false)
			}
		case s.DepositMsg:
			if !ok {
				return s.fail(c, "destination "+s.To+" unreachable", true)
			}
			var err error
			s.CaptureMsg, err = sendTo(c, UniverseAccount, s.From, Capture{Transfer: s.ID})
			s.Phase, s.EndedMs = PhaseCompleted, c.Now().UnixMilli()
			return err
		case s.CaptureMsg, s.ReleaseMsg:
			if !ok {
				s.Undelivered = append(s.Undelivered, r.IntentHash)
			}
		}
		return nil
	})
	return d
}

func (s *Transfer) cancelTimer(c *world.Ctx) {
	if s.TimerState == TimerArmed {
		c.CancelTimer(s.Timer)
		s.TimerState = TimerCancelled
	}
}

// fail ends the saga, releasing the source's hold if one may exist.
func (s *Transfer) fail(c *world.Ctx, reason string, release bool) error {
	s.Phase, s.Reason, s.EndedMs = PhaseFailed, reason, c.Now().UnixMilli()
	if !release {
		return nil
	}
	var err error
	s.ReleaseMsg, err = sendTo(c, UniverseAccount, s.From, Release{Transfer: s.ID})
	return err
}
