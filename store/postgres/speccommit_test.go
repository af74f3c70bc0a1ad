package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Tests of Commit on the speculative (one-round-trip) path: see the top of
// append.go.

// spawnCached spawns world with n inbox items and its first lease for
// holder "A": the spawn leaves the world's head in s's cache, so its next
// Commit may speculate.
func spawnCached(t *testing.T, s *Store, world string, n int) uint64 {
	t.Helper()
	spec := store.SpawnSpec{Universe: "u", World: world, Holder: "A", TTL: time.Minute}
	for i := range n {
		spec.Items = append(spec.Items, store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("in-", i)})
	}
	sp, err := s.Spawn(bg, spec)
	if err != nil {
		t.Fatalf("Spawn %s: %v", world, err)
	}
	return sp.Lease.Epoch
}

// trips runs call and returns the round trips and speculation misses it
// cost s.
func trips(s *Store, call func()) (roundTrips, misses uint64) {
	before := s.Stats()
	call()
	after := s.Stats()
	return after.RoundTrips - before.RoundTrips, after.SpeculationMisses - before.SpeculationMisses
}

// dumpState renders every table of s's schema without the columns that
// hold the store clock's readings (named *_ns): what two stores given the
// same calls must agree on, whichever path decided them.
func dumpState(t *testing.T, s *Store) string {
	t.Helper()
	conn := rawConn(t, s.Schema())
	rows, err := conn.Query(bg, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations' ORDER BY table_name`, s.Schema())
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, table := range tables {
		var dump *string
		if err := conn.QueryRow(bg, `SELECT jsonb_agg(j ORDER BY j::text)::text FROM (
				SELECT (SELECT jsonb_object_agg(e.k, e.v) FROM jsonb_each(to_jsonb(t)) AS e(k, v) WHERE e.k NOT LIKE '%\_ns') AS j
				FROM `+pgx.Identifier{table}.Sanitize()+` t) x`).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "%s: %s\n", table, strOr(dump, "[]"))
	}
	return out.String()
}

func strOr(s *string, or string) string {
	if s == nil {
		return or
	}
	return *s
}

// A cycle's answer without the store clock's readings.
func cycleAnswer(res store.CommitResult) string {
	for i := range res.Appended {
		res.Appended[i].PersistedAt = time.Time{}
	}
	return fmt.Sprintf("%+v", res)
}

