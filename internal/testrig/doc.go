// Package testrig is the one test rig of the layers above the store: the
// tests of plane, api, workflow and web build their stores, executors and
// nodes here instead of each writing its own.
//
// It owns:
//   - the backends every integration test runs on (memstore under the lab,
//     SQLite in a temporary file, PostgreSQL in a fresh schema when
//     ORRERY_TEST_POSTGRES_DSN is set), each with a clock the test moves
//     (Open, Clock), and per-process handles with a fault hook and a crash
//     (Handle);
//   - Rig: one test's store and executor on one backend (RunOn,
//     ForEachBackend), with the bounded wait on a condition (Rig.WaitFor);
//   - Node: hosts, an orchestrator, a plane client and the ops API served
//     by an httptest server, over one store (NewNode; Serve serves any
//     handler with an api.Client on it);
//   - the waits and runs the tests share: WaitFor on the goroutine's clock
//     (the machine's or a synctest bubble's), WaitLab and Lab under the
//     lab; and seedings more than one layer reads (CompactedWorld).
//
// It is test support: only _test.go files import it, never the code they
// test. Nothing here waits for time to pass as a test's verdict: under
// the lab, time is virtual; on a real store a test moves the store's clock
// (Clock.Advance, Rig.Advance) and waits on conditions, with bounds that
// are hang guards only.
package testrig
