package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Schedules (plane/schedule's table): the store keeps Spec and State as
// bytes, judges NextFireAt against its own clock, and advances Version on
// every write so that an update is a compare-and-swap.
func scheduleTests() []testCase {
	return []testCase{
		{"ScheduleCreateGetListDelete", testScheduleCRUD},
		{"ScheduleUpdateIsCompareAndSwap", testScheduleCAS},
		{"ScheduleRacingUpdatesOneWins", testScheduleRace},
		{"ScheduleRecreatedIsNotTheOld", testScheduleRecreatedIsNotTheOld},
		{"ScheduleDueByTheStoreClock", testScheduleDue},
		{"ScheduleValidation", testScheduleValidation},
	}
}

func testScheduleCRUD(t *testing.T, open Factory) {
	f := setup(t, open)
	now := f.now()
	a, err := f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "b", Spec: []byte("spec-b"), NextFireAt: now.Add(time.Hour)})
	must(t, err, "CreateSchedule b")
	if a.Version == 0 || a.CreatedAt.IsZero() || !a.NextFireAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("created = %+v, want a version, a creation time and the next fire time", a)
	}
	_, err = f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "b", Spec: []byte("again")})
	wantErr(t, err, store.ErrScheduleExists, "CreateSchedule b again")
	_, err = f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "a", Spec: []byte("spec-a"), State: []byte("st"), Paused: true})
	must(t, err, "CreateSchedule a")
	got, err := f.s.GetSchedule(bg, "a")
	must(t, err, "GetSchedule a")
	if string(got.Spec) != "spec-a" || string(got.State) != "st" || !got.Paused || !got.NextFireAt.IsZero() {
		t.Fatalf("GetSchedule a = %+v", got)
	}
	list, err := f.s.ListSchedules(bg, "", 10)
	must(t, err, "ListSchedules")
	if len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
		t.Fatalf("ListSchedules = %+v, want a, b", list)
	}
	list, err = f.s.ListSchedules(bg, "a", 10)
	must(t, err, "ListSchedules after a")
	if len(list) != 1 || list[0].ID != "b" {
		t.Fatalf("ListSchedules after a = %+v, want b", list)
	}
	must(t, f.s.DeleteSchedule(bg, "a"), "DeleteSchedule a")
	wantErr(t, f.s.DeleteSchedule(bg, "a"), store.ErrNotFound, "DeleteSchedule a again")
	_, err = f.s.GetSchedule(bg, "a")
	wantErr(t, err, store.ErrNotFound, "GetSchedule a after delete")
	_, err = f.s.UpdateSchedule(bg, got)
	wantErr(t, err, store.ErrNotFound, "UpdateSchedule a after delete")
}

func testScheduleCAS(t *testing.T, open Factory) {
	f := setup(t, open)
	r, err := f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "s", Spec: []byte("spec")})
	must(t, err, "CreateSchedule")
	next := f.now().Add(time.Minute)
	r.State, r.NextFireAt = []byte("tick-1"), next
	r2, err := f.s.UpdateSchedule(bg, r)
	must(t, err, "UpdateSchedule at the created version")
	if r2.Version != r.Version+1 || string(r2.State) != "tick-1" || !r2.NextFireAt.Equal(next) {
		t.Fatalf("updated = %+v, want version %d with the new state", r2, r.Version+1)
	}
	// A writer that read the created version lost: nothing it says is
	// written.
	r.State = []byte("tick-1-again")
	_, err = f.s.UpdateSchedule(bg, r)
	wantErr(t, err, store.ErrScheduleConflict, "UpdateSchedule at a stale version")
	got, err := f.s.GetSchedule(bg, "s")
	must(t, err, "GetSchedule")
	if got.Version != r2.Version || string(got.State) != "tick-1" {
		t.Fatalf("after a stale update: %+v, want version %d and tick-1", got, r2.Version)
	}
}

