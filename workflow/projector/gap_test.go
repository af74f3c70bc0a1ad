package projector_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow/projector"
)

// compactedWorld is a world stream "w" of ten records, a snapshot at the
// eighth and a compaction of everything at or below it, with the durable
// counter slow fed the first three (its watermark at 3) before the
// compaction, and the counter ahead's watermark at 9.
type compactedWorld struct {
	st     *memstore.Store
	seqs   []uint64
	slow   *counter
	ahead  *counter
	logs   *syncBuffer
	gaps   []projector.Gap
	gapsMu sync.Mutex
	runner *projector.Runner
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newCompactedWorld(t *testing.T, skip bool) *compactedWorld {
	t.Helper()
	st := memstore.New(memstore.WithClock(func() time.Time { return t0 }))
	t.Cleanup(func() { st.Close() })
	if _, err := st.CreateWorld(bg, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(bg, "w", "worker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fence := store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: l.Epoch}}
	cw := &compactedWorld{st: st, slow: newCounter("slow"), ahead: newCounter("ahead"), logs: &syncBuffer{}}
	appendN := func(from, n int) {
		for i := from; i < from+n; i++ {
			e := envelope(t, "w", "wf", 1, spec{typ: event.StepStarted, step: fmt.Sprint("s", i), attempt: 1})
			a, err := st.Append(bg, "w", []event.Envelope{e}, fence)
			if err != nil {
				t.Fatal(err)
			}
			cw.seqs = append(cw.seqs, a[0].RunSeq)
		}
	}
	cw.runner = newRunner(t, projector.RunnerConfig{
		Store: st, Streams: projector.Fixed("w"), Projectors: []projector.Projector{cw.slow, cw.ahead},
		SkipCompacted: skip, Logger: slog.New(slog.NewTextHandler(cw.logs, nil)),
		OnGap: func(g projector.Gap) {
			cw.gapsMu.Lock()
			defer cw.gapsMu.Unlock()
			cw.gaps = append(cw.gaps, g)
		},
	})
	appendN(0, 3)
	catchUp(t, cw.runner)
	appendN(3, 7)
	if err := st.CASWatermark(bg, "ahead", "w", 3, cw.seqs[8]); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSnapshot(bg, "w", l.Epoch, store.Snapshot{Height: cw.seqs[7], State: []byte("s8"), StateHash: "h8"}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Compact(bg, "w", l.Epoch, 0); err != nil || n != 8 {
		t.Fatalf("Compact = %d, %v; want 8", n, err)
	}
	return cw
}

func (cw *compactedWorld) reported() []projector.Gap {
	cw.gapsMu.Lock()
	defer cw.gapsMu.Unlock()
	return append([]projector.Gap(nil), cw.gaps...)
}

// TestProjectorBelowTheCompactionFloorStopsAndReportsTheRange: a projector
// at watermark 3 on a stream compacted through 8 is not fed 9 and 10 as if
// 4…8 were gaps: by default its stream stops, and the range 4…8 is
// reported as a *GapError (ErrGap and store.ErrCompacted) by every pass,
// logged at ERROR, listed by Gaps and handed to OnGap once. A projector
// above the floor on the same stream goes on. When an operator moves the
// watermark to the floor, the stream resumes and the gap is cleared.
func TestProjectorBelowTheCompactionFloorStopsAndReportsTheRange(t *testing.T) {
	cw := newCompactedWorld(t, false)
	floor := cw.seqs[7]
	want := projector.Gap{Projector: "slow", Stream: "w", From: cw.seqs[2] + 1, To: floor}
	for pass := range 2 {
		err := cw.runner.CatchUp(bg)
		var ge *projector.GapError
		if !errors.As(err, &ge) || ge.Gap != want || !errors.Is(err, projector.ErrGap) || !errors.Is(err, store.ErrCompacted) {
			t.Fatalf("pass %d: CatchUp = %v; want a *GapError for %+v matching ErrGap and store.ErrCompacted", pass, err, want)
		}
	}
	for _, s := range cw.seqs[3:] {
		if n := cw.slow.count("w", s); n != 0 {
			t.Fatalf("the stopped projector was handed runSeq %d (%d times)", s, n)
		}
	}
	if m, _ := cw.st.GetWatermark(bg, "slow", "w"); m != cw.seqs[2] {
		t.Fatalf("stopped watermark = %d, want %d kept", m, cw.seqs[2])
	}
	if cw.ahead.count("w", cw.seqs[9]) != 1 {
		t.Fatal("the projector above the floor was not fed on")
	}
	if got := cw.runner.Gaps(); len(got) != 1 || got[0] != want {
		t.Fatalf("Gaps = %+v, want [%+v]", got, want)
	}
	if got := cw.reported(); len(got) != 1 || got[0] != want {
		t.Fatalf("OnGap got %+v, want %+v once over two passes", got, want)
	}
	if logs := cw.logs.String(); strings.Count(logs, "level=ERROR") != 1 ||
		!strings.Contains(logs, fmt.Sprintf("from=%d to=%d", want.From, want.To)) {
		t.Fatalf("log = %q, want one ERROR naming the range", logs)
	}

	// The operator accepts the loss: the stream resumes above the floor.
	if err := cw.st.CASWatermark(bg, "slow", "w", cw.seqs[2], floor); err != nil {
		t.Fatal(err)
	}
	catchUp(t, cw.runner)
	if cw.slow.count("w", cw.seqs[8]) != 1 || cw.slow.count("w", cw.seqs[9]) != 1 {
		t.Fatal("after the operator moved the watermark, 9 and 10 were not applied")
	}
	if got := cw.runner.Gaps(); len(got) != 0 {
		t.Fatalf("Gaps after the resume = %+v, want none", got)
	}
}

// TestProjectorSkipCompactedSkipsKnowingly: with SkipCompacted the runner
// moves the watermark to the floor, applies 9 and 10, never 4…8, and
// records the skipped range (Gaps, OnGap, a WARN log) instead of failing.
func TestProjectorSkipCompactedSkipsKnowingly(t *testing.T) {
	cw := newCompactedWorld(t, true)
	floor := cw.seqs[7]
	catchUp(t, cw.runner)
	want := projector.Gap{Projector: "slow", Stream: "w", From: cw.seqs[2] + 1, To: floor, Skipped: true}
	for i, s := range cw.seqs {
		n, wantN := cw.slow.count("w", s), 1
		if i >= 3 && s <= floor {
			wantN = 0
		}
		if n != wantN {
			t.Fatalf("runSeq %d applied %d times, want %d", s, n, wantN)
		}
	}
	if m, _ := cw.st.GetWatermark(bg, "slow", "w"); m != cw.seqs[9] {
		t.Fatalf("watermark = %d, want the head %d", m, cw.seqs[9])
	}
	if got := cw.runner.Gaps(); len(got) != 1 || got[0] != want {
		t.Fatalf("Gaps = %+v, want [%+v]", got, want)
	}
	if got := cw.reported(); len(got) != 1 || got[0] != want {
		t.Fatalf("OnGap got %+v, want [%+v]", got, want)
	}
	if logs := cw.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, fmt.Sprintf("from=%d to=%d", want.From, want.To)) {
		t.Fatalf("log = %q, want a WARN naming the skipped range", logs)
	}
	// Nothing more to skip: a second pass reports nothing new.
	catchUp(t, cw.runner)
	if got := cw.reported(); len(got) != 1 {
		t.Fatalf("OnGap after a second pass: %+v", got)
	}
}
