// Package orrerytest is Orrery's test kit: it runs your worlds and
// workflows on a real node over an in-memory store, in virtual time, so a
// unit test sends inputs, calls, lets hours pass, crashes and restarts the
// node, fakes the services your effects reach, and checks the state, the
// journal and the effects asked for, in milliseconds and the same way
// every run.
//
// # A first test
//
//	func TestGuestbook(t *testing.T) {
//		orrerytest.Test(t, func(t *testing.T) {
//			w := orrerytest.NewWorld(t, Guestbook())
//			w.Send(Sign{Name: "Ada"})
//			if n := orrerytest.Call[int](w, Count{}); n != 1 {
//				t.Fatalf("Count = %d, want 1", n)
//			}
//			w.Send(Remind{AfterMs: 120_000, Note: "close the book"})
//			w.Advance(2 * time.Minute) // the timer fires; the test takes milliseconds
//			orrerytest.AssertState(w, Book{Names: []string{"Ada"}, Reminders: []string{"close the book"}})
//		})
//	}
//
// # Virtual time
//
// Test runs its body in a testing/synctest bubble: the clock starts at
// midnight UTC on 2000-01-01 and moves only when every goroutine of the
// test waits, straight to the next instant something is due (Epoch is
// where it starts, in Test as in a Kernel). The node's
// leases, timers, retries and the fakes' delays all wait on that clock,
// so nothing depends on the machine's speed or load. The kit refuses to
// run outside Test (it would wait in real time).
//
// # What it offers
//
//   - NewWorld starts a node running one definition and creates a world
//     of it; NewNode starts a node for several worlds (Worlds) or
//     workflows (Workflows, then Node.Runs), and Node.Create adds worlds.
//     A node of workflows alone needs no world: NewNode(t, Workflows(defs...),
//     Fakes(payments)) runs a saga with its effects faked, its timers on
//     virtual time (a two-minute wait passes in milliseconds) and
//     Node.Crash/Restart in the middle; examples/orders is such a test.
//   - World.Send enqueues an event; Call returns the handler's reply
//     decoded into your type (TryCall returns a handler's error instead,
//     and a call with no reply fails at its CallLimit of virtual time);
//     Settle waits until everything enqueued has been applied.
//   - Node.Advance lets virtual time pass: timers fire, delayed effects
//     complete, leases and claims expire, each at its instant.
//     Node.Eventually lets it pass until a condition holds (a saga's
//     end); Node.Idle says nothing is in flight.
//   - Node.Crash kills the node as kill -9 would; Node.Restart starts it
//     again on the same store, and the worlds come back from their
//     journals. Effects in flight at the crash are handled as in
//     production: they run again once their claim expires.
//   - NewFake is an adapter for your effect kinds (or http.request)
//     whose outcomes you script per kind: OK with a body, Refuse, Fail
//     (retried by its policy; for http.request, as in production, at most
//     adapter.DefaultHTTPAttempts times unless the policy says otherwise),
//     Permanent, Unknown (a timeout receipt once given up), each
//     optionally After a delay. Fake.Asked records every
//     execution with its params. Adapters registers real adapters.
//   - State decodes the world's state into its Go type; World.Journal
//     lists its records (input type and value, outcome, reply, effects
//     and timers asked for), World.Types their input types,
//     World.Effects the effects it asked for, and World.PendingTimers the
//     timers still to fire.
//   - NewKernel steps a definition directly, one input at a time, with
//     no node, store or bubble: the unit test of a handler, which answers
//     the intents a step asked for with Receipt and fires its timers with
//     Fire.
//   - Equal, AssertState and World.AssertTypes fail with a line diff;
//     World.AssertReplays checks that the live state, a restore and a
//     replay of the whole journal agree (the handlers are deterministic,
//     and a changed definition still replays the journals it wrote).
//
// Every failure names what failed, and the kit's helpers call t.Helper,
// so the failure points at your test's line.
//
// Each capability has a runnable example in example_test.go. An example
// there runs its body through a small helper, inTest, only because an
// Example function has no *testing.T; in your tests the body goes in
// orrerytest.Test as above.
//
// # What it is not
//
// The kit runs one node on memstore. The store backends' own behaviour,
// several processes, and real time are the subject of the repository's
// integration tests; the lab (package lab) explores schedules and faults
// under a seeded scheduler.
package orrerytest