// Commits of worlds whose heads are cached (entries, cursor moves,
// intents, timers, cancellations, duplicates of published intents and
// scheduled timers, a DrainToJournal, and the last cycles that pause and
// archive their worlds) each take ONE round trip, and decide exactly what
// the checked path decides: the same calls on a second store whose every
// Commit is sent down the checked path (its cache cooled down before each)
// get the same answers and leave the same rows in every table.
func TestSpeculativeCommitIsOneRoundTripAndDecidesAsTheCheckedPath(t *testing.T) {
	t.Parallel()
	spec, checked := openStore(t, "", nil), openStore(t, "", nil)
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	type cycle struct {
		world string
		b     store.CommitBatch
		drain bool
	}
	cycles := []cycle{
		{"w", store.CommitBatch{ExpectedCursor: 0, NewCursor: 2, ExpectedHead: 0, Entries: []store.Record{rec("a"), rec("b")},
			Intents: []vocab.Intent{{IntentHash: "i1", Kind: "k", Params: []byte("p1")}, {IntentHash: "i2", Kind: "k"}},
			Timers:  []vocab.TimerSet{{IntentHash: "t1", DeliverAt: at}, {IntentHash: "t2", DeliverAt: at}}}, false},
		{"v", store.CommitBatch{ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 0, Entries: []store.Record{rec("va")},
			Intents: []vocab.Intent{{IntentHash: "vi1", Kind: "k"}}}, false},
		// Published and scheduled already: skipped; an unknown timer's
		// cancellation: skipped.
		{"w", store.CommitBatch{ExpectedCursor: 2, NewCursor: 3, ExpectedHead: 2, Entries: []store.Record{rec("c")},
			Intents:      []vocab.Intent{{IntentHash: "i1", Kind: "k"}, {IntentHash: "i3", Kind: "k"}},
			Timers:       []vocab.TimerSet{{IntentHash: "t2", DeliverAt: at}, {IntentHash: "t3", DeliverAt: at}},
			CancelTimers: []string{"t1", "unknown", "vt"}}, false},
		{"v", store.CommitBatch{ExpectedCursor: 1, NewCursor: 1, ExpectedHead: 1, Timers: []vocab.TimerSet{{IntentHash: "vt", DeliverAt: at}}}, false},
		{"w", store.CommitBatch{ExpectedCursor: 3, NewCursor: 3, ExpectedHead: 3, Entries: []store.Record{rec("d")}}, true},
		{"w", store.CommitBatch{ExpectedCursor: 3, NewCursor: 3, ExpectedHead: 4, Entries: []store.Record{rec("last")},
			Intents: []vocab.Intent{{IntentHash: "i4", Kind: "k"}}, CancelTimers: []string{"t3"},
			Status: &store.StatusChange{Status: store.WorldArchived, Reason: "run completed"}}, false},
		{"v", store.CommitBatch{ExpectedCursor: 1, NewCursor: 2, ExpectedHead: 1,
			Status: &store.StatusChange{Status: store.WorldPaused, Reason: "operator"}}, false},
	}
	epochs := map[string]uint64{}
	for _, s := range []*Store{spec, checked} {
		epochs["w"] = spawnCached(t, s, "w", 3)
		epochs["v"] = spawnCached(t, s, "v", 2)
	}
	run := func(s *Store, c cycle) (string, error) {
		if c.drain {
			out, err := s.DrainToJournal(bg, c.world, epochs[c.world], c.b.ExpectedCursor, c.b.ExpectedHead, c.b.NewCursor, c.b.Entries)
			return cycleAnswer(store.CommitResult{Appended: out}), err
		}
		res, err := s.Commit(bg, c.world, epochs[c.world], c.b)
		return cycleAnswer(res), err
	}
	for i, c := range cycles {
		var got string
		var err error
		rt, misses := trips(spec, func() { got, err = run(spec, c) })
		if err != nil {
			t.Fatalf("cycle %d of %s: %v", i, c.world, err)
		}
		if rt != 1 || misses != 0 {
			t.Fatalf("cycle %d of %s took %d round trips (%d misses), want 1 (0)", i, c.world, rt, misses)
		}
		checked.b.heads.miss([]string{c.world})
		var want string
		rt, misses = trips(checked, func() { want, err = run(checked, c) })
		if err != nil || rt != 2 || misses != 0 {
			t.Fatalf("cycle %d of %s on the checked path: %v, %d round trips (%d misses), want 2 (0)", i, c.world, err, rt, misses)
		}
		if got != want {
			t.Fatalf("cycle %d of %s answered\n%s\non the speculative path, and\n%s\non the checked path", i, c.world, got, want)
		}
	}
	if got, want := dumpState(t, spec), dumpState(t, checked); got != want {
		t.Fatalf("the speculative path left\n%s\nthe checked path\n%s", got, want)
	}

	// What the rows say, in the contract's terms.
	w, err := spec.GetWorld(bg, "w")
	if err != nil || w.Status != store.WorldArchived || w.StatusReason != "run completed" || w.StatusChangedAt.IsZero() {
		t.Fatalf("w = %+v, %v; want archived, with its reason and time", w, err)
	}
	l, _, err := spec.GetLease(bg, "w")
	if err != nil || l.Holder != "" || l.Epoch != epochs["w"] || l.ExpiresAt.After(w.StatusChangedAt) {
		t.Fatalf("w's lease = %+v, %v; want released at epoch %d, expired by %v", l, err, epochs["w"], w.StatusChangedAt)
	}
	if c, _ := spec.Cursor(bg, "w"); c != 3 {
		t.Fatalf("w's cursor = %d, want 3", c)
	}
	if ts, err := spec.ListTimers(bg, "w", 10); err != nil || len(ts) != 1 || ts[0].IntentHash != "t2" {
		t.Fatalf("w's timers = %+v, %v; want t2 alone", ts, err)
	}
	conn := rawConn(t, spec.Schema())
	var drains string
	if err := conn.QueryRow(bg, `SELECT string_agg(world || ':' || lo || '-' || hi, ' ' ORDER BY world, lo) FROM inbox_drains`).Scan(&drains); err != nil {
		t.Fatal(err)
	}
	if drains != "v:0-1 v:1-2 w:0-2 w:2-3" {
		t.Fatalf("inbox drains = %q, want every cursor move once", drains)
	}
}

