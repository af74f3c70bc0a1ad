package ledger

import (
	"errors"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// The two universes. Every world of a universe runs that universe's
// definition, so a world's id says nothing about what it is: its universe
// does.
const (
	UniverseAccount  = "ledger.account"
	UniverseTransfer = "ledger.transfer"
)

// Sentinels. A handler returns one of them (wrapped with detail); the step
// is then consumed with the state unchanged, and a Call on it fails with
// plane.ErrCallFailed wrapping it, so errors.Is finds it in process.
var (
	// ErrInvalid: an amount that is not positive, a missing id, a
	// transfer from an account to itself.
	ErrInvalid = errors.New("ledger: invalid input")
	// ErrNotOpen: the account has no owner yet; it can receive money but
	// not pay any out.
	ErrNotOpen = errors.New("ledger: account not open")
	// ErrAlreadyOpen: a second Open.
	ErrAlreadyOpen = errors.New("ledger: account already open")
	// ErrInsufficientFunds: the available balance (the balance less the
	// holds) does not cover the amount.
	ErrInsufficientFunds = errors.New("ledger: insufficient funds")
	// ErrUnknownHold: a Capture names a transfer the account holds nothing
	// for.
	ErrUnknownHold = errors.New("ledger: no hold for the transfer")
	// ErrStarted: a second Start on a transfer world.
	ErrStarted = errors.New("ledger: transfer already started")
)

// Kernels returns the definitions of both universes, for a node.Config or
// a plane.Client.
func Kernels() plane.Kernels {
	return plane.Kernels{
		UniverseAccount:  AccountDef().Kernel(),
		UniverseTransfer: TransferDef().Kernel(),
	}
}

// AccountOf decodes an account world's state from a snapshot (what
// plane.Client.State returns).
func AccountOf(id string, s world.Snapshot) (Account, error) {
	w, err := world.Load(AccountDef(), id, s)
	if err != nil {
		return Account{}, err
	}
	return w.Value()
}

// TransferOf decodes a transfer world's state from a snapshot.
func TransferOf(id string, s world.Snapshot) (Transfer, error) {
	w, err := world.Load(TransferDef(), id, s)
	if err != nil {
		return Transfer{}, err
	}
	return w.Value()
}

// sendTo sends msg to world dest of another universe. Ctx.Send addresses
// the sender's own universe; naming the destination's makes the fabric
// adapter refuse a world of the wrong kind instead of delivering a message
// it has no handler for.
func sendTo(c *world.Ctx, universe, dest string, msg any) (string, error) {
	name, err := world.TypeName(msg)
	if err != nil {
		return "", err
	}
	value, err := event.Marshal(msg)
	if err != nil {
		return "", err
	}
	return c.SendParams(world.FabricSendParams{
		DestUniverse: universe, DestWorld: dest, Mode: world.FabricTypedEvent, Schema: name, ValueCBOR: value,
	}), nil
}
