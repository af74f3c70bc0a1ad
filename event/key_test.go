package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// keyVectors pin the byte layout of IdempotencyKey. They were computed once
// (and the digests cross-checked with coreutils sha256sum) and are the
// contract: a change here is a breaking change of every stored key.
var keyVectors = []struct {
	name             string
	runID, stepID    string
	logicalAttemptID uint64
	eventType        string
	planID           string
	planVersion      uint64
	preimage         string
	key              string
}{
	{"step event", "run-1", "step-a", 1, StepStarted, "plan-x", 3,
		`run-1|step-a|1|StepStarted|plan-x|3`,
		"3ec4afb0a3fb4e79f1137abccc4db44ed3b5212706d7bf16202fc82e9558ce1a"},
	{"run-level, empty step", "run-1", "", 1, RunStarted, "plan-x", 3,
		`run-1|RUN|1|RunStarted|plan-x|3`,
		"7f1cd20447f7889bec143d544bc8d9c8444924774769f7de22f5315aad14c8bb"},
	{"run-level ignores stepId", "run-1", "step-a", 1, RunStarted, "plan-x", 3,
		`run-1|RUN|1|RunStarted|plan-x|3`,
		"7f1cd20447f7889bec143d544bc8d9c8444924774769f7de22f5315aad14c8bb"},
	{"empty step on a step type", "run-1", "", 2, StepCompleted, "plan-x", 3,
		`run-1|RUN|2|StepCompleted|plan-x|3`,
		"602095d659cf1ee020e17fbad0320966aed83fa68023c8d0c7db055fb51ee6b6"},
	{"step literally named RUN", "run-1", "RUN", 2, StepCompleted, "plan-x", 3,
		`run-1|\RUN|2|StepCompleted|plan-x|3`,
		"1ff672405b722760d384a19206f3b85e9141ad45592de412619b70bb065b6c96"},
	{"step named backslash-RUN", "run-1", `\RUN`, 2, StepCompleted, "plan-x", 3,
		`run-1|\\RUN|2|StepCompleted|plan-x|3`,
		"e39e00fd0e2ea873cfdcf47441b10ba3a0e479da61e6a4350b25facfb148c777"},
	{"all empty or zero", "", "", 0, "", "", 0,
		`|RUN|0|||0`,
		"ba18d0330432d415182afaf49fbfcd0a58de37ad87e0dcf82c6c3663f244e885"},
	{"pipes inside fields", "run|1", "step|a", 1, StepFailed, "plan|x", 0,
		`run\|1|step\|a|1|StepFailed|plan\|x|0`,
		"35e709223afd434b9d5d6a108e9348c9f169e29e9af82a8eed3ba522b8586bff"},
	{"backslashes, max uint64", `run\1`, `step\`, 1, StepSkipped, `\`, 18446744073709551615,
		`run\\1|step\\|1|StepSkipped|\\|18446744073709551615`,
		"a4585066d7c8b26af2bb08d3d5289247202605aeec9ccebed5140ecc29b4350e"},
	{"escapes mixed", `a\|b`, `|\`, 10, `x\\y`, `||`, 1000000,
		`a\\\|b|\|\\|10|x\\\\y|\|\||1000000`,
		"a8b634d35f460f913505b3036c3d3816d43b894e3b8190015267a6f1c99e1239"},
	{"unicode (NFC é, ü)", "ラン-1", "\u00e9tape", 7, StepStarted, "plan-\u00fc", 42,
		"ラン-1|\u00e9tape|7|StepStarted|plan-\u00fc|42",
		"2ed7bdeac94b8a9e912fddae1af953be16972fefbc860b5ff821594e6b80bb45"},
	{"RUN everywhere, unknown type", "RUN", "RUN", 1, "Custom", "RUN", 1,
		`RUN|\RUN|1|Custom|RUN|1`,
		"e7107e62c93fa6767fb960433845e62b09e8c2f5030733f132a843cd314fe20c"},
	{"unknown run-like type, empty step", "run-1", "", 1, "RunSuspended", "plan-x", 3,
		`run-1|RUN|1|RunSuspended|plan-x|3`,
		"96b17f2d6ff34063fc9022e72ad63974d8e7f338c677b653bd66f480f455e9a5"},
	{"RunQueued, empty plan", "run-1", "", 1, RunQueued, "", 0,
		`run-1|RUN|1|RunQueued||0`,
		"165a44d0cb15ce8c234c386747c911b089b9ce42425a88dabd3ca7d730cbfec7"},
}

func TestIdempotencyKeyVectors(t *testing.T) {
	for _, v := range keyVectors {
		t.Run(v.name, func(t *testing.T) {
			p := KeyPreimage(v.runID, v.stepID, v.logicalAttemptID, v.eventType, v.planID, v.planVersion)
			if string(p) != v.preimage {
				t.Errorf("preimage\n got %q\nwant %q", p, v.preimage)
			}
			if got := IdempotencyKey(v.runID, v.stepID, v.logicalAttemptID, v.eventType, v.planID, v.planVersion); got != v.key {
				t.Errorf("key\n got %s\nwant %s", got, v.key)
			}
			// The digest is SHA-256 of exactly those bytes, in lowercase hex.
			sum := sha256.Sum256([]byte(v.preimage))
			if hex.EncodeToString(sum[:]) != v.key {
				t.Errorf("vector is not self-consistent")
			}
		})
	}
}

// Seed 001 §3.1: stepIdNormalized = 'RUN' for run-level events.
func TestIdempotencyKeyRunLevelStepNormalisedToRUN(t *testing.T) {
	for _, et := range []string{RunQueued, RunStarted, RunPaused, RunResumed, RunCompleted, RunFailed, RunCancelled} {
		want := IdempotencyKey("r", "", 1, et, "p", 1)
		for _, step := range []string{"", "s", "RUN", `\RUN`, "|"} {
			if got := IdempotencyKey("r", step, 1, et, "p", 1); got != want {
				t.Errorf("%s with stepId %q: key %s, want %s (stepId must be ignored)", et, step, got, want)
			}
		}
		if p := KeyPreimage("r", "x", 1, et, "p", 1); !bytes.Equal(p, []byte("r|RUN|1|"+et+"|p|1")) {
			t.Errorf("%s: preimage %q", et, p)
		}
	}
}

func TestIdempotencyKeyStepNamedRUNDoesNotCollide(t *testing.T) {
	for _, et := range []string{StepStarted, StepCompleted, "Custom", ""} {
		literal := IdempotencyKey("r", "RUN", 1, et, "p", 1)
		normalised := IdempotencyKey("r", "", 1, et, "p", 1)
		if literal == normalised {
			t.Errorf("type %q: step \"RUN\" collides with the normalised empty step", et)
		}
	}
	// And it is distinct from every run-level event with the same other fields.
	for _, et := range []string{RunStarted, RunCompleted} {
		if IdempotencyKey("r", "RUN", 1, StepStarted, "p", 1) == IdempotencyKey("r", "", 1, et, "p", 1) {
			t.Errorf("step RUN collides with %s", et)
		}
	}
}

func TestIdempotencyKeyFormat(t *testing.T) {
	k := IdempotencyKey("r", "s", 1, StepStarted, "p", 1)
	if !isKeyFormat(k) {
		t.Fatalf("key %q is not 64 lowercase hex digits", k)
	}
	for _, bad := range []string{"", k[:63], k + "0", "3EC4AFB0A3FB4E79F1137ABCCC4DB44ED3B5212706D7BF16202FC82E9558CE1A", k[:63] + "g"} {
		if isKeyFormat(bad) {
			t.Errorf("isKeyFormat(%q) = true", bad)
		}
	}
}

// keyTuple is an argument tuple in normal form: the step is either
// normalised (norm) or a literal stepId.
type keyTuple struct {
	runID, stepID    string
	norm             bool
	logicalAttemptID uint64
	eventType        string
	planID           string
	planVersion      uint64
}

func normalKeyTuple(runID, stepID string, la uint64, et, planID string, pv uint64) keyTuple {
	k := keyTuple{runID: runID, stepID: stepID, logicalAttemptID: la, eventType: et, planID: planID, planVersion: pv}
	if stepID == "" || IsRunLevel(et) {
		k.stepID, k.norm = "", true
	}
	return k
}

// parseKeyPreimage inverts KeyPreimage following the injectivity proof in
// IdempotencyKey's doc comment: that it succeeds and returns the normal form
// of the input is a constructive proof that the preimage is injective.
func parseKeyPreimage(p []byte) (keyTuple, error) {
	var fields [][]byte
	var cur []byte
	raw := [][]byte{}
	start := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 >= len(p) {
				return keyTuple{}, errors.New("lone trailing backslash")
			}
			cur = append(cur, p[i+1])
			i++
		case '|':
			fields = append(fields, cur)
			raw = append(raw, p[start:i])
			cur, start = nil, i+1
		default:
			cur = append(cur, p[i])
		}
	}
	fields = append(fields, cur)
	raw = append(raw, p[start:])
	if len(fields) != 6 {
		return keyTuple{}, errors.New("want 6 fields, got " + strconv.Itoa(len(fields)))
	}
	num := func(b []byte) (uint64, error) {
		n, err := strconv.ParseUint(string(b), 10, 64)
		if err != nil || strconv.FormatUint(n, 10) != string(b) {
			return 0, errors.New("not canonical decimal: " + string(b))
		}
		return n, nil
	}
	var k keyTuple
	var err error
	k.runID = string(fields[0])
	switch string(raw[1]) {
	case "RUN":
		k.norm = true
	case `\RUN`:
		k.stepID = "RUN"
	default:
		for i := 0; i+1 < len(raw[1]); i++ {
			if raw[1][i] == '\\' {
				if c := raw[1][i+1]; c != '\\' && c != '|' {
					return keyTuple{}, errors.New("unknown escape in step")
				}
				i++
			}
		}
		k.stepID = string(fields[1])
	}
	if k.logicalAttemptID, err = num(fields[2]); err != nil {
		return keyTuple{}, err
	}
	k.eventType = string(fields[3])
	k.planID = string(fields[4])
	if k.planVersion, err = num(fields[5]); err != nil {
		return keyTuple{}, err
	}
	return k, nil
}

// keyFieldGen favours the bytes and words that matter to the escaping.
func keyFieldGen() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"", "RUN", `\RUN`, "|", `\`, `\|`, `|\`, `\\`, "R", "UN", "RUN|", "|RUN"}),
		rapid.StringOf(rapid.RuneFrom([]rune{'\\', '|', 'R', 'U', 'N', 'a', 'é', '0'})),
		rapid.String(),
	)
}

func keyTypeGen() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.SampledFrom([]string{RunStarted, RunQueued, RunCancelled, StepStarted, StepSkipped, "Custom", "", "|", `\`}),
		keyFieldGen(),
	)
}

func drawKeyArgs(t *rapid.T, label string) (string, string, uint64, string, string, uint64) {
	small := rapid.OneOf(rapid.Uint64Range(0, 12), rapid.Uint64())
	return keyFieldGen().Draw(t, label+".runID"), keyFieldGen().Draw(t, label+".stepID"),
		small.Draw(t, label+".logicalAttemptID"), keyTypeGen().Draw(t, label+".eventType"),
		keyFieldGen().Draw(t, label+".planID"), small.Draw(t, label+".planVersion")
}

// Injectivity: the preimage parses back to the normal form of its input,
// and two tuples share a preimage exactly when their normal forms are equal.
func TestIdempotencyKeyPreimageInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r1, s1, a1, e1, p1, v1 := drawKeyArgs(t, "a")
		k1 := normalKeyTuple(r1, s1, a1, e1, p1, v1)
		pre1 := KeyPreimage(r1, s1, a1, e1, p1, v1)
		got, err := parseKeyPreimage(pre1)
		if err != nil {
			t.Fatalf("preimage %q does not parse: %v", pre1, err)
		}
		if got != k1 {
			t.Fatalf("preimage %q parses to %+v, want %+v", pre1, got, k1)
		}

		// A second tuple, often a small mutation of the first.
		r2, s2, a2, e2, p2, v2 := r1, s1, a1, e1, p1, v1
		switch rapid.IntRange(0, 6).Draw(t, "mutate") {
		case 0:
			r2, s2, a2, e2, p2, v2 = drawKeyArgs(t, "b")
		case 1:
			r2 = keyFieldGen().Draw(t, "b.runID")
		case 2:
			s2 = keyFieldGen().Draw(t, "b.stepID")
		case 3:
			e2 = keyTypeGen().Draw(t, "b.eventType")
		case 4:
			p2 = keyFieldGen().Draw(t, "b.planID")
		case 5:
			a2 = rapid.Uint64Range(0, 12).Draw(t, "b.logicalAttemptID")
		case 6:
			// Move a separator across a boundary: the classic collision.
			r2, p2 = r1+"|"+p1, ""
		}
		k2 := normalKeyTuple(r2, s2, a2, e2, p2, v2)
		pre2 := KeyPreimage(r2, s2, a2, e2, p2, v2)
		if (k1 == k2) != bytes.Equal(pre1, pre2) {
			t.Fatalf("tuples %+v and %+v: equal normal forms %v, equal preimages %v (%q, %q)",
				k1, k2, k1 == k2, bytes.Equal(pre1, pre2), pre1, pre2)
		}
		if (k1 == k2) != (IdempotencyKey(r1, s1, a1, e1, p1, v1) == IdempotencyKey(r2, s2, a2, e2, p2, v2)) {
			t.Fatalf("key equality disagrees with normal-form equality")
		}
	})
}

func FuzzIdempotencyKey(f *testing.F) {
	for _, v := range keyVectors {
		f.Add(v.runID, v.stepID, v.logicalAttemptID, v.eventType, v.planID, v.planVersion)
	}
	f.Add("a|b", "", uint64(1), "c", "", uint64(0))
	f.Add("a", "b|", uint64(1), "c", "", uint64(0))
	f.Add("\xff\xfe", "\\", uint64(0), "\x00", "|\\|", uint64(1<<63))
	f.Fuzz(func(t *testing.T, runID, stepID string, la uint64, eventType, planID string, pv uint64) {
		key := IdempotencyKey(runID, stepID, la, eventType, planID, pv)
		if !isKeyFormat(key) {
			t.Fatalf("key %q is not 64 lowercase hex digits", key)
		}
		pre := KeyPreimage(runID, stepID, la, eventType, planID, pv)
		sum := sha256.Sum256(pre)
		if hex.EncodeToString(sum[:]) != key {
			t.Fatalf("key is not SHA-256 of the preimage")
		}
		got, err := parseKeyPreimage(pre)
		if err != nil {
			t.Fatalf("preimage %q does not parse: %v", pre, err)
		}
		if want := normalKeyTuple(runID, stepID, la, eventType, planID, pv); got != want {
			t.Fatalf("preimage %q parses to %+v, want %+v", pre, got, want)
		}
		if IdempotencyKey(runID, stepID, la, eventType, planID, pv) != key {
			t.Fatalf("not deterministic")
		}
	})
}

func TestEventTypeLevels(t *testing.T) {
	run := []string{RunQueued, RunStarted, RunPaused, RunResumed, RunCompleted, RunFailed, RunCancelled}
	step := []string{StepStarted, StepCompleted, StepFailed, StepSkipped}
	for _, et := range run {
		if !IsRunLevel(et) || IsStepLevel(et) || !IsKnown(et) {
			t.Errorf("%s should be run-level only", et)
		}
	}
	for _, et := range step {
		if IsRunLevel(et) || !IsStepLevel(et) || !IsKnown(et) {
			t.Errorf("%s should be step-level only", et)
		}
	}
	for _, et := range []string{"", "runStarted", "RunStarted ", "Custom", "RUN"} {
		if IsRunLevel(et) || IsStepLevel(et) || IsKnown(et) {
			t.Errorf("%q should be unknown", et)
		}
	}
}