// A Commit whose speculation meets a wrong guess rolls back whole and is
// decided again by the checked path: the store answers what the checked
// path answers (checked again here with the world's cache cooled down, so
// that the second call takes the checked path alone), writes nothing on a
// refusal, and a Commit with a Snapshot never speculates.
func TestSpeculativeCommitFallsBackOnEveryWrongGuess(t *testing.T) {
	t.Parallel()
	a, b, clk := twoMachines(t)
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	cycle := func(cursor, newCursor, head uint64, keys ...string) store.CommitBatch {
		bt := store.CommitBatch{ExpectedCursor: cursor, NewCursor: newCursor, ExpectedHead: head,
			Intents: []vocab.Intent{{IntentHash: "i-" + keys[0], Kind: "k"}},
			Timers:  []vocab.TimerSet{{IntentHash: "t-" + keys[0], DeliverAt: at}}}
		for _, k := range keys {
			bt.Entries = append(bt.Entries, rec(k))
		}
		return bt
	}
	fenced := func(world string, epoch uint64) store.AppendOptions {
		return store.AppendOptions{Fence: &store.Fence{World: world, Epoch: epoch}}
	}
	for _, c := range []struct {
		name string
		// prepare spawns the world (head cached by a), makes a's guess
		// wrong, and returns the Commit's epoch and batch.
		prepare func(world string) (uint64, store.CommitBatch)
		want    error // nil: the Commit succeeds
		head    uint64
	}{
		{"head moved by another machine, stale ExpectedHead", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			if _, err := b.Append(bg, w, []store.Record{rec("other")}, fenced(w, e)); err != nil {
				t.Fatal(err)
			}
			return e, cycle(0, 1, 0, "mine")
		}, store.ErrHeadMismatch, 1},
		{"head moved by another machine, ExpectedHead right", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			if _, err := b.Append(bg, w, []store.Record{rec("other")}, fenced(w, e)); err != nil {
				t.Fatal(err)
			}
			return e, cycle(0, 1, 1, "mine")
		}, nil, 2},
		{"cursor moved by another machine", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 2)
			if _, err := b.DrainToJournal(bg, w, e, 0, 0, 1, nil); err != nil {
				t.Fatal(err)
			}
			return e, cycle(0, 1, 0, "mine")
		}, store.ErrCursorMismatch, 0},
		{"lease taken over", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			if err := b.Release(bg, w, "A", e); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Acquire(bg, w, "B", time.Minute); err != nil {
				t.Fatal(err)
			}
			return e, cycle(0, 1, 0, "mine")
		}, store.ErrFenced, 0},
		{"lease released, with a Status", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			if err := b.Release(bg, w, "A", e); err != nil {
				t.Fatal(err)
			}
			bt := cycle(0, 1, 0, "mine")
			bt.Status = &store.StatusChange{Status: store.WorldArchived, Reason: "done"}
			return e, bt
		}, store.ErrFenced, 0},
		// A lone Commit ending its lease speculates through guard_end.
		{"head moved by another machine, with a Status", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			if _, err := b.Append(bg, w, []store.Record{rec("other")}, fenced(w, e)); err != nil {
				t.Fatal(err)
			}
			bt := cycle(0, 1, 0, "mine")
			bt.Status = &store.StatusChange{Status: store.WorldArchived, Reason: "done"}
			return e, bt
		}, store.ErrHeadMismatch, 1},
		{"cursor moved by another machine, with a Status", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 2)
			if _, err := b.DrainToJournal(bg, w, e, 0, 0, 1, nil); err != nil {
				t.Fatal(err)
			}
			bt := cycle(0, 1, 0, "mine")
			bt.Status = &store.StatusChange{Status: store.WorldArchived, Reason: "done"}
			return e, bt
		}, store.ErrCursorMismatch, 0},
		{"lease taken over, with a Status", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			if err := b.Release(bg, w, "A", e); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Acquire(bg, w, "B", time.Minute); err != nil {
				t.Fatal(err)
			}
			bt := cycle(0, 1, 0, "mine")
			bt.Status = &store.StatusChange{Status: store.WorldArchived, Reason: "done"}
			return e, bt
		}, store.ErrFenced, 0},
		{"cursor past the last seq", func(w string) (uint64, store.CommitBatch) {
			return spawnCached(t, a, w, 1), cycle(0, 2, 0, "mine")
		}, store.ErrInvalid, 0},
		{"cursor past the last seq, with a Status", func(w string) (uint64, store.CommitBatch) {
			bt := cycle(0, 2, 0, "mine")
			bt.Status = &store.StatusChange{Status: store.WorldPaused, Reason: "x"}
			return spawnCached(t, a, w, 1), bt
		}, store.ErrInvalid, 0},
		// Last: the clock moves for both machines.
		{"lease expired", func(w string) (uint64, store.CommitBatch) {
			e := spawnCached(t, a, w, 1)
			clk.advance(2 * time.Minute)
			return e, cycle(0, 1, 0, "mine")
		}, store.ErrFenced, 0},
	} {
		w := strings.ReplaceAll(c.name, " ", "-")
		w = strings.ReplaceAll(w, ",", "")
		e, bt := c.prepare(w)
		var res store.CommitResult
		var err error
		rt, misses := trips(a, func() { res, err = a.Commit(bg, w, e, bt) })
		// The speculation (one trip) rolled back; the checked path took two.
		if rt != 3 || misses != 1 {
			t.Fatalf("%s: %d round trips, %d misses; want 3 (a speculation, then the checked path) and 1", c.name, rt, misses)
		}
		if c.want == nil {
			if err != nil || res.Head != c.head || len(res.Appended) != 1 || res.Appended[0].RunSeq != c.head || res.Published != 1 || res.Scheduled != 1 {
				t.Fatalf("%s: %+v, %v; want head %d", c.name, res, err, c.head)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		a.b.heads.miss([]string{w})
		_, again := a.Commit(bg, w, e, bt)
		if again == nil || again.Error() != err.Error() {
			t.Fatalf("%s: the store answered %v, the checked path %v", c.name, err, again)
		}
		if h, _ := a.Head(bg, w); h != c.head {
			t.Fatalf("%s: head %d after a refused Commit, want %d", c.name, h, c.head)
		}
		if effs, _ := a.ListEffects(bg, w, 0, 10); len(effs) != 0 {
			t.Fatalf("%s: a refused Commit published %+v", c.name, effs)
		}
		if ts, _ := a.ListTimers(bg, w, 10); len(ts) != 0 {
			t.Fatalf("%s: a refused Commit scheduled %+v", c.name, ts)
		}
		if wd, err := a.GetWorld(bg, w); err != nil || wd.Status != store.WorldActive {
			t.Fatalf("%s: world %+v, %v after a refused Commit, want active", c.name, wd, err)
		}
	}

	// A Snapshot's checks need the stored snapshot: the checked path, at
	// once.
	e := spawnCached(t, a, "snap", 1)
	bt := cycle(0, 1, 0, "s1", "s2")
	bt.Snapshot = &store.Snapshot{Height: 2, State: []byte("state"), StateHash: "h2"}
	var res store.CommitResult
	var err error
	rt, misses := trips(a, func() { res, err = a.Commit(bg, "snap", e, bt) })
	if err != nil || res.Head != 2 || rt != 2 || misses != 0 {
		t.Fatalf("Commit with a Snapshot: %+v, %v in %d round trips (%d misses); want head 2 in 2 (0)", res, err, rt, misses)
	}
	if sn, ok, err := a.ActiveSnapshot(bg, "snap"); err != nil || !ok || sn.Height != 2 || sn.StateHash != "h2" {
		t.Fatalf("the Commit's snapshot: %+v, %v, %v", sn, ok, err)
	}
	// The next Commit without one speculates again.
	rt, misses = trips(a, func() {
		res, err = a.Commit(bg, "snap", e, store.CommitBatch{ExpectedCursor: 1, NewCursor: 1, ExpectedHead: 2, Entries: []store.Record{rec("s3")}})
	})
	if err != nil || res.Head != 3 || rt != 1 || misses != 0 {
		t.Fatalf("Commit after the snapshot's: %+v, %v in %d round trips (%d misses); want head 3 in 1 (0)", res, err, rt, misses)
	}
}

// A batch where a Commit ends its world's lease and a later request of
// that world follows takes the checked path (which fences the later one);
// without such a request, a batch of several worlds' appends, Commits and
// a Commit with a Status is one speculative transaction of one round trip.
func TestSpeculativeStatusCommitInABatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	ew, ev := spawnCached(t, s, "w", 1), spawnCached(t, s, "v", 0)
	appendTo := func(world string, epoch uint64, key string) *appendReq {
		r := newAppendReq(bg, "append", world, []store.Record{rec(key)})
		r.opts = store.AppendOptions{Fence: &store.Fence{World: world, Epoch: epoch}}
		return r
	}
	commit := func(world string, epoch uint64, b store.CommitBatch) *appendReq {
		r := newAppendReq(bg, "commit", world, b.Entries)
		r.head, r.commit = store.Head(b.ExpectedHead), &commitReq{epoch: epoch, b: &b}
		return r
	}
	runBatch := func(batch []*appendReq) (roundTrips, misses uint64) {
		rt, m := trips(s, func() {
			s.b.runAppends(batch)
			for _, r := range batch {
				<-r.done
			}
		})
		return rt, m
	}

	batch := []*appendReq{
		appendTo("w", ew, "w-1"),
		appendTo("v", ev, "v-1"),
		commit("v", ev, store.CommitBatch{ExpectedHead: 1, Entries: []store.Record{rec("v-2")}}),
		commit("w", ew, store.CommitBatch{ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 1, Entries: []store.Record{rec("w-2")},
			Status: &store.StatusChange{Status: store.WorldArchived, Reason: "done"}}),
		appendTo("v", ev, "v-3"),
	}
	if rt, m := runBatch(batch); rt != 1 || m != 0 {
		t.Fatalf("the batch took %d round trips (%d misses), want 1 (0)", rt, m)
	}
	for i, want := range []uint64{1, 1, 2, 2, 3} {
		if r := batch[i].res; r.err != nil || len(r.out) != 1 || r.out[0].RunSeq != want {
			t.Fatalf("request %d: %+v, %v; want runSeq %d", i, r.out, r.err, want)
		}
	}
	if r := batch[3].res; !r.statusChanged || !r.leaseEnded {
		t.Fatalf("the status Commit's result = %+v, want the status changed and the lease ended", r)
	}
	if w, err := s.GetWorld(bg, "w"); err != nil || w.Status != store.WorldArchived {
		t.Fatalf("w = %+v, %v; want archived", w, err)
	}

	// v's lease ends in the batch, and an append of v follows: not a
	// speculation.
	batch = []*appendReq{
		commit("v", ev, store.CommitBatch{ExpectedHead: 3, Entries: []store.Record{rec("v-4")},
			Status: &store.StatusChange{Status: store.WorldPaused, Reason: "operator"}}),
		appendTo("v", ev, "v-5"),
	}
	if rt, m := runBatch(batch); rt != 2 || m != 0 {
		t.Fatalf("the batch took %d round trips (%d misses), want the checked path's 2 (0)", rt, m)
	}
	if r := batch[0].res; r.err != nil || r.head != 4 {
		t.Fatalf("the status Commit: head %d, %v", r.head, r.err)
	}
	if r := batch[1].res; !errors.Is(r.err, store.ErrFenced) {
		t.Fatalf("the append after the status Commit: %+v, %v; want ErrFenced", r.out, r.err)
	}
	if h, _ := s.Head(bg, "v"); h != 4 {
		t.Fatalf("v's head = %d, want 4", h)
	}
}

