package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExploreFindsScheduleDependentBugAndMinimises: the racy bank passes
// under some schedules and fails under others. The explorer, run over a
// seed range, stops at the first failing seed, writes its crash pack, and
// minimises the failing trace to a prefix that is shorter and still fails.
func TestExploreFindsScheduleDependentBugAndMinimises(t *testing.T) {
	// The bug depends on the schedule: count the failing seeds.
	failing := 0
	var firstFailing uint64
	for seed := uint64(0); seed < 50; seed++ {
		if RunChecked(Config{Seed: seed}, triageRacyBank, NoFailedExits).Failure != nil {
			if failing == 0 {
				firstFailing = seed
			}
			failing++
		}
	}
	if failing == 0 || failing == 50 {
		t.Fatalf("%d of 50 seeds fail: the scenario is not schedule-dependent", failing)
	}

	dir := t.TempDir()
	x := Explore(ExploreOptions{
		Name: "racy-bank", Seeds: SeedRange{First: 0, Count: 50}, Oracles: []TraceOracle{NoFailedExits}, ArtifactsDir: dir,
		Replay: func(uint64) ReplayInfo { return ReplayInfo{Package: "./lab", Test: t.Name()} },
	}, triageRacyBank)
	if !x.Failed() || x.Seed != firstFailing || x.Runs != int(firstFailing)+1 || x.Seeds != (SeedRange{First: 0, Count: firstFailing + 1}) {
		t.Fatalf("explorer: failed=%v seed=%d runs=%d seeds=%v; want seed %d", x.Failed(), x.Seed, x.Runs, x.Seeds, firstFailing)
	}
	if x.Failure.Oracle != OracleFailedExit || !strings.Contains(x.Failure.Message, "insufficient funds") {
		t.Fatalf("failure %v", x.Failure)
	}
	pack, err := ReadCrashPack(x.PackPath)
	if err != nil {
		t.Fatal(err)
	}
	full, min := pack.TraceLen, pack.MinimizedPrefixLen
	if min >= full || min != x.Minimization.PrefixLen {
		t.Fatalf("minimised prefix %d of %d (exploration says %d)", min, full, x.Minimization.PrefixLen)
	}
	// The prefix still fails, the same way; one event less does not.
	if f := CheckTrace(pack.MinimizedPrefix(), NoFailedExits); f == nil || f.Oracle != pack.Failure.Oracle || f.Event != pack.Failure.Event {
		t.Fatalf("the minimised prefix reports %v", f)
	}
	if f := CheckTrace(pack.Trace[:min-1], NoFailedExits); f != nil {
		t.Fatalf("a shorter prefix still fails: %v", f)
	}
	// The pack reproduces the failure from its seed and config.
	if _, err := Reproduce(pack, triageRacyBank, NoFailedExits); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of 50 seeds fail; explorer: %d runs, %d distinct fingerprints, first failing seed %d: %s",
		failing, x.Runs, x.Fingerprints, x.Seed, x.Failure)
	t.Logf("minimised: %d events -> %d (%s, %d prefix checks); pack %s", full, min, x.Minimization.Method, x.Minimization.Checks, filepath.Base(x.PackPath))
}

func TestExploreFaultsFromSeedGoIntoThePack(t *testing.T) {
	x := Explore(ExploreOptions{Name: "restarted-panic", Seeds: SeedRange{First: 100, Count: 3}, FaultsFromSeed: true, ArtifactsDir: t.TempDir()}, triageRestartedPanic)
	if !x.Failed() || x.Seed != 100 {
		t.Fatalf("%+v", x)
	}
	if got, want := x.Pack.RunConfig().Faults, FaultsFromSeed(100); got != want {
		t.Fatalf("pack faults %v, want %v", got, want)
	}
	if x.Result.Config.Faults != FaultsFromSeed(100) {
		t.Fatalf("run faults %v", x.Result.Config.Faults)
	}
}

// TestMinimizePrefixUnreleasedPermitWaitsForEarlierRelease: end-of-run
// oracles apply at a prefix's end, so a prefix that stops while an earlier
// permit is still held reports that permit instead; the minimal prefix is
// the one past its release.
func TestMinimizePrefixUnreleasedPermitWaitsForEarlierRelease(t *testing.T) {
	events := []Event{
		{Kind: "permit", PID: 2, Seq: 3, Detail: "reserve"}, // released at 3
		{Kind: "permit", PID: 2, Seq: 4, Detail: "reserve"}, // never released
		{Kind: "send", PID: 2, Seq: 1},
		{Kind: "permit", PID: 2, Seq: 3, Detail: "commit"},
		{Kind: "handle", PID: 2, Seq: 1},
		{Kind: "handled", PID: 2, Seq: 1},
		{Kind: "scope-closed", Detail: "root"},
	}
	f := CheckOracles(events)
	if f == nil || f.Oracle != OracleUnreleasedPermit || f.Event != 1 {
		t.Fatalf("full trace: %v", f)
	}
	m := MinimizePrefix(events, f)
	if m.PrefixLen != 4 || m.Method != MinimizeExact || m.Failure.Event != 1 {
		t.Fatalf("minimised to %d by %s (%v), want 4 (exact)", m.PrefixLen, m.Method, m.Failure)
	}
}

