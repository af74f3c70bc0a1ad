// Package vocab is the one vocabulary the kernel (world/), the store
// (store/) and the plane's effect adapters (plane/adapter, and any adapter
// an application writes) speak about effects: intents, timers a step
// sets, receipts and their status, the kinds of inbox items, the queued
// effect an adapter is handed, and the claim it completes it under.
//
// It is a leaf: it imports only the standard library. So a world step's
// results go to the store as they are, an adapter's answer reaches the
// store without translation, and an application's adapter imports vocab
// and effect/ (the adapter contract, apart because it takes a context,
// which the kernel's closure must never hold) and world/ (for the params
// and bodies of the built-in kinds), never store/.
//
// What is not here: the world's own semantics (how an intent hash is
// computed, the wire form of a receipt input, the params of the built-in
// effect kinds) live in world/, and the store's operations, its dedupe
// key namespaces and its typed errors in store/.
package vocab