// testScheduleRecreatedIsNotTheOld: a writer that read a schedule, which
// an operator then deleted and created again under the same id, must not
// compare-and-swap its stale record over the new schedule.
func testScheduleRecreatedIsNotTheOld(t *testing.T, open Factory) {
	f := setup(t, open)
	old, err := f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "s", Spec: []byte("spec-1")})
	must(t, err, "CreateSchedule")
	must(t, f.s.DeleteSchedule(bg, "s"), "DeleteSchedule")
	f.advance(time.Millisecond)
	_, err = f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "s", Spec: []byte("spec-2")})
	must(t, err, "CreateSchedule again")
	old.State = []byte("stale")
	_, err = f.s.UpdateSchedule(bg, old)
	wantErr(t, err, store.ErrScheduleConflict, "UpdateSchedule with the deleted schedule's record")
	got, err := f.s.GetSchedule(bg, "s")
	must(t, err, "GetSchedule")
	if string(got.Spec) != "spec-2" || string(got.State) == "stale" {
		t.Fatalf("the new schedule is %+v: the stale writer overwrote it", got)
	}
}

func testScheduleRace(t *testing.T, open Factory) {
	f := setup(t, open)
	r, err := f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "s", Spec: []byte("spec")})
	must(t, err, "CreateSchedule")
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := r
			w.State = []byte{byte(i)}
			_, errs[i] = f.s.UpdateSchedule(bg, w)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			wantErr(t, err, store.ErrScheduleConflict, "a losing update")
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d updates from one version won, want exactly 1", won, n)
	}
}

func testScheduleDue(t *testing.T, open Factory) {
	f := setup(t, open)
	_, _, ok, err := f.s.NextScheduleDue(bg)
	must(t, err, "NextScheduleDue empty")
	if ok {
		t.Fatal("NextScheduleDue on an empty table says ok")
	}
	now := f.now()
	for _, r := range []store.ScheduleRecord{
		{ID: "late", Spec: []byte("x"), NextFireAt: now.Add(2 * margin)},
		{ID: "soon", Spec: []byte("x"), NextFireAt: now.Add(margin)},
		{ID: "never", Spec: []byte("x")},
	} {
		_, err := f.s.CreateSchedule(bg, r)
		must(t, err, "CreateSchedule "+r.ID)
	}
	due, at, err := f.s.DueSchedules(bg, 10)
	must(t, err, "DueSchedules")
	if len(due) != 0 || at.IsZero() {
		t.Fatalf("due before any time passed: %+v (now %v)", due, at)
	}
	next, storeNow, ok, err := f.s.NextScheduleDue(bg)
	must(t, err, "NextScheduleDue")
	if !ok || !next.Equal(now.Add(margin)) || storeNow.Before(now) {
		t.Fatalf("NextScheduleDue = %v (now %v, ok %v), want %v", next, storeNow, ok, now.Add(margin))
	}
	f.advance(margin + margin/2)
	due, _, err = f.s.DueSchedules(bg, 10)
	must(t, err, "DueSchedules after one margin")
	if len(due) != 1 || due[0].ID != "soon" {
		t.Fatalf("due = %+v, want soon", due)
	}
	f.advance(margin)
	due, _, err = f.s.DueSchedules(bg, 1)
	must(t, err, "DueSchedules after two margins")
	if len(due) != 1 || due[0].ID != "soon" {
		t.Fatalf("due limit 1 = %+v, want the earliest, soon", due)
	}
	due, _, err = f.s.DueSchedules(bg, 10)
	must(t, err, "DueSchedules")
	if len(due) != 2 || due[1].ID != "late" {
		t.Fatalf("due = %+v, want soon then late", due)
	}
}

func testScheduleValidation(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "", Spec: []byte("x")})
	wantErr(t, err, store.ErrInvalid, "CreateSchedule without an id")
	_, err = f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "s"})
	wantErr(t, err, store.ErrInvalid, "CreateSchedule without a spec")
	_, err = f.s.CreateSchedule(bg, store.ScheduleRecord{ID: "s", Spec: make([]byte, store.MaxScheduleBytes+1)})
	wantErr(t, err, store.ErrInvalid, "CreateSchedule with an oversize spec")
	_, err = f.s.UpdateSchedule(bg, store.ScheduleRecord{ID: "s", Spec: []byte("x")})
	wantErr(t, err, store.ErrInvalid, "UpdateSchedule at version 0")
	_, err = f.s.ListSchedules(bg, "", 0)
	wantErr(t, err, store.ErrInvalid, "ListSchedules limit 0")
}
