package lab

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// CrashPackSchemaVersion is the version of the crash pack format written by
// this package. ReadCrashPack accepts only this version.
const CrashPackSchemaVersion = 1

// CrashPack is the self-contained record of one failing lab run: enough to
// re-run it (seed and config), to check that the re-run is the same run
// (fingerprint), and to triage it without re-running (failure, supervision
// log, trace, minimised prefix).
//
// A pack holds no wall-clock value, host name or absolute path: two runs of
// the same failing seed in one binary write byte-identical packs. Only
// go_version and build depend on the binary, and neither enters the
// fingerprint or the config hash.
type CrashPack struct {
	SchemaVersion int    `json:"schema_version"`
	Scenario      string `json:"scenario"`
	Seed          uint64 `json:"seed"`
	// Fingerprint is the trace fingerprint (Fingerprint of Trace).
	Fingerprint string      `json:"fingerprint"`
	Failure     PackFailure `json:"failure"`
	Config      PackConfig  `json:"config"`
	// ConfigHash is the hex SHA-256 of Config's canonical (compact) JSON.
	ConfigHash string     `json:"config_hash"`
	Replay     ReplayInfo `json:"replay"`
	GoVersion  string     `json:"go_version"`
	Build      BuildInfo  `json:"build"`
	// SupervisionLog is the supervision decisions of the run, in order
	// (Result.SupervisionLog).
	SupervisionLog []Event `json:"supervision_log"`
	// TraceLen is len(Trace).
	TraceLen int `json:"trace_len"`
	// MinimizedPrefixLen is the length of the shortest prefix of Trace that
	// still exhibits the failure (see MinimizePrefix): Trace[:MinimizedPrefixLen]
	// is the minimised reproducer. It equals TraceLen when the failure
	// cannot be checked on a trace prefix.
	MinimizedPrefixLen int `json:"minimized_prefix_len"`
	// Minimization says how the prefix was found and which failure it
	// exhibits.
	Minimization PackMinimization `json:"minimization"`
	// Trace is the whole canonical trace of the run.
	Trace []Event `json:"trace"`
}

// PackFailure is a Failure as stored in a pack.
type PackFailure struct {
	Oracle  string `json:"oracle"`
	Message string `json:"message"`
	// Event is the trace index at which the failure was detected, or -1
	// when it was detected at the end of the run.
	Event int `json:"event"`
}

// PackMinimization records how MinimizedPrefixLen was found.
type PackMinimization struct {
	// Method is MinimizeExact, MinimizeOracle or MinimizeNone.
	Method string `json:"method"`
	// Failure is the failure the minimised prefix exhibits (absent for
	// MinimizeNone).
	Failure *PackFailure `json:"failure,omitempty"`
}

// PackConfig is the run configuration as stored in a pack (Config without
// its Name, which is the pack's Scenario).
type PackConfig struct {
	Seed           uint64     `json:"seed"`
	Faults         PackFaults `json:"faults"`
	MaxSteps       int        `json:"max_steps"`
	CloseTimeoutNS int64      `json:"close_timeout_ns"`
}

// PackFaults is the fault option set as stored in a pack.
type PackFaults struct {
	Crash        float64 `json:"crash"`
	MailboxFull  float64 `json:"mailbox_full"`
	DelayWakeups float64 `json:"delay_wakeups"`
	Buggify      float64 `json:"buggify"`
}

// BuildInfo identifies the binary that wrote a pack
// (runtime/debug.ReadBuildInfo). It differs between binaries, so it is
// never part of the fingerprint or the config hash. Fields the binary does
// not carry (test binaries have no VCS stamp) are left out.
type BuildInfo struct {
	// Path is the main package path (for a test binary, "<pkg>.test").
	Path        string `json:"path,omitempty"`
	MainModule  string `json:"main_module,omitempty"`
	MainVersion string `json:"main_version,omitempty"`
	VCSRevision string `json:"vcs_revision,omitempty"`
	// VCSModified is "true" or "false" when stamped.
	VCSModified string `json:"vcs_modified,omitempty"`
}

// ReplayInfo says how to reproduce a pack's failure.
type ReplayInfo struct {
	// Command is one shell command that re-runs the failing seed, e.g.
	// ORRERY_SEED=7 go test ./lab -run '^TestBank$' -count=1
	Command string `json:"command"`
	// Env is the environment Command sets (ORRERY_SEED at least).
	Env map[string]string `json:"env,omitempty"`
	// Package and Test are the go test package pattern and test name, when
	// known.
	Package string `json:"package,omitempty"`
	Test    string `json:"test,omitempty"`
}

