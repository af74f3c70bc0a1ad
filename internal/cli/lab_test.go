package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/lab"
)

// tally is a GenServer that adds what it is called with.
type tally struct {
	actor.Base
	n int
}

func (s *tally) HandleCall(_ *actor.Proc, q int, _ actor.ReplyTo[int]) (int, error) {
	s.n += q
	return s.n, nil
}

func (s *tally) HandleCast(*actor.Proc, int) error { return nil }

// tallyScenario: three clients call one server concurrently, so the order
// of their calls is the seed's.
func tallyScenario(env *lab.Env) error {
	srv, err := actor.StartServer[int, int, int](env.Ctx, env.Root, &tally{})
	if err != nil {
		return err
	}
	var pids []actor.PID
	for c := 1; c <= 3; c++ {
		pid, err := env.Root.Go("client", func(ctx context.Context) error {
			for i := 0; i < 3; i++ {
				if _, err := srv.Call(ctx, c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		pids = append(pids, pid)
	}
	for _, p := range pids {
		if _, err := p.Wait(env.Ctx); err != nil {
			return err
		}
	}
	_, err = srv.Stop(env.Ctx)
	return err
}

var errAudit = errors.New("the audit found a discrepancy")

// failingScenario runs the tally and then fails.
func failingScenario(env *lab.Env) error {
	if err := tallyScenario(env); err != nil {
		return err
	}
	return errAudit
}

// labFiles writes the artifacts the lab commands read.
type labFiles struct {
	dir      string
	trace    *lab.Result // seed 1
	trace1   string      // seed 1's trace file
	again1   string      // seed 1 run again
	other    string      // a seed whose run differs from seed 1's
	otherRes *lab.Result
	pack     string // the failing scenario's crash pack
	packRes  *lab.Result
}

func writeLabFiles(t *testing.T) labFiles {
	t.Helper()
	dir := t.TempDir()
	lf := labFiles{dir: dir}
	run := func(seed uint64) *lab.Result {
		res := lab.Run(lab.Config{Seed: seed, Name: "tally"}, tallyScenario)
		if res.Failure != nil {
			t.Fatalf("seed %d failed: %v", seed, res.Failure)
		}
		return res
	}
	write := func(name string, res *lab.Result) string {
		p := filepath.Join(dir, name)
		if err := lab.WriteTraceFile(p, res.Events); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lf.trace = run(1)
	lf.trace1 = write("seed1.trace.json", lf.trace)
	lf.again1 = write("seed1-again.trace.json", run(1))
	for seed := uint64(2); seed < 50 && lf.other == ""; seed++ {
		if res := run(seed); res.Fingerprint != lf.trace.Fingerprint {
			lf.otherRes = res
			lf.other = write("seed"+strconv.FormatUint(seed, 10)+".trace.json", res)
		}
	}
	if lf.other == "" {
		t.Fatal("every seed gave seed 1's schedule: the scenario has no concurrency to explore")
	}

	lf.packRes = lab.Run(lab.Config{Seed: 7, Name: "failing-tally"}, failingScenario)
	if lf.packRes.Failure == nil || lf.packRes.Failure.Oracle != "scenario" {
		t.Fatalf("the failing scenario: %v", lf.packRes.Failure)
	}
	p, err := lab.WriteCrashPack(dir, lf.packRes, lab.ReplayInfo{
		// The shell command a pack's reader would run; an echo here, so
		// that --run is shown to run it with the pack's environment.
		Command: `echo "replaying seed $ORRERY_SEED"`,
		Env:     map[string]string{lab.EnvSeed: "7"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lf.pack = p
	return lf
}

// labRun runs a lab command (they need no server).
func labRun(args ...string) result {
	return runCLI(context.Background(), nil, args...)
}

func labOK(t *testing.T, args ...string) string {
	t.Helper()
	r := labRun(args...)
	if r.code != cli.ExitOK || r.err != "" {
		t.Fatalf("orrery %s: %s", strings.Join(args, " "), r)
	}
	return r.out
}

func labFail(t *testing.T, code int, args ...string) result {
	t.Helper()
	r := labRun(args...)
	checkFailure(t, r, code, args)
	return r
}

// tamper rewrites one event of a trace file (or a crash pack) so that the
// file is still well formed but no longer matches its fingerprint.
func tamper(t *testing.T, src, dst string, pack bool) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	key := "events"
	if pack {
		key = "trace"
	}
	var events []lab.Event
	if err := json.Unmarshal(doc[key], &events); err != nil {
		t.Fatal(err)
	}
	// The first event that is not a supervision decision, which a pack
	// also keeps apart (and would then be malformed, not tampered).
	i := 0
	for i < len(events) && strings.HasPrefix(events[i].Kind, "sup") {
		i++
	}
	events[i].Detail += " (edited)"
	if doc[key], err = json.Marshal(events); err != nil {
		t.Fatal(err)
	}
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLabTraceInfo(t *testing.T) {
	lf := writeLabFiles(t)
	out := labOK(t, "lab", "trace", "info", lf.trace1)
	if r := row(t, out, "events"); !hasPrefix(r, "events", strconv.Itoa(len(lf.trace.Events))) {
		t.Fatalf("info's events row %q, want %d\n%s", r, len(lf.trace.Events), out)
	}
	if r := row(t, out, "fingerprint"); !hasPrefix(r, "fingerprint", lf.trace.Fingerprint) {
		t.Fatalf("info's fingerprint row %q, want %s", r, lf.trace.Fingerprint)
	}
	var in lab.TraceInfo
	if err := json.Unmarshal([]byte(labOK(t, "lab", "trace", "info", lf.trace1, "-o", "json")), &in); err != nil {
		t.Fatal(err)
	}
	if want := lab.Info(lf.trace.Events); in.Events != len(lf.trace.Events) || in.Fingerprint != want.Fingerprint || in.Processes != want.Processes || len(in.Kinds) != len(want.Kinds) {
		t.Fatalf("info -o json: %+v, want %+v", in, want)
	}
	// A crash pack's trace too.
	if r := row(t, labOK(t, "lab", "trace", "info", lf.pack), "events"); !hasPrefix(r, "events", strconv.Itoa(len(lf.packRes.Events))) {
		t.Fatalf("info of the pack: %q, want %d events", r, len(lf.packRes.Events))
	}
	labFail(t, cli.ExitUsage, "lab", "trace", "info", filepath.Join(lf.dir, "missing.json"))
}

func TestLabTraceVerify(t *testing.T) {
	lf := writeLabFiles(t)
	if out := labOK(t, "lab", "trace", "verify", lf.trace1); out != "ok: "+strconv.Itoa(len(lf.trace.Events))+" events, fingerprint "+lf.trace.Fingerprint+"\n" {
		t.Fatalf("verify printed %q", out)
	}
	labOK(t, "lab", "trace", "verify", lf.pack)

	edited := filepath.Join(lf.dir, "edited.trace.json")
	tamper(t, lf.trace1, edited, false)
	if r := labFail(t, cli.ExitError, "lab", "trace", "verify", edited); !strings.Contains(r.err, lf.trace.Fingerprint) && !strings.Contains(r.err, "fingerprint") {
		t.Fatalf("verify of an edited trace says %q", r.err)
	}
	editedPack := filepath.Join(lf.dir, "edited-pack.json")
	tamper(t, lf.pack, editedPack, true)
	labFail(t, cli.ExitError, "lab", "trace", "verify", editedPack)

	malformed := filepath.Join(lf.dir, "malformed.json")
	if err := os.WriteFile(malformed, []byte(`{"schema_version":1,"events":[{`), 0o600); err != nil {
		t.Fatal(err)
	}
	labFail(t, cli.ExitUsage, "lab", "trace", "verify", malformed)
}

func TestLabTraceDiff(t *testing.T) {
	lf := writeLabFiles(t)
	if out := labOK(t, "lab", "trace", "diff", lf.trace1, lf.again1); out != "equal: "+strconv.Itoa(len(lf.trace.Events))+" events\n" {
		t.Fatalf("diff of one seed's two runs printed %q", out)
	}
	d := lab.Diff(lf.trace.Events, lf.otherRes.Events)
	if d == nil {
		t.Fatal("the two seeds' traces do not differ")
	}
	r := labRun("lab", "trace", "diff", lf.trace1, lf.other)
	if r.code != cli.ExitError || r.err != "orrery: traces differ at event "+strconv.Itoa(d.Index)+"\n" {
		t.Fatalf("diff of two seeds: %s", r)
	}
	if r.out != d.String()+"\n" || !strings.Contains(r.out, strconv.Itoa(d.Index)) {
		t.Fatalf("diff printed %q, want the first divergence:\n%s", r.out, d.String())
	}
	labFail(t, cli.ExitUsage, "lab", "trace", "diff", lf.trace1)
	labFail(t, cli.ExitUsage, "lab", "trace", "diff", lf.trace1, filepath.Join(lf.dir, "missing.json"))
}

func TestLabReplay(t *testing.T) {
	lf := writeLabFiles(t)
	out := labOK(t, "lab", "replay", lf.pack)
	for _, want := range [][]string{
		{"scenario", "failing-tally"},
		{"seed", "7"},
		{"fingerprint", lf.packRes.Fingerprint, "(verified)"},
		{"failure", "scenario:", errAudit.Error()},
		{"replay", "echo", `"replaying`, "seed", `$ORRERY_SEED"`},
	} {
		r := row(t, out, want[0])
		if !hasPrefix(r, want[0]) || !strings.Contains(strings.Join(r, " "), strings.Join(want[1:], " ")) {
			t.Fatalf("replay's %s row %q, want %q\n%s", want[0], r, want, out)
		}
	}
	var pack lab.CrashPack
	if err := json.Unmarshal([]byte(labOK(t, "lab", "replay", lf.pack, "-o", "json")), &pack); err != nil {
		t.Fatal(err)
	}
	if pack.Seed != 7 || pack.Fingerprint != lf.packRes.Fingerprint || pack.Scenario != "failing-tally" || pack.TraceLen != len(lf.packRes.Events) {
		t.Fatalf("replay -o json: seed %d, fingerprint %s, scenario %s, %d events", pack.Seed, pack.Fingerprint, pack.Scenario, pack.TraceLen)
	}

	// --run runs the pack's command with the pack's environment.
	if out := labOK(t, "lab", "replay", "--run", lf.pack); !strings.HasSuffix(out, "\nreplaying seed 7\n") {
		t.Fatalf("replay --run printed %q", out)
	}

	malformed := filepath.Join(lf.dir, "not-a-pack.json")
	if err := os.WriteFile(malformed, []byte(`{"schema_version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	labFail(t, cli.ExitUsage, "lab", "replay", malformed)
	labFail(t, cli.ExitUsage, "lab", "replay", lf.trace1) // a trace file is not a pack
	labFail(t, cli.ExitUsage, "lab", "replay", filepath.Join(lf.dir, "missing.json"))
	edited := filepath.Join(lf.dir, "edited-pack.json")
	tamper(t, lf.pack, edited, true)
	if r := labFail(t, cli.ExitError, "lab", "replay", edited); !strings.Contains(r.err, "fingerprint mismatch") {
		t.Fatalf("replay of an edited pack says %q", r.err)
	}
}
