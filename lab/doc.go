// Package lab is Orrery's deterministic laboratory: it runs actor code under
// a seeded scheduler and a virtual clock, records a canonical trace, checks
// it against oracles, and turns every failure into a crash pack that
// reproduces it.
//
// # What the lab owns
//
//   - The deterministic executor (Executor), the implementation of the actor
//     layer's executor seam: one lab thread runs at a time, the next one is
//     picked by a PRNG seeded from the run's seed, virtual time jumps to the
//     next timer when nothing is runnable, and faults (Faults, BUGGIFY) are
//     drawn from their own seeded stream. The same seed gives the same
//     schedule, the same trace and the same fingerprint, byte for byte
//     (the OTP contract INV-8).
//   - Runs (Run, RunChecked): a Scenario on a fresh actor.System, then the
//     system's close, then the oracles. The trace ([]Event) holds virtual
//     times and spawn-order process ids only, never a wall-clock value or an
//     address; Fingerprint is the SHA-256 of its canonical encoding.
//   - Oracles (CheckOracles, plus scenario-specific TraceOracles such as
//     NoFailedExits): reply obligations never dropped, scopes quiescent when
//     closed, permits and leases released, mailboxes FIFO, outcomes monotone.
//     They read only the trace, so a recorded trace can be re-checked offline
//     and on any of its prefixes.
//   - Triage artifacts: crash packs (CrashPack, WriteCrashPack,
//     ReadCrashPack), trace files (WriteTraceFile, LoadTrace), trace summaries
//     and checks (Info, Verify, Diff), replay with first-divergence reports
//     (Replay, Reproduce), prefix minimisation (MinimizePrefix) and seed
//     exploration (Explore, and Check for tests).
//
// # What the lab never does
//
// It never reads the wall clock, sleeps, or uses an unseeded random source
// on behalf of code under test; it never lets Go map order or goroutine
// timing decide anything observable; it keeps no package-level state, so
// runs are independent and may proceed in parallel tests. It does not make
// code deterministic that bypasses the seam: a goroutine started with a bare
// go statement, a raw channel, a standard-library timer or time.Now inside a
// scenario is invisible to the scheduler (the watchdog reports a thread
// blocked outside the seam instead of hanging). Crash packs hold no
// timestamps, host names or absolute paths; only their go_version and build
// fields depend on the binary, and neither enters the fingerprint or the
// config hash.
//
// # Exploring from a test
//
// A test explores a scenario over seeds with Check:
//
//	func TestBank(t *testing.T) {
//		lab.Check(t, "bank", bankScenario, lab.WithSeeds(50), lab.WithOracles(lab.NoFailedExits))
//	}
//
// ORRERY_SEED=<seed> runs that one seed; ORRERY_SEEDS=N runs seeds 0 … N-1
// and ORRERY_SEEDS=A-B runs A … B (ORRERY_SEED wins). The first failing
// seed fails the test with the oracle, the seed, the fingerprint, the
// minimised prefix length, the crash pack's path and the command that
// replays it. Packs are written to
// $ORRERY_TEST_ARTIFACTS_DIR/<safe test name>/crashpack-<seed>-<fingerprint[:16]>.json;
// the directory defaults to target/test-artifacts, and a relative one is
// resolved against the module root (the nearest ancestor of the test's
// working directory holding a go.mod). Tests that fail on purpose pass
// WithArtifactsDir(t.TempDir()).
//
// # Triage workflow
//
// The crash pack is the source of truth; start from it, not from logs.
//
//  1. Read the fingerprint first, then the seed and config:
//
//     jq '{scenario,seed,fingerprint,failure,config_hash,replay}' PACK
//
//     The failure names the oracle and the trace index at which it was
//     detected; supervision_log is the ledger of restart and stop decisions.
//
//  2. Re-run exactly, with the same seed:
//
//     ORRERY_SEED=<seed> go test ./<pkg> -run '^<Test>$' -count=1
//
//     (the pack's replay.command). In Go, Reproduce(pack, scenario) does the
//     same and checks that the re-run has the same trace, hence the same
//     fingerprint, and the same oracle at the same event.
//
//  3. Verify the trace and find where runs part: Verify recomputes the
//     fingerprint; Replay re-runs a scenario under a recorded seed and
//     reports the first divergent event side by side with the recorded one
//     (and the events just before); Diff does the same for two recorded
//     traces. A divergence under the same seed means the code changed, or
//     something escaped the seam.
//
//  4. Minimise: trace[:minimized_prefix_len] is the shortest prefix that
//     still fails. MinimizePrefix binary-searches the prefix length for the
//     shortest prefix on which CheckTrace, reading the prefix as a complete
//     run, reports the same oracle at the same event; failures only
//     re-execution can check (a scenario's own error, a deadlock, the step
//     budget) keep the whole trace, so express such properties as a
//     TraceOracle to have them minimised.
//
// A future `orrery lab replay PACK` and `orrery lab trace info|verify|diff`
// are thin wrappers over ReadCrashPack, Reproduce, LoadTrace, Info, Verify
// and Diff.
package lab
