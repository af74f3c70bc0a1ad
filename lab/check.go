package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by Check.
const (
	// EnvSeed runs exactly one seed (it wins over EnvSeeds).
	EnvSeed = "ORRERY_SEED"
	// EnvSeeds is a seed count "N" (seeds 0 … N-1) or an inclusive range
	// "A-B".
	EnvSeeds = "ORRERY_SEEDS"
	// EnvArtifactsDir is where crash packs go. A relative path is resolved
	// against the module root (see DefaultArtifactsDir).
	EnvArtifactsDir = "ORRERY_TEST_ARTIFACTS_DIR"
)

// DefaultArtifactsDir is where Check writes crash packs when neither
// WithArtifactsDir nor ORRERY_TEST_ARTIFACTS_DIR says otherwise. Relative
// artifact directories are resolved against the module root: the nearest
// ancestor of the working directory (a test's package directory) that
// holds a go.mod, or the working directory itself when there is none. So
// `go test ./lab` and `cd lab && go test .` both write under
// <module>/target/test-artifacts.
const DefaultArtifactsDir = "target/test-artifacts"

// TB is the part of testing.TB that Check uses (*testing.T satisfies it).
type TB interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// CheckOption configures Check.
type CheckOption func(*checkConfig)

type checkConfig struct {
	opts         ExploreOptions
	seeds        uint64
	artifactsDir string
	lookupEnv    func(string) (string, bool)
	getwd        func() (string, error)
}

// WithSeeds sets how many seeds (0 … n-1) Check runs unless ORRERY_SEED or
// ORRERY_SEEDS says otherwise (default DefaultSeeds).
func WithSeeds(n uint64) CheckOption { return func(c *checkConfig) { c.seeds = n } }

// WithFaultsFromSeed draws each run's faults from its seed (FaultsFromSeed).
func WithFaultsFromSeed() CheckOption {
	return func(c *checkConfig) { c.opts.FaultsFromSeed = true }
}

// WithFaults sets the fault option set of every run.
func WithFaults(f Faults) CheckOption { return func(c *checkConfig) { c.opts.Faults = f } }

// WithOracles adds trace oracles checked on every run, beyond CheckOracles.
func WithOracles(o ...TraceOracle) CheckOption {
	return func(c *checkConfig) { c.opts.Oracles = append(c.opts.Oracles, o...) }
}

// WithMaxSteps sets each run's step budget.
func WithMaxSteps(n int) CheckOption { return func(c *checkConfig) { c.opts.MaxSteps = n } }

// WithCloseTimeout sets each run's (virtual) system close budget.
func WithCloseTimeout(d time.Duration) CheckOption {
	return func(c *checkConfig) { c.opts.CloseTimeout = d }
}

// WithArtifactsDir sets where crash packs go; it wins over
// ORRERY_TEST_ARTIFACTS_DIR (tests that fail on purpose pass t.TempDir()).
func WithArtifactsDir(dir string) CheckOption {
	return func(c *checkConfig) { c.artifactsDir = dir }
}

// withEnv replaces the environment lookup and working directory (tests).
func withEnv(lookup func(string) (string, bool), getwd func() (string, error)) CheckOption {
	return func(c *checkConfig) { c.lookupEnv, c.getwd = lookup, getwd }
}

// Check explores scenario over seeds from a test, and fails the test on the
// first failing seed with the oracle, the seed, the fingerprint, the crash
// pack's path and the one command that replays the failure.
//
// Seeds: ORRERY_SEED=<seed> runs that one seed; else ORRERY_SEEDS=N runs 0
// … N-1 and ORRERY_SEEDS=A-B runs A … B; else WithSeeds or DefaultSeeds.
// Crash packs go into <dir>/<safe test name>/, where dir is
// WithArtifactsDir's, else ORRERY_TEST_ARTIFACTS_DIR, else
// DefaultArtifactsDir (relative paths: see DefaultArtifactsDir). The replay
// command is `ORRERY_SEED=<seed> go test ./<pkg> -run '^<Test>$' -count=1`,
// with <pkg> the working directory relative to the module root; it
// reproduces the failure as long as the test calls Check with the same
// options (faults drawn from the seed included).
func Check(t TB, name string, scenario Scenario, opts ...CheckOption) *Exploration {
	t.Helper()
	c := &checkConfig{seeds: DefaultSeeds, lookupEnv: os.LookupEnv, getwd: os.Getwd}
	for _, o := range opts {
		o(c)
	}
	c.opts.Name = name
	c.opts.Seeds = SeedRange{Count: c.seeds}
	if v, ok := c.lookupEnv(EnvSeeds); ok && v != "" {
		r, err := ParseSeeds(v)
		if err != nil {
			t.Fatalf("lab: %s: %v", EnvSeeds, err)
			return nil
		}
		c.opts.Seeds = r
	}
	if v, ok := c.lookupEnv(EnvSeed); ok && v != "" {
		seed, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			t.Fatalf("lab: %s=%q is not a seed (want an unsigned integer)", EnvSeed, v)
			return nil
		}
		c.opts.Seeds = SeedRange{First: seed, Count: 1}
	}

	wd, err := c.getwd()
	if err != nil {
		wd = "."
	}
	root := moduleRoot(wd)
	pkg := "./" + filepath.ToSlash(relOrSelf(root, wd))
	if pkg == "./." {
		pkg = "."
	}
	dir := c.artifactsDir
	if dir == "" {
		if v, ok := c.lookupEnv(EnvArtifactsDir); ok && v != "" {
			dir = v
		} else {
			dir = DefaultArtifactsDir
		}
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	test := t.Name()
	c.opts.ArtifactsDir = filepath.Join(dir, SafeTestID(test))
	c.opts.Replay = func(seed uint64) ReplayInfo {
		return ReplayInfo{Package: pkg, Test: test}
	}

	x := Explore(c.opts, scenario)
	if !x.Failed() {
		t.Logf("lab: %s: seeds %s passed (%d runs, %d distinct fingerprints)", name, x.Seeds, x.Runs, x.Fingerprints)
		return x
	}
	pack := x.PackPath
	if x.PackErr != nil {
		pack = fmt.Sprintf("none (writing it failed: %v)", x.PackErr)
	}
	f := x.Failure
	at := "at the end of the run"
	if f.Event >= 0 {
		at = fmt.Sprintf("at event %d", f.Event)
	}
	t.Fatalf("lab: scenario %q failed under seed %d: oracle %s %s: %s\n"+
		"  seed:        %d (faults: %s)\n"+
		"  fingerprint: %s\n"+
		"  minimised:   %d of %d events (%s)\n"+
		"  crash pack:  %s\n"+
		"  replay:      %s",
		name, x.Seed, f.Oracle, at, canonicalMessage(f.Message),
		x.Seed, x.Result.Config.Faults,
		x.Result.Fingerprint,
		x.Minimization.PrefixLen, len(x.Result.Events), x.Minimization.Method,
		pack,
		x.Pack.Replay.Command)
	return x
}

// SafeTestID turns a test name into a directory name: every byte other
// than an ASCII letter or digit becomes '_'.
func SafeTestID(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// moduleRoot returns the nearest ancestor of dir (dir included) holding a
// go.mod, or dir when there is none.
func moduleRoot(dir string) string {
	dir = filepath.Clean(dir)
	for d := dir; ; {
		if fi, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && !fi.IsDir() {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}

func relOrSelf(root, dir string) string {
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return "."
	}
	return rel
}