// ReplayCommand returns the command that re-runs test (a name as
// testing.T.Name reports it, subtests included) in pkg (a go test package
// pattern such as ./lab) under seed.
func ReplayCommand(pkg, test string, seed uint64) string {
	return fmt.Sprintf("ORRERY_SEED=%d go test %s -run '%s' -count=1", seed, pkg, RunPattern(test))
}

// RunPattern returns the -run pattern that selects exactly test: each
// slash-separated level quoted and anchored.
func RunPattern(test string) string {
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// ---- errors ----

// ErrMalformed is matched (errors.Is) by every error reporting a crash
// pack or trace file that cannot be decoded or is inconsistent.
const ErrMalformed sentinel = "lab: malformed crash pack or trace file"

// MalformedError reports a malformed crash pack or trace file: which file,
// which field (empty when the JSON itself is invalid), and why. It matches
// ErrMalformed, and unwraps to the cause (for instance a
// *FingerprintMismatchError when the trace does not hash to the recorded
// fingerprint).
type MalformedError struct {
	Path  string
	Field string
	Err   error
}

func (e *MalformedError) Error() string {
	var b strings.Builder
	b.WriteString("lab: malformed ")
	if e.Path != "" {
		b.WriteString(e.Path)
	} else {
		b.WriteString("input")
	}
	if e.Field != "" {
		b.WriteString(": field " + e.Field)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

func (e *MalformedError) Unwrap() error { return e.Err }

// Is makes every MalformedError match ErrMalformed.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// ---- building ----

// NewCrashPack builds the crash pack of a failed run, minimising the
// failing prefix with MinimizePrefix (oracles are the extra trace oracles
// the run was checked with, if any). It returns nil for a passing run.
// When replay has no Env, ORRERY_SEED is set; when it has no Command and
// names a Package and a Test, Command is ReplayCommand's.
func NewCrashPack(res *Result, replay ReplayInfo, oracles ...TraceOracle) *CrashPack {
	if res == nil || res.Failure == nil {
		return nil
	}
	return newCrashPack(res, replay, MinimizePrefix(res.Events, res.Failure, oracles...))
}

func newCrashPack(res *Result, replay ReplayInfo, m Minimization) *CrashPack {
	events := res.Events
	if events == nil {
		events = []Event{}
	}
	cfg := packConfig(res.Config)
	p := &CrashPack{
		SchemaVersion:      CrashPackSchemaVersion,
		Scenario:           res.Config.Name,
		Seed:               res.Config.Seed,
		Fingerprint:        Fingerprint(events),
		Failure:            packFailure(res.Failure),
		Config:             cfg,
		ConfigHash:         cfg.Hash(),
		Replay:             fillReplay(replay, res.Config.Seed),
		GoVersion:          runtime.Version(),
		Build:              readBuildInfo(),
		SupervisionLog:     supervisionLog(events),
		TraceLen:           len(events),
		MinimizedPrefixLen: m.PrefixLen,
		Minimization:       PackMinimization{Method: m.Method},
		Trace:              events,
	}
	if m.Failure != nil {
		f := packFailure(m.Failure)
		p.Minimization.Failure = &f
	}
	return p
}

func fillReplay(r ReplayInfo, seed uint64) ReplayInfo {
	env := make(map[string]string, len(r.Env)+1)
	for k, v := range r.Env {
		env[k] = v
	}
	if _, ok := env["ORRERY_SEED"]; !ok {
		env["ORRERY_SEED"] = strconv.FormatUint(seed, 10)
	}
	r.Env = env
	if r.Command == "" && r.Package != "" && r.Test != "" {
		r.Command = ReplayCommand(r.Package, r.Test, seed)
	}
	return r
}

func packConfig(c Config) PackConfig {
	return PackConfig{
		Seed:           c.Seed,
		Faults:         PackFaults{Crash: c.Faults.Crash, MailboxFull: c.Faults.MailboxFull, DelayWakeups: c.Faults.DelayWakeups, Buggify: c.Faults.Buggify},
		MaxSteps:       c.MaxSteps,
		CloseTimeoutNS: c.CloseTimeout.Nanoseconds(),
	}
}

// Hash is the hex SHA-256 of the config's canonical JSON (compact, fields
// in declaration order).
func (c PackConfig) Hash() string {
	data, _ := json.Marshal(c) // cannot fail: plain numbers (validated finite)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// stackStart matches where runtime/debug.Stack output begins inside a
// failure message ("goroutine 123 [running]:").
var stackStart = regexp.MustCompile(`(?m)^goroutine \d+ \[`)

// canonicalMessage drops a goroutine stack from a failure message: its
// goroutine ids and addresses differ between two runs of one seed, and a
// pack must not.
func canonicalMessage(msg string) string {
	if loc := stackStart.FindStringIndex(msg); loc != nil {
		msg = strings.TrimRight(msg[:loc[0]], "\n") + "\n[goroutine stack omitted]"
	}
	return msg
}

func packFailure(f *Failure) PackFailure {
	return PackFailure{Oracle: f.Oracle, Message: canonicalMessage(f.Message), Event: f.Event}
}

func supervisionLog(events []Event) []Event {
	out := []Event{}
	for _, ev := range events {
		if ev.Kind == "supervision" {
			out = append(out, ev)
		}
	}
	return out
}

func readBuildInfo() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return BuildInfo{}
	}
	b := BuildInfo{Path: bi.Path, MainModule: bi.Main.Path, MainVersion: bi.Main.Version}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.VCSRevision = s.Value
		case "vcs.modified":
			b.VCSModified = s.Value
		}
	}
	return b
}

