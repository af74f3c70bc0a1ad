package vocab

// Inbox item kinds. Receipt, timer and fabric items are the ones the store
// itself writes (an effect's completion, a timer's firing, a fabric
// delivery), and no producer may enqueue them; event and call items are the
// ones clients write. A call's dedupe key is its call id in the store's
// call namespace.
const (
	KindEvent   = "event"
	KindCall    = "call"
	KindReceipt = "receipt"
	KindTimer   = "timer"
	KindFabric  = "fabric"
	// KindUpgrade is an operator's request to move a world to another
	// version of its definition: ordered with its other inputs, and run by
	// the host that holds its lease (world.EncodeUpgrade is its payload).
	KindUpgrade = "upgrade"
)
