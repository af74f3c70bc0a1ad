package lab

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// SeedRange is a run of consecutive seeds: First, First+1, …, First+Count-1.
type SeedRange struct {
	First, Count uint64
}

// Last returns the range's last seed (First for an empty range).
func (r SeedRange) Last() uint64 {
	if r.Count == 0 {
		return r.First
	}
	return r.First + r.Count - 1
}

// String renders the range as ParseSeeds reads it: "A-B", or "A" for one
// seed.
func (r SeedRange) String() string {
	if r.Count == 1 {
		return strconv.FormatUint(r.First, 10)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last())
}

// ErrBadSeeds is matched by the errors of ParseSeeds.
const ErrBadSeeds sentinel = "lab: bad seed specification"

// ParseSeeds parses a seed specification (ORRERY_SEEDS): a count "N" (the
// seeds 0 … N-1) or an inclusive range "A-B".
func ParseSeeds(s string) (SeedRange, error) {
	s = strings.TrimSpace(s)
	if a, b, ok := strings.Cut(s, "-"); ok {
		first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 64)
		last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 64)
		if err1 != nil || err2 != nil || last < first || first == 0 && last == math.MaxUint64 {
			return SeedRange{}, fmt.Errorf("%w: %q (want N or A-B with A <= B)", ErrBadSeeds, s)
		}
		return SeedRange{First: first, Count: last - first + 1}, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return SeedRange{}, fmt.Errorf("%w: %q (want N > 0 or A-B)", ErrBadSeeds, s)
	}
	return SeedRange{Count: n}, nil
}

// ExploreOptions configures Explore.
type ExploreOptions struct {
	// Name names the scenario (Config.Name, the pack's scenario).
	Name string
	// Seeds is the seeds to run, in order. A zero Count means DefaultSeeds
	// seeds from First. A range running past the largest uint64 is cut
	// there.
	Seeds SeedRange
	// FaultsFromSeed draws each run's faults with FaultsFromSeed(seed);
	// otherwise every run uses Faults.
	FaultsFromSeed bool
	Faults         Faults
	// MaxSteps and CloseTimeout are passed to every run (zero: Run's
	// defaults).
	MaxSteps     int
	CloseTimeout time.Duration
	// Oracles are checked on every passing run's trace, beyond
	// CheckOracles.
	Oracles []TraceOracle
	// ArtifactsDir is where the crash pack of a failure is written; empty
	// writes none.
	ArtifactsDir string
	// Replay says how to reproduce a failing seed (for the pack); nil leaves
	// only ORRERY_SEED in the pack's replay env.
	Replay func(seed uint64) ReplayInfo
}

// DefaultSeeds is the number of seeds Explore and Check run by default.
const DefaultSeeds = 50

// Config returns the run configuration Explore uses for seed.
func (o ExploreOptions) Config(seed uint64) Config {
	cfg := Config{Seed: seed, Faults: o.Faults, MaxSteps: o.MaxSteps, CloseTimeout: o.CloseTimeout, Name: o.Name}
	if o.FaultsFromSeed {
		cfg.Faults = FaultsFromSeed(seed)
	}
	return cfg
}

// Exploration is what Explore found.
type Exploration struct {
	// Seeds is the range explored (up to the failing seed, if any).
	Seeds SeedRange
	// Runs is the number of runs made.
	Runs int
	// Fingerprints is the number of distinct trace fingerprints among the
	// runs: how many different schedules the seeds exercised.
	Fingerprints int
	// Failure is nil when every seed passed. Otherwise Seed is the first
	// failing seed and Result its run.
	Failure *Failure
	Seed    uint64
	Result  *Result
	// Minimization is the failing trace's minimised prefix.
	Minimization Minimization
	// Pack is the crash pack of the failure; PackPath is where it was
	// written ("" when ArtifactsDir is empty or writing failed, in which
	// case PackErr says why).
	Pack     *CrashPack
	PackPath string
	PackErr  error
}

// Failed reports whether some seed failed.
func (x *Exploration) Failed() bool { return x.Failure != nil }

// Explore runs scenario once per seed of opts.Seeds, in order, and stops at
// the first failing run (a built-in oracle, an extra oracle of
// opts.Oracles, or Run's own checks). For a failure it minimises the
// failing prefix, builds the crash pack and writes it into
// opts.ArtifactsDir.
func Explore(opts ExploreOptions, scenario Scenario) *Exploration {
	if opts.Seeds.Count == 0 {
		opts.Seeds.Count = DefaultSeeds
	}
	if room := math.MaxUint64 - opts.Seeds.First; opts.Seeds.Count-1 > room {
		opts.Seeds.Count = room + 1
	}
	x := &Exploration{Seeds: opts.Seeds}
	fps := map[string]bool{}
	for i := uint64(0); i < opts.Seeds.Count; i++ {
		seed := opts.Seeds.First + i
		res := RunChecked(opts.Config(seed), scenario, opts.Oracles...)
		x.Runs++
		fps[res.Fingerprint] = true
		if res.Failure == nil {
			continue
		}
		x.Seeds.Count = i + 1
		x.Failure, x.Seed, x.Result = res.Failure, seed, res
		var replay ReplayInfo
		if opts.Replay != nil {
			replay = opts.Replay(seed)
		}
		x.Minimization = MinimizePrefix(res.Events, res.Failure, opts.Oracles...)
		x.Pack = newCrashPack(res, replay, x.Minimization)
		if opts.ArtifactsDir != "" {
			x.PackPath, x.PackErr = x.Pack.Write(opts.ArtifactsDir)
		}
		break
	}
	x.Fingerprints = len(fps)
	return x
}

// ReproduceError reports that a re-run did not reproduce a pack's failure.
type ReproduceError struct {
	// Divergence is the first divergence of the re-run's trace from the
	// pack's (nil when the traces are equal).
	Divergence *Divergence
	// Want is the pack's failure; Got the re-run's (nil if it passed).
	Want PackFailure
	Got  *Failure
}

func (e *ReproduceError) Error() string {
	got := "a passing run"
	if e.Got != nil {
		got = fmt.Sprintf("%s at event %d", e.Got.Oracle, e.Got.Event)
	}
	msg := fmt.Sprintf("lab: the re-run did not reproduce %s at event %d (got %s)", e.Want.Oracle, e.Want.Event, got)
	if e.Divergence != nil {
		msg += "; " + e.Divergence.String()
	}
	return msg
}

// Reproduce re-runs scenario under the pack's seed and config (checked with
// the extra oracles the pack was made with, if any) and verifies that it
// fails the same way: the same trace (hence the same fingerprint), the same
// oracle at the same event. It returns the re-run, and a *ReproduceError
// when it differs.
func Reproduce(pack *CrashPack, scenario Scenario, oracles ...TraceOracle) (*Result, error) {
	res := RunChecked(pack.RunConfig(), scenario, oracles...)
	d := Diff(pack.Trace, res.Events)
	f := res.Failure
	if d != nil || f == nil || f.Oracle != pack.Failure.Oracle || f.Event != pack.Failure.Event {
		return res, &ReproduceError{Divergence: d, Want: pack.Failure, Got: f}
	}
	return res, nil
}