// The speculative path takes the checked path's locks in its order. A
// session holds world w's lease row FOR SHARE, as a group commit with an
// append of w does before it locks w's stream row. A Commit archiving w
// (one round trip, speculative) then waits for the lease row holding w's
// world row (FOR UPDATE: an Acquire could not take it FOR KEY SHARE) but
// not w's stream row, so the session's lock of the stream row is granted:
// no lock upgrade, no deadlock, and both finish.
func TestSpeculativeStatusCommitLocksWorldThenLeaseThenStream(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	e := spawnCached(t, s, "w", 1)
	conn := rawConn(t, s.Schema())
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	if _, err := tx.Exec(bg, `SET LOCAL lock_timeout = '20s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `SELECT 1 FROM leases WHERE world = 'w' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res    store.CommitResult
		err    error
		rt, ms uint64
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.rt, a.ms = trips(s, func() {
			a.res, a.err = s.Commit(bg, "w", e, store.CommitBatch{ExpectedCursor: 0, NewCursor: 1, Entries: []store.Record{rec("last")},
				Status: &store.StatusChange{Status: store.WorldArchived, Reason: "done"}})
		})
		done <- a
	}()
	// Wait until the Commit waits for the session, in guard_end (a lone
	// Commit ending its world's lease).
	probe := rawConn(t, s.Schema())
	for {
		var waiting bool
		if err := probe.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%guard_end(%')`, conn.PgConn().PID()).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("the Commit finished while w's lease row was held: %+v, %v", a.res, a.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	ptx, err := probe.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ptx.Exec(bg, `SELECT 1 FROM worlds WHERE world = 'w' FOR KEY SHARE NOWAIT`); sqlState(err) != "55P03" {
		t.Fatalf("w's world row, while the Commit waits for its lease row: %v, want it locked (55P03)", err)
	}
	if err := ptx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `SELECT 1 FROM streams WHERE stream = 'w' FOR UPDATE NOWAIT`); err != nil {
		t.Fatalf("w's stream row, while the Commit waits for its lease row: %v (%s)", err, sqlState(err))
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.Head != 1 || a.rt != 1 || a.ms != 0 {
		t.Fatalf("the Commit: %+v, %v in %d round trips (%d misses); want head 1 in 1 (0)", a.res, a.err, a.rt, a.ms)
	}
	if d := s.Stats().Deadlocks; d != 0 {
		t.Fatalf("%d deadlocks", d)
	}
}

// Two machines race Commits, fenced appends and bulk renewals on the same
// worlds, then Commits that archive them while the other machine's appends
// and renewals go on. No call fails but for the refusals the race makes
// (a stale head or cursor, a fence after the archive), no transaction
// deadlocks, each world's heads are gapless, every answered event is
// stored once at the runSeq it was answered, every cursor move is drained
// once, and every answered cycle's intent is queued.
func TestTwoStoresRacingCommitsAppendsAndRenewals(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	const worlds, items, commitsEach, appendsEach = 3, 40, 6, 12
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	names := make([]string, worlds)
	refs := make([]store.LeaseRef, worlds)
	for i := range names {
		names[i] = fmt.Sprint("w", i)
		refs[i] = store.LeaseRef{World: names[i], Epoch: spawnCached(t, a, names[i], items)}
	}
	epoch := func(w string) uint64 {
		return refs[slices.IndexFunc(refs, func(r store.LeaseRef) bool { return r.World == w })].Epoch
	}

	var mu sync.Mutex
	answered := map[string]map[string]uint64{} // world -> event id -> runSeq
	var published []string
	moves := map[string]uint64{} // world -> successful cursor moves
	record := func(w string, out []store.Appended) {
		mu.Lock()
		defer mu.Unlock()
		if answered[w] == nil {
			answered[w] = map[string]uint64{}
		}
		for _, o := range out {
			if o.Idempotent {
				t.Errorf("%s: %s answered as a duplicate", w, o.EventID)
			}
			if prev, ok := answered[w][o.EventID]; ok {
				t.Errorf("%s: %s answered at %d and at %d", w, o.EventID, prev, o.RunSeq)
			}
			answered[w][o.EventID] = o.RunSeq
		}
	}
	// cycle commits one cycle of w from s, reading its head and cursor
	// first and trying again after a refusal the race explains; it returns
	// false once the world is archived (ErrFenced).
	cycle := func(s *Store, w, id string, status *store.StatusChange) bool {
		for {
			h, err := s.Head(bg, w)
			if err != nil {
				t.Error(err)
				return false
			}
			c, err := s.Cursor(bg, w)
			if err != nil {
				t.Error(err)
				return false
			}
			next := min(c+1, items)
			res, err := s.Commit(bg, w, epoch(w), store.CommitBatch{ExpectedCursor: c, NewCursor: next, ExpectedHead: h,
				Entries: []store.Record{rec(id)}, Intents: []vocab.Intent{{IntentHash: "i-" + id, Kind: "k"}},
				Timers: []vocab.TimerSet{{IntentHash: "t-" + id, DeliverAt: at}}, CancelTimers: []string{"t-" + id + "-none"},
				Status: status})
			switch {
			case errors.Is(err, store.ErrHeadMismatch), errors.Is(err, store.ErrCursorMismatch):
				continue
			case errors.Is(err, store.ErrFenced) && status == nil:
				return false
			case err != nil:
				t.Errorf("%s: Commit %s: %v", w, id, err)
				return false
			}
			if res.Head != h+1 || res.Published != 1 || res.Scheduled != 1 {
				t.Errorf("%s: Commit %s = %+v at head %d", w, id, res, h)
			}
			record(w, res.Appended)
			mu.Lock()
			published = append(published, "i-"+id)
			if next != c {
				moves[w]++
			}
			mu.Unlock()
			return true
		}
	}
	// appender appends n events to w from s, one at a time; archiving: the
	// world may be archived meanwhile (ErrFenced ends it).
	appender := func(s *Store, w, prefix string, n int, archiving bool) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			out, err := s.Append(bg, w, []store.Record{rec(id)}, store.AppendOptions{Fence: &store.Fence{World: w, Epoch: epoch(w)}})
			if archiving && errors.Is(err, store.ErrFenced) {
				return
			}
			if err != nil {
				t.Errorf("%s: Append %s: %v", w, id, err)
				return
			}
			record(w, out)
		}
	}
	renewer := func(s *Store, stop <-chan struct{}, archiving bool) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := s.RenewLeases(bg, "A", refs, time.Minute)
			if err != nil {
				t.Errorf("RenewLeases: %v", err)
				return
			}
			for _, r := range res {
				if r.Err != nil && !(archiving && errors.Is(r.Err, store.ErrNotHolder)) {
					t.Errorf("renewal of %s: %v", r.World, r.Err)
					return
				}
			}
		}
	}

	// Cycles, appends and renewals on both machines.
	stop := make(chan struct{})
	var renewers, writers sync.WaitGroup
	for _, s := range []*Store{a, b} {
		renewers.Go(func() { renewer(s, stop, false) })
	}
	for m, s := range []*Store{a, b} {
		for _, w := range names {
			writers.Go(func() {
				for i := range commitsEach {
					if !cycle(s, w, fmt.Sprintf("%s-m%d-c%d", w, m, i), nil) {
						return
					}
				}
			})
			writers.Go(func() { appender(s, w, fmt.Sprintf("%s-m%d-a", w, m), appendsEach, false) })
		}
	}
	writers.Wait()
	close(stop)
	renewers.Wait()

	// a archives every world while b appends and renews.
	stop = make(chan struct{})
	renewers.Go(func() { renewer(b, stop, true) })
	for _, w := range names {
		writers.Go(func() { appender(b, w, w+"-late", appendsEach, true) })
		writers.Go(func() { cycle(a, w, w+"-last", &store.StatusChange{Status: store.WorldArchived, Reason: "done"}) })
	}
	writers.Wait()
	close(stop)
	renewers.Wait()
	if t.Failed() {
		return
	}

	conn := rawConn(t, a.Schema())
	for _, w := range names {
		evs, err := a.Read(bg, w, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		head, _ := a.Head(bg, w)
		if uint64(len(evs)) != head || len(evs) != len(answered[w]) {
			t.Fatalf("%s: %d events stored, head %d, %d answered", w, len(evs), head, len(answered[w]))
		}
		for i, ev := range evs {
			if ev.RunSeq != uint64(i+1) {
				t.Fatalf("%s: the %dth event is at runSeq %d: a gap", w, i+1, ev.RunSeq)
			}
			if seq, ok := answered[w][ev.EventID]; !ok || seq != ev.RunSeq {
				t.Fatalf("%s: %s stored at %d, answered at %d (%v)", w, ev.EventID, ev.RunSeq, seq, ok)
			}
		}
		cursor, _ := a.Cursor(bg, w)
		if cursor != moves[w] {
			t.Fatalf("%s: cursor %d after %d answered moves", w, cursor, moves[w])
		}
		var drained, rows int64
		if err := conn.QueryRow(bg, `SELECT coalesce(sum(hi - lo), 0), count(*) FROM inbox_drains WHERE world = $1`, w).Scan(&drained, &rows); err != nil {
			t.Fatal(err)
		}
		if drained != int64(cursor) || rows != int64(moves[w]) {
			t.Fatalf("%s: %d drain rows covering %d items, want %d covering %d", w, rows, drained, moves[w], cursor)
		}
		if wd, err := a.GetWorld(bg, w); err != nil || wd.Status != store.WorldArchived {
			t.Fatalf("%s = %+v, %v; want archived", w, wd, err)
		}
	}
	var queued []string
	rows, err := conn.Query(bg, `SELECT intent_hash FROM effects ORDER BY intent_hash`)
	if err != nil {
		t.Fatal(err)
	}
	if queued, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	slices.Sort(published)
	if !slices.Equal(queued, published) {
		t.Fatalf("queued intents %v, answered cycles published %v", queued, published)
	}
	st, sb := a.Stats(), b.Stats()
	t.Logf("machine a: %d requests in %d transactions, %d speculation misses; machine b: %d in %d, %d misses",
		st.AppendRequests, st.AppendTransactions, st.SpeculationMisses, sb.AppendRequests, sb.AppendTransactions, sb.SpeculationMisses)
	if st.Deadlocks+sb.Deadlocks != 0 {
		t.Fatalf("%d deadlocks broken by PostgreSQL", st.Deadlocks+sb.Deadlocks)
	}
}
