// Package ledger holds the example worlds `orrery serve` hosts and `orrery
// demo` runs: bank accounts, and transfers between them as sagas. Both are
// ordinary durable worlds written with package world, so everything they do
// is journaled, replayable and fenced by leases; they are meant to be read.
//
// Two universes:
//
//   - ledger.account (Account): a balance, the holds promised to transfers
//     in flight, the last movements, and an audit trail. Open, Deposit,
//     Withdraw and the Balance call are for clients; Hold, Release and
//     Capture are for transfers. A withdrawal above the account's threshold
//     is reported to its audit service with an http.request POST, and the
//     receipt (ok or error) is recorded in the state.
//   - ledger.transfer (Transfer): one saga per world. Start arms a durable
//     timeout and sends Hold to the source (fabric.send); the source answers
//     Held or Refused by fabric.send. On Held the saga cancels its timeout
//     and sends Deposit to the destination, and once the deposit is
//     delivered, Capture to the source: completed. On Refused, on the
//     timeout firing first, or when the deposit cannot be delivered, it
//     sends Release and ends failed. A late Held after that is ignored,
//     and a Release that overtakes its Hold makes the source refuse the
//     hold when it arrives, so no money stays promised. The Status call
//     replies the saga's state.
//
// The accounts' audit reports are http.request effects: a node serves them
// with the built-in HTTP adapter, or in process with audit.Recorder
// (examples/ledger/audit), an adapter written as an application writes
// one, against package vocab and package world only.
//
// And one durable workflow, ledger.payout (PayoutDef): it validates a payout,
// waits for an operator's "approved" signal, and records a notice, each step
// journaled by package workflow.
//
// Money is conserved by construction: a transfer only ever moves a held
// amount, the deposit and the capture each happen once (fabric messages
// are delivered once per message id), and a failed saga releases.
//
// A client creates the worlds, then talks to them through a plane.Client
// (a node.Node has one):
//
//	st.CreateWorld(ctx, ledger.UniverseAccount, "alice", nil)
//	st.CreateWorld(ctx, ledger.UniverseAccount, "bob", nil)
//	c := n.Client()
//	c.Send(ctx, "alice", ledger.Open{Owner: "Alice", AuditURL: "https://audit.example/"}, "open-alice")
//	c.Send(ctx, "alice", ledger.Deposit{Amount: 500, Ref: "salary"}, "dep-1")
//	st.CreateWorld(ctx, ledger.UniverseTransfer, "t-1", nil)
//	c.Send(ctx, "t-1", ledger.Start{From: "alice", To: "bob", Amount: 200, TimeoutMs: 10_000}, "start")
//	tr, err := plane.CallAs[ledger.Transfer](ctx, c, "t-1", ledger.Status{}) // pending, held, completed or failed
//	bal, err := plane.CallAs[int64](ctx, c, "bob", ledger.Balance{})
//
// What it never does: I/O, reading a clock, or anything but what a world's
// handler may do (state, effects, timers, fabric sends, replies, logs).
package ledger