// TestMinimizePrefixForEndOfRunFailures: a failure Run detects at the end
// (here a quiescence failure of the system close, event -1 or the last)
// is minimised to the earliest event showing the same oracle; failures a
// trace cannot show (a scenario's own error) are not minimised.
func TestMinimizePrefixForEndOfRunFailures(t *testing.T) {
	events := []Event{
		{Kind: "spawn", PID: 2},
		{Kind: "scope-closed", Seq: 1, Detail: "jobs"},
		{Kind: "timer-set", Seq: 1},
		{Kind: "timer-fire", Seq: 1},
		{Kind: "scope-closed", Seq: 1, Detail: "root"},
	}
	m := MinimizePrefix(events, &Failure{Oracle: OracleQuiescence, Message: "system close: not quiescent", Event: len(events) - 1})
	if m.Method != MinimizeOracle || m.PrefixLen != 2 || m.Failure.Event != 1 {
		t.Fatalf("end-of-run quiescence: %d by %s (%v)", m.PrefixLen, m.Method, m.Failure)
	}
	m = MinimizePrefix(events, &Failure{Oracle: "scenario", Message: "boom", Event: len(events) - 1})
	if m.Method != MinimizeNone || m.PrefixLen != len(events) || m.Failure != nil {
		t.Fatalf("scenario failure: %+v", m)
	}

	// End to end: a scenario error is packed with the whole trace.
	x := Explore(ExploreOptions{Name: "scenario-error", Seeds: SeedRange{Count: 1}}, func(env *Env) error {
		return errors.New("the scenario's own check failed")
	})
	if !x.Failed() || x.Failure.Oracle != "scenario" || x.Pack.Minimization.Method != MinimizeNone || x.Pack.MinimizedPrefixLen != x.Pack.TraceLen {
		t.Fatalf("scenario error: %+v", x.Pack)
	}
}

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string]SeedRange{
		"50":     {First: 0, Count: 50},
		"1":      {First: 0, Count: 1},
		"10-19":  {First: 10, Count: 10},
		" 7-7 ":  {First: 7, Count: 1},
		"0-0":    {First: 0, Count: 1},
		"3 - 5 ": {First: 3, Count: 3},
	} {
		got, err := ParseSeeds(in)
		if err != nil || got != want {
			t.Errorf("ParseSeeds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "x", "5-3", "1-x", "1-2-3", "0-18446744073709551615"} {
		if _, err := ParseSeeds(in); !errors.Is(err, ErrBadSeeds) {
			t.Errorf("ParseSeeds(%q): %v, want ErrBadSeeds", in, err)
		}
	}
	if s := (SeedRange{First: 10, Count: 10}).String(); s != "10-19" {
		t.Errorf("String = %s", s)
	}
}

// triageFakeT records what Check reports instead of failing the test.
type triageFakeT struct {
	name  string
	logs  []string
	fatal string
}

func (f *triageFakeT) Helper()      {}
func (f *triageFakeT) Name() string { return f.name }
func (f *triageFakeT) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *triageFakeT) Fatalf(format string, args ...any) {
	if f.fatal == "" {
		f.fatal = fmt.Sprintf(format, args...)
	}
}