// RunConfig returns the Config that re-runs the pack's failing run.
func (p *CrashPack) RunConfig() Config {
	return Config{
		Seed: p.Config.Seed,
		Faults: Faults{Crash: p.Config.Faults.Crash, MailboxFull: p.Config.Faults.MailboxFull,
			DelayWakeups: p.Config.Faults.DelayWakeups, Buggify: p.Config.Faults.Buggify},
		MaxSteps:     p.Config.MaxSteps,
		CloseTimeout: time.Duration(p.Config.CloseTimeoutNS),
		Name:         p.Scenario,
	}
}

// MinimizedPrefix returns the minimised failing prefix of the trace.
func (p *CrashPack) MinimizedPrefix() []Event { return p.Trace[:p.MinimizedPrefixLen] }

// Verify checks that the trace hashes to the recorded fingerprint.
func (p *CrashPack) Verify() error { return Verify(p.Trace, p.Fingerprint) }

// FileName is the pack's file name: crashpack-<seed>-<fingerprint[:16]>.json.
func (p *CrashPack) FileName() string {
	fp := p.Fingerprint
	if len(fp) > 16 {
		fp = fp[:16]
	}
	return fmt.Sprintf("crashpack-%d-%s.json", p.Seed, fp)
}

// Encode returns the pack as indented JSON with a trailing newline. Field
// order is fixed, so equal packs encode to equal bytes.
func (p *CrashPack) Encode() ([]byte, error) {
	q := *p
	if q.SupervisionLog == nil {
		q.SupervisionLog = []Event{}
	}
	if q.Trace == nil {
		q.Trace = []Event{}
	}
	data, err := json.MarshalIndent(&q, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// WriteCrashPack writes the crash pack of res into dir (created if needed)
// as crashpack-<seed>-<fingerprint[:16]>.json and returns its path. A
// passing run writes nothing and returns "", nil. See NewCrashPack for
// replay and oracles.
func WriteCrashPack(dir string, res *Result, replay ReplayInfo, oracles ...TraceOracle) (string, error) {
	p := NewCrashPack(res, replay, oracles...)
	if p == nil {
		return "", nil
	}
	return p.Write(dir)
}

// Write writes the pack into dir (created if needed) under FileName, and
// returns its path. The file is replaced atomically.
func (p *CrashPack) Write(dir string) (string, error) {
	data, err := p.Encode()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, p.FileName())
	if err := writeFileAtomic(path, data); err != nil {
		return "", err
	}
	return path, nil
}

func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// ---- reading ----

// ReadCrashPack reads and validates the crash pack at path. A pack that is
// not valid JSON, has unknown fields or an unsupported schema version, or
// is inconsistent (config hash, trace length, supervision log, failure
// index, fingerprint) yields a *MalformedError matching ErrMalformed.
func ReadCrashPack(path string) (*CrashPack, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := DecodeCrashPack(data)
	if err != nil {
		var me *MalformedError
		if errors.As(err, &me) {
			me.Path = path
		}
		return nil, err
	}
	return p, nil
}

// DecodeCrashPack decodes and validates a crash pack (see ReadCrashPack).
// Every error it returns is a *MalformedError.
func DecodeCrashPack(data []byte) (*CrashPack, error) {
	bad := func(field string, format string, args ...any) error {
		return &MalformedError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p CrashPack
	if err := dec.Decode(&p); err != nil {
		return nil, &MalformedError{Err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("", "trailing data after the pack")
	}
	if p.SchemaVersion != CrashPackSchemaVersion {
		return nil, bad("schema_version", "unsupported crash pack version %d (this build reads %d)", p.SchemaVersion, CrashPackSchemaVersion)
	}
	if !isHex64(p.Fingerprint) {
		return nil, bad("fingerprint", "want 64 lowercase hex digits, got %q", p.Fingerprint)
	}
	if p.Failure.Oracle == "" {
		return nil, bad("failure.oracle", "missing")
	}
	if p.Config.Seed != p.Seed {
		return nil, bad("config.seed", "%d differs from seed %d", p.Config.Seed, p.Seed)
	}
	if p.Config.MaxSteps <= 0 {
		return nil, bad("config.max_steps", "must be positive, got %d", p.Config.MaxSteps)
	}
	if p.Config.CloseTimeoutNS <= 0 {
		return nil, bad("config.close_timeout_ns", "must be positive, got %d", p.Config.CloseTimeoutNS)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"crash", p.Config.Faults.Crash}, {"mailbox_full", p.Config.Faults.MailboxFull}, {"delay_wakeups", p.Config.Faults.DelayWakeups}, {"buggify", p.Config.Faults.Buggify}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			return nil, bad("config.faults."+f.name, "probability %v outside [0, 1]", f.v)
		}
	}
	if h := p.Config.Hash(); p.ConfigHash != h {
		return nil, bad("config_hash", "recorded %q, config hashes to %s", p.ConfigHash, h)
	}
	if p.Trace == nil {
		return nil, bad("trace", "missing")
	}
	if p.SupervisionLog == nil {
		return nil, bad("supervision_log", "missing")
	}
	if p.TraceLen != len(p.Trace) {
		return nil, bad("trace_len", "%d, but the trace has %d events", p.TraceLen, len(p.Trace))
	}
	if p.MinimizedPrefixLen < 0 || p.MinimizedPrefixLen > p.TraceLen {
		return nil, bad("minimized_prefix_len", "%d outside [0, %d]", p.MinimizedPrefixLen, p.TraceLen)
	}
	switch p.Minimization.Method {
	case MinimizeExact, MinimizeOracle:
		if p.Minimization.Failure == nil {
			return nil, bad("minimization.failure", "missing for method %s", p.Minimization.Method)
		}
		if e := p.Minimization.Failure.Event; e < 0 || e >= p.MinimizedPrefixLen {
			return nil, bad("minimization.failure.event", "%d outside the minimised prefix [0, %d)", e, p.MinimizedPrefixLen)
		}
	case MinimizeNone:
		if p.MinimizedPrefixLen != p.TraceLen {
			return nil, bad("minimized_prefix_len", "%d, but method none keeps the whole trace (%d)", p.MinimizedPrefixLen, p.TraceLen)
		}
	default:
		return nil, bad("minimization.method", "unknown method %q", p.Minimization.Method)
	}
	if p.Failure.Event < -1 || p.Failure.Event >= p.TraceLen {
		return nil, bad("failure.event", "%d outside [-1, %d)", p.Failure.Event, p.TraceLen)
	}
	sup := supervisionLog(p.Trace)
	if len(sup) != len(p.SupervisionLog) {
		return nil, bad("supervision_log", "%d entries, but the trace has %d supervision events", len(p.SupervisionLog), len(sup))
	}
	for i := range sup {
		if sup[i] != p.SupervisionLog[i] {
			return nil, bad("supervision_log", "entry %d differs from the trace's supervision event", i)
		}
	}
	if err := p.Verify(); err != nil {
		return nil, &MalformedError{Field: "fingerprint", Err: err}
	}
	return &p, nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
