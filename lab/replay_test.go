package lab

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReplaySameSeedDoesNotDiverge(t *testing.T) {
	cfg := Config{Seed: 21, Name: "chatty"}
	rec := Run(cfg, triageChatty(false))
	res, d := Replay(rec.Events, cfg, triageChatty(false))
	if d != nil {
		t.Fatalf("same seed, same code diverged:\n%s", d)
	}
	if res.Fingerprint != rec.Fingerprint {
		t.Fatalf("fingerprints differ")
	}
}

// TestReplayReportsFirstDivergentStep: the relay's handler is changed to
// send one extra message; replaying the recorded trace under the same seed
// names the first step at which the new code behaves differently, with
// both events and the common events just before.
func TestReplayReportsFirstDivergentStep(t *testing.T) {
	cfg := Config{Seed: 21, Name: "chatty"}
	rec := Run(cfg, triageChatty(false))
	res, d := Replay(rec.Events, cfg, triageChatty(true))
	if d == nil {
		t.Fatal("changed handler, no divergence")
	}
	if d.Want == nil || d.Got == nil || *d.Want == *d.Got {
		t.Fatalf("divergence without two different events: %+v", d)
	}
	// Everything before the index is common, the index itself differs.
	for i := 0; i < d.Index; i++ {
		if rec.Events[i] != res.Events[i] {
			t.Fatalf("event %d differs before the reported divergence %d", i, d.Index)
		}
	}
	if *d.Want != rec.Events[d.Index] || *d.Got != res.Events[d.Index] {
		t.Fatalf("side-by-side events are not the traces' events at %d", d.Index)
	}
	// The new event is the extra send to the sink (the first process
	// spawned), made while the relay handles its second cast.
	sink := rec.Events[0].PID
	if d.Got.Kind != "send" || d.Got.PID != sink {
		t.Fatalf("divergent event %s, want a send to the sink (pid %d)", d.Got, sink)
	}
	if len(d.Before) != DivergenceContext || d.Before[len(d.Before)-1] != rec.Events[d.Index-1] {
		t.Fatalf("context %v", d.Before)
	}
	if d.WantLen != len(rec.Events) || d.GotLen != len(res.Events) || d.GotLen <= d.WantLen || d.WantFingerprint != rec.Fingerprint || d.GotFingerprint != res.Fingerprint {
		t.Fatalf("lengths/fingerprints %d/%d %s/%s", d.WantLen, d.GotLen, d.WantFingerprint, d.GotFingerprint)
	}
	s := d.String()
	if !strings.Contains(s, "- ") || !strings.Contains(s, d.Want.String()) || !strings.Contains(s, d.Got.String()) {
		t.Fatalf("rendering misses a side:\n%s", s)
	}
	t.Logf("recorded %d events, changed code %d events:\n%s", d.WantLen, d.GotLen, s)
}

func TestDiffTraces(t *testing.T) {
	a := []Event{{Kind: "spawn", PID: 1}, {Kind: "send", PID: 1, Seq: 1}, {At: time.Millisecond, Kind: "exit", PID: 1}}
	if d := Diff(a, append([]Event(nil), a...)); d != nil {
		t.Fatalf("equal traces: %v", d)
	}
	if d := Diff(nil, nil); d != nil {
		t.Fatalf("empty traces: %v", d)
	}
	// One trace is a prefix of the other.
	d := Diff(a, a[:2])
	if d == nil || d.Index != 2 || d.Want == nil || *d.Want != a[2] || d.Got != nil {
		t.Fatalf("prefix: %+v", d)
	}
	if !strings.Contains(d.String(), "<end of trace>") {
		t.Fatalf("prefix rendering:\n%s", d)
	}
	d = Diff(a[:1], a)
	if d == nil || d.Index != 1 || d.Want != nil || d.Got == nil || *d.Got != a[1] || len(d.Before) != 1 {
		t.Fatalf("extension: %+v", d)
	}
	// A change in one field only (virtual time).
	b := append([]Event(nil), a...)
	b[2].At = 2 * time.Millisecond
	d = Diff(a, b)
	if d == nil || d.Index != 2 || len(d.Before) != 2 {
		t.Fatalf("time change: %+v", d)
	}
}

func TestTraceInfoAndVerify(t *testing.T) {
	res := Run(Config{Seed: 3}, triageChatty(false))
	info := Info(res.Events)
	if info.Events != len(res.Events) || info.Fingerprint != res.Fingerprint {
		t.Fatalf("info %+v", info)
	}
	total := 0
	for i, k := range info.Kinds {
		total += k.Count
		if i > 0 && info.Kinds[i-1].Kind >= k.Kind {
			t.Fatalf("kinds not sorted: %v", info.Kinds)
		}
	}
	if total != len(res.Events) {
		t.Fatalf("histogram sums to %d, want %d", total, len(res.Events))
	}
	if info.VirtualTime != res.Events[len(res.Events)-1].At || info.VirtualTime < 4*time.Millisecond {
		t.Fatalf("virtual time %v", info.VirtualTime)
	}
	if info.Processes != 2 {
		t.Fatalf("processes %d, want 2 (sink and relay)", info.Processes)
	}
	if err := Verify(res.Events, res.Fingerprint); err != nil {
		t.Fatal(err)
	}
	tampered := append([]Event(nil), res.Events...)
	tampered[3].Seq++
	var fm *FingerprintMismatchError
	if err := Verify(tampered, res.Fingerprint); !errors.As(err, &fm) || fm.Recorded != res.Fingerprint || fm.Computed != Fingerprint(tampered) {
		t.Fatalf("tampered trace: %v", err)
	}
	t.Logf("\n%s", info)
}

func TestTraceFileRoundTripAndLoadTrace(t *testing.T) {
	dir := t.TempDir()
	res := Run(Config{Seed: 3}, triageChatty(false))
	path := filepath.Join(dir, "trace.json")
	if err := WriteTraceFile(path, res.Events); err != nil {
		t.Fatal(err)
	}
	events, fp, err := LoadTrace(path)
	if err != nil || fp != res.Fingerprint || Diff(res.Events, events) != nil {
		t.Fatalf("trace file round trip: %v %s", err, fp)
	}
	// LoadTrace also reads a crash pack.
	bad := Run(Config{Seed: 3, Name: "leaked-permit"}, triageLeakedPermit)
	packPath, err := WriteCrashPack(dir, bad, ReplayInfo{})
	if err != nil {
		t.Fatal(err)
	}
	events, fp, err = LoadTrace(packPath)
	if err != nil || fp != bad.Fingerprint || Diff(bad.Events, events) != nil {
		t.Fatalf("pack through LoadTrace: %v", err)
	}
	// Malformed files are typed.
	for name, data := range map[string]string{
		"garbage":  "{{",
		"version":  `{"schema_version":9,"fingerprint":"","events":[]}`,
		"noevents": `{"schema_version":1,"fingerprint":""}`,
		"badevent": `{"schema_version":1,"fingerprint":"","events":[{"at_ns":0}]}`,
		"badpack":  `{"schema_version":1,"trace":[]}`,
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		var me *MalformedError
		if _, _, err := LoadTrace(p); !errors.Is(err, ErrMalformed) || !errors.As(err, &me) || me.Path != p {
			t.Errorf("%s: %v", name, err)
		}
	}
}
