package vocab

// ReceiptStatus is an effect's terminal state. The statuses are promises
// to the world, which acts on them: ok means the effect happened, error
// that it did not and will not, timeout that nobody knows.
type ReceiptStatus string

const (
	ReceiptOK      ReceiptStatus = "ok"
	ReceiptError   ReceiptStatus = "error"
	ReceiptTimeout ReceiptStatus = "timeout"
)

// Valid reports whether s is one of ReceiptOK, ReceiptError and
// ReceiptTimeout.
func (s ReceiptStatus) Valid() bool {
	switch s {
	case ReceiptOK, ReceiptError, ReceiptTimeout:
		return true
	}
	return false
}

// Receipt is an effect's result as it is completed: Status is kept in the
// effect's record, and Payload is what enters the world's inbox as an item
// of KindReceipt (the receipt input's wire form, world.EncodeReceipt, when
// the world is a kernel world).
type Receipt struct {
	Status  ReceiptStatus
	Payload []byte
}

// Completion is one completion of a batch: the intent, the claim it is
// completed under and its receipt.
type Completion struct {
	IntentHash string
	Claim      Claim
	Receipt    Receipt
}
