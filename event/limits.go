package event

// The limits of what one durable record, and one call to the persistence
// plane, may hold. They live here, below both the store (which refuses
// anything over them) and the world kernel (which bounds each step so that
// the store never has to), so that the producer and the authority that
// checks it cannot drift apart: a step the kernel lets through is a step
// every backend accepts.
const (
	// MaxIDBytes bounds an identifier: a world or stream id, an event
	// type, a step or plan id, an effect kind, an intent hash.
	MaxIDBytes = 256
	// MaxKeyBytes bounds an idempotency or dedupe key.
	MaxKeyBytes = 512
	// MaxReasonBytes bounds an operator's or a status change's free text.
	MaxReasonBytes = 1024
	// MaxPayloadBytes bounds one payload: a journal record's, an inbox
	// item's, an intent's params, a timer's firing, a receipt.
	MaxPayloadBytes = 4 << 20
	// MaxStateBytes bounds one snapshot's state.
	MaxStateBytes = 64 << 20
	// MaxBatch bounds the items of one call: the entries, intents, or
	// timers set and cancelled of one commit, the events of an append.
	MaxBatch = 10_000
	// MinTimeUnix and MaxTimeUnix (Unix seconds: 1678-01-01 and
	// 2262-01-01, UTC) bound every stored instant: the range every backend
	// stores at nanosecond precision, a little inside what Timestamp can
	// encode.
	MinTimeUnix = -9214560000
	MaxTimeUnix = 9214646400
)
