package store

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/orrery-run/orrery/vocab"
)

func goodRecord() Record {
	return Record{EventID: "e1", IdempotencyKey: "k1", EventType: "Applied", LogicalAttemptID: 1, EngineAttemptID: 1,
		EmittedAt: time.Date(2030, 1, 1, 0, 0, 0, 1, time.UTC)}
}

func TestCheckRecordRejectsWhatAnyBackendCouldNotStoreExactly(t *testing.T) {
	if err := checkRecord("append", ptr(goodRecord())); err != nil {
		t.Fatalf("good record: %v", err)
	}
	for name, mutate := range map[string]func(*Record){
		"empty event id":        func(r *Record) { r.EventID = "" },
		"invalid UTF-8":         func(r *Record) { r.EventType = "\xff" },
		"NUL":                   func(r *Record) { r.StepID = "a\x00b" },
		"long id":               func(r *Record) { r.PlanID = strings.Repeat("x", MaxIDBytes+1) },
		"long key":              func(r *Record) { r.IdempotencyKey = strings.Repeat("k", MaxKeyBytes+1) },
		"attempt 0":             func(r *Record) { r.LogicalAttemptID = 0 },
		"attempt 2^63":          func(r *Record) { r.EngineAttemptID = math.MaxInt64 + 1 },
		"plan version 2^63":     func(r *Record) { r.PlanVersion = 1 << 63 },
		"year 1":                func(r *Record) { r.EmittedAt = time.Time{}.Add(time.Nanosecond) },
		"year 9999":             func(r *Record) { r.EmittedAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC) },
		"payload over the size": func(r *Record) { r.Payload = make([]byte, MaxPayloadBytes+1) },
	} {
		r := goodRecord()
		mutate(&r)
		if err := checkRecord("append", &r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	r := goodRecord()
	r.EmittedAt = time.Time{} // absent
	if err := checkRecord("append", &r); err != nil {
		t.Errorf("zero emittedAt is absent, not invalid: %v", err)
	}
}

func TestCheckIngressKeepsTheStoresNamespacesClosed(t *testing.T) {
	for _, item := range []InboxItem{
		{Kind: vocab.KindReceipt}, {Kind: vocab.KindTimer}, {Kind: vocab.KindFabric},
		{Kind: "event", DedupeKey: ReceiptKey("h", 0)},
		{Kind: "event", DedupeKey: TimerKey("h")},
		{Kind: ""},
	} {
		if err := CheckIngress("enqueue", item); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", item, err)
		}
	}
	if err := CheckIngress("enqueue", InboxItem{Kind: "event", DedupeKey: "order-17"}); err != nil {
		t.Errorf("a producer's own key: %v", err)
	}
}

func TestReceiptKeyNamesTheRetry(t *testing.T) {
	if got := ReceiptKey("h", 0); got != "receipt:h" {
		t.Errorf("first receipt key %q", got)
	}
	if got := ReceiptKey("h", 2); got != "receipt:h#2" {
		t.Errorf("second retry's key %q", got)
	}
}

func TestReceiptKeyIntentInvertsReceiptKey(t *testing.T) {
	for _, retries := range []int{0, 1, 12} {
		if h, ok := ReceiptKeyIntent(ReceiptKey("abc", retries)); !ok || h != "abc" {
			t.Errorf("retry %d: %q %v", retries, h, ok)
		}
	}
	for _, key := range []string{"", "timer:abc", "receipt:", "abc"} {
		if h, ok := ReceiptKeyIntent(key); ok {
			t.Errorf("%q names intent %q", key, h)
		}
	}
}

// FuzzCheckIngress: whatever a producer sends, the check answers nil or a
// typed ErrInvalid, and what it accepts is storable text outside the
// store's namespaces.
func FuzzCheckIngress(f *testing.F) {
	f.Add("event", "k", []byte{1})
	f.Add("receipt", "", []byte{})
	f.Add("event", "timer:x", []byte(nil))
	f.Add("e\x00", "\xff", []byte{0})
	f.Fuzz(func(t *testing.T, kind, key string, payload []byte) {
		err := CheckIngress("enqueue", InboxItem{Kind: kind, DedupeKey: key, Payload: payload})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, s := range []string{kind, key} {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted unstorable text %q", s)
			}
		}
		if kind == "" || kind == vocab.KindReceipt || kind == vocab.KindTimer || kind == vocab.KindFabric ||
			strings.HasPrefix(key, ReceiptKeyPrefix) || strings.HasPrefix(key, TimerKeyPrefix) {
			t.Fatalf("accepted a reserved kind or key: %q %q", kind, key)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// An operator's Resolve is checked like a completion's receipt, plus its
// reason; an empty reason is allowed.
func TestCheckResolve(t *testing.T) {
	ok := vocab.Receipt{Status: vocab.ReceiptOK}
	if err := checkResolve("resolve", "h", ok, ""); err != nil {
		t.Fatalf("a good resolve: %v", err)
	}
	for name, c := range map[string]struct {
		hash   string
		r      vocab.Receipt
		reason string
	}{
		"empty hash":     {"", ok, ""},
		"no status":      {"h", vocab.Receipt{}, ""},
		"unknown status": {"h", vocab.Receipt{Status: "maybe"}, ""},
		"big payload":    {"h", vocab.Receipt{Status: vocab.ReceiptOK, Payload: make([]byte, MaxPayloadBytes+1)}, ""},
		"long reason":    {"h", ok, strings.Repeat("r", MaxReasonBytes+1)},
		"reason NUL":     {"h", ok, "a\x00b"},
	} {
		if err := checkResolve("resolve", c.hash, c.r, c.reason); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestCheckAcquireLeasesNamesTheBadArgument(t *testing.T) {
	ok := []string{"a", "b", "a"} // a world named twice is allowed
	if err := checkAcquireLeases("acquire_leases", "A", ok, time.Second); err != nil {
		t.Fatalf("good call: %v", err)
	}
	if err := checkAcquireLeases("acquire_leases", "A", nil, time.Second); err != nil {
		t.Fatalf("no worlds is an empty call, not an invalid one: %v", err)
	}
	for _, c := range []struct {
		what   string
		worker string
		worlds []string
		ttl    time.Duration
		names  string
	}{
		{"empty worker", "", ok, time.Second, "worker"},
		{"worker with NUL", "A\x00", ok, time.Second, "worker"},
		{"zero ttl", "A", ok, 0, "ttl"},
		{"ttl past MaxTTL", "A", ok, MaxTTL + 1, "ttl"},
		{"more than MaxBatch worlds", "A", make([]string, MaxBatch+1), time.Second, "worlds"},
		{"empty world", "A", []string{"a", ""}, time.Second, "world"},
		{"world not UTF-8", "A", []string{"a", "\xff"}, time.Second, "world"},
		{"over-long world", "A", []string{strings.Repeat("w", MaxIDBytes+1)}, time.Second, "world"},
	} {
		err := checkAcquireLeases("acquire_leases", c.worker, c.worlds, c.ttl)
		var se *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &se) || !strings.HasPrefix(se.Detail, c.names+":") {
			t.Errorf("%s: %v, want ErrInvalid naming %s", c.what, err, c.names)
		}
	}
}