func triageEnv(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestCheckReportsOracleSeedPackAndReplayCommand: a failing Check names the
// oracle and the seed, writes the crash pack under
// <artifacts>/<test>/ and prints the one command that replays it.
func TestCheckReportsOracleSeedPackAndReplayCommand(t *testing.T) {
	dir := t.TempDir()
	ft := &triageFakeT{name: "TestBankRace"}
	x := Check(ft, "racy-bank", triageRacyBank, WithOracles(NoFailedExits), WithArtifactsDir(dir), withEnv(triageEnv(nil), os.Getwd))
	if ft.fatal == "" || !x.Failed() {
		t.Fatalf("Check passed: %v", ft.logs)
	}
	cmd := fmt.Sprintf("ORRERY_SEED=%d go test ./lab -run '^TestBankRace$' -count=1", x.Seed)
	for _, want := range []string{
		"oracle " + OracleFailedExit,
		fmt.Sprintf("under seed %d", x.Seed),
		x.Result.Fingerprint,
		x.PackPath,
		cmd,
	} {
		if !strings.Contains(ft.fatal, want) {
			t.Errorf("report lacks %q:\n%s", want, ft.fatal)
		}
	}
	if filepath.Dir(x.PackPath) != filepath.Join(dir, "TestBankRace") {
		t.Errorf("pack at %s", x.PackPath)
	}
	pack, err := ReadCrashPack(x.PackPath)
	if err != nil || pack.Replay.Command != cmd {
		t.Fatalf("pack: %v %q", err, pack.Replay.Command)
	}
	t.Logf("the report:\n%s", ft.fatal)

	// Re-running with ORRERY_SEED set to the reported seed fails the same
	// way, with the same pack.
	ft2 := &triageFakeT{name: "TestBankRace"}
	y := Check(ft2, "racy-bank", triageRacyBank, WithOracles(NoFailedExits), WithArtifactsDir(dir),
		withEnv(triageEnv(map[string]string{EnvSeed: fmt.Sprint(x.Seed)}), os.Getwd))
	if !y.Failed() || y.Runs != 1 || y.Seed != x.Seed || y.PackPath != x.PackPath || y.Result.Fingerprint != x.Result.Fingerprint {
		t.Fatalf("ORRERY_SEED re-run: %+v", y)
	}
}

func TestCheckSeedsFromEnvironment(t *testing.T) {
	run := func(env map[string]string, opts ...CheckOption) (*Exploration, *triageFakeT) {
		ft := &triageFakeT{name: "TestEnv"}
		opts = append(opts, WithOracles(NoFailedExits), WithArtifactsDir(t.TempDir()), withEnv(triageEnv(env), os.Getwd))
		return Check(ft, "racy-bank", triageRacyBank, opts...), ft
	}
	// The racy bank passes seeds 2 and 3 and fails seed 1 (see the
	// explorer test); find them rather than trust it.
	var pass, fail []uint64
	for seed := uint64(0); seed < 20; seed++ {
		if RunChecked(Config{Seed: seed}, triageRacyBank, NoFailedExits).Failure == nil {
			pass = append(pass, seed)
		} else {
			fail = append(fail, seed)
		}
	}
	if len(pass) == 0 || len(fail) == 0 {
		t.Fatalf("pass %v fail %v", pass, fail)
	}
	x, ft := run(map[string]string{EnvSeed: fmt.Sprint(pass[0])})
	if x.Failed() || x.Runs != 1 || x.Seeds != (SeedRange{First: pass[0], Count: 1}) || ft.fatal != "" {
		t.Fatalf("ORRERY_SEED=%d: %+v %s", pass[0], x, ft.fatal)
	}
	x, _ = run(map[string]string{EnvSeed: fmt.Sprint(fail[0]), EnvSeeds: "1000"})
	if !x.Failed() || x.Runs != 1 || x.Seed != fail[0] {
		t.Fatalf("ORRERY_SEED wins over ORRERY_SEEDS: %+v", x)
	}
	x, _ = run(map[string]string{EnvSeeds: fmt.Sprintf("%d-%d", fail[0], fail[0]+5)})
	if !x.Failed() || x.Seed != fail[0] || x.Runs != 1 {
		t.Fatalf("ORRERY_SEEDS range: %+v", x)
	}
	x, _ = run(map[string]string{EnvSeeds: fmt.Sprint(fail[0] + 1)})
	if !x.Failed() || x.Seed != fail[0] {
		t.Fatalf("ORRERY_SEEDS count: %+v", x)
	}
	x, _ = run(nil, WithSeeds(fail[0]))
	if x.Failed() || x.Runs != int(fail[0]) {
		t.Fatalf("WithSeeds(%d) (all passing): %+v", fail[0], x)
	}
	for _, env := range []map[string]string{{EnvSeed: "x"}, {EnvSeeds: "9-1"}} {
		if _, ft := run(env); !strings.Contains(ft.fatal, "ORRERY_SEED") {
			t.Errorf("%v: %q", env, ft.fatal)
		}
	}
}

// TestCheckArtifactsDirRelativeToModuleRoot: a relative
// ORRERY_TEST_ARTIFACTS_DIR (and the default) is resolved against the
// module root, and the replay command names the package relative to it.
func TestCheckArtifactsDirRelativeToModuleRoot(t *testing.T) {
	root := t.TempDir()
	pkg := filepath.Join(root, "internal", "bank")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	getwd := func() (string, error) { return pkg, nil }
	for env, wantDir := range map[string]string{
		"arts":                     filepath.Join(root, "arts", "TestBank_case_1"),
		"":                         filepath.Join(root, "target", "test-artifacts", "TestBank_case_1"),
		filepath.Join(root, "abs"): filepath.Join(root, "abs", "TestBank_case_1"),
	} {
		ft := &triageFakeT{name: "TestBank/case 1"}
		vars := map[string]string{EnvSeed: "0"}
		if env != "" {
			vars[EnvArtifactsDir] = env
		}
		x := Check(ft, "restarted-panic", triageRestartedPanic, withEnv(triageEnv(vars), getwd))
		if !x.Failed() || filepath.Dir(x.PackPath) != wantDir {
			t.Errorf("%q: pack at %q, want under %q", env, x.PackPath, wantDir)
		}
		if want := `ORRERY_SEED=0 go test ./internal/bank -run '^TestBank$/^case 1$' -count=1`; x.Pack.Replay.Command != want {
			t.Errorf("replay %q, want %q", x.Pack.Replay.Command, want)
		}
	}
}

// TestCheckPassingScenario uses Check the way a package's tests do.
func TestCheckPassingScenario(t *testing.T) {
	start := time.Now()
	x := Check(t, "chatty", triageChatty(false), WithSeeds(20), WithArtifactsDir(t.TempDir()))
	if x.Failed() || x.Runs < 1 {
		t.Fatalf("%+v", x)
	}
	t.Logf("%d runs, %d fingerprints in %v", x.Runs, x.Fingerprints, time.Since(start))
}
