// Package archtest holds no code: its test checks the house rules on the
// shape of the module, all in one place, so that a newcomer finds every
// rule about who may import or call what next to the test that keeps it.
//
//   - Layers: each layer imports only the layers below it (the table in
//     the test, top to bottom: binaries, the orrery package, the command
//     line, examples, api, web, plane, workflow, world, store, event, lab,
//     registry, supervisor, actor, handlers), and nothing imports cmd/.
//     A new top-level package must be given its place in that table.
//   - The kernel is pure: world's whole dependency closure, not just its
//     own imports, holds nothing that can do I/O, read a clock, draw
//     ambient randomness or start a goroutine.
//   - store never reaches world, through any chain of imports.
//   - actor, supervisor and registry reach the clock, timers, randomness
//     and goroutines only through the executor seam, so the lab can make
//     them deterministic.
//
// The dependency graph comes from `go list -deps -json`, run by the test
// from the module's root; the calls are found by parsing the source with
// go/ast. Run it with `go test ./internal/archtest`.
package archtest
