package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
)

// The operator's lists (worlds, runs, workers, effects, timers) share one
// shape: filters, a keyset cursor ("after": the next field of the page
// before) and a limit, default DefaultListLimit, at most MaxListLimit (a
// larger limit is refused, never clamped, so a short page always means
// the end). A page's "next" is set only when more rows follow; rows
// written between two pages never shift a page, so paging lists every row
// once.
const (
	DefaultListLimit = 100
	MaxListLimit     = store.MaxListLimit
)

// listWindow is a page request over rows ordered by id: a case-insensitive
// id substring (q), an id prefix, the cursor and the limit.
type listWindow struct {
	search, prefix, after string
	limit                 int
}

// windowParams reads q, prefix, after and limit.
func windowParams(q url.Values, def int) (listWindow, error) {
	lw := listWindow{search: strings.ToLower(q.Get("q")), prefix: q.Get("prefix"), after: q.Get("after")}
	var err error
	lw.limit, err = limitParam(q, def, MaxListLimit)
	return lw, err
}

// matches reports whether an id passes the window's search and prefix.
func (lw listWindow) matches(id string) bool {
	return strings.HasPrefix(id, lw.prefix) && (lw.search == "" || strings.Contains(strings.ToLower(id), lw.search))
}

// pageByID cuts the page after lw.after out of rows sorted by id, and the
// cursor of the page after it ("" when this page is the last).
func pageByID[T any](rows []T, id func(T) string, lw listWindow) ([]T, string) {
	out := []T{}
	for _, r := range rows {
		if lw.after != "" && id(r) <= lw.after {
			continue
		}
		if len(out) == lw.limit {
			return out, id(out[len(out)-1])
		}
		out = append(out, r)
	}
	return out, ""
}

// listWorlds is GET /v1/worlds: worlds of every hosted universe or one
// (universe), with a status, searched by id (q, prefix), paged by id.
func (s *Server) listWorlds(r *http.Request, _ *reqCtx) (int, any, error) {
	q, err := query(r, "universe", "status", "detail", "q", "prefix", "after", "limit")
	if err != nil {
		return 0, nil, err
	}
	status := store.WorldStatus(q.Get("status"))
	switch status {
	case "", store.WorldActive, store.WorldPaused, store.WorldArchived:
	default:
		return 0, nil, invalid(`query parameter "status" must be active, paused or archived`)
	}
	var detail bool
	switch q.Get("detail") {
	case "", "false":
	case "true":
		detail = true
	default:
		return 0, nil, invalid(`query parameter "detail" must be true or false`)
	}
	universe := q.Get("universe")
	if universe != "" {
		if err := checkID("universe", universe); err != nil {
			return 0, nil, err
		}
	}
	// Existing clients read every world in one answer: the default page is
	// the largest.
	lw, err := windowParams(q, MaxListLimit)
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	recs, err := s.worldRecords(ctx, universe, status)
	if err != nil {
		return 0, nil, err
	}
	recs = slices.DeleteFunc(recs, func(w store.World) bool { return !lw.matches(w.ID) })
	page, next := pageByID(recs, func(w store.World) string { return w.ID }, lw)
	if !detail {
		out := make([]World, 0, len(page))
		for _, w := range page {
			out = append(out, worldOf(w))
		}
		return http.StatusOK, worldsResp{Worlds: out, Next: next}, nil
	}
	out := make([]WorldView, 0, len(page))
	for _, w := range page {
		v, err := s.worldView(ctx, w)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, v)
	}
	return http.StatusOK, worldViewsResp{Worlds: out, Next: next}, nil
}

// Worker statuses: live (a heartbeat within the server's WorkerLiveFor),
// draining (live and marked draining) and dead (no heartbeat within
// WorkerLiveFor, draining or not: a dead worker drains nothing).
const (
	WorkerLive     = "live"
	WorkerDraining = "draining"
	WorkerDead     = "dead"
)

func workerStatus(live, draining bool) string {
	switch {
	case !live:
		return WorkerDead
	case draining:
		return WorkerDraining
	}
	return WorkerLive
}

// workers is GET /v1/workers: the inventory with each worker's status,
// filtered by status, searched by id, paged by id.
func (s *Server) workers(r *http.Request, _ *reqCtx) (int, any, error) {
	q, err := query(r, "status", "q", "prefix", "after", "limit")
	if err != nil {
		return 0, nil, err
	}
	status := q.Get("status")
	switch status {
	case "", WorkerLive, WorkerDraining, WorkerDead:
	default:
		return 0, nil, invalid(`query parameter "status" must be live, draining or dead`)
	}
	lw, err := windowParams(q, MaxListLimit)
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	ws, err := s.cfg.Store.ListWorkers(ctx)
	if err != nil {
		return 0, nil, err
	}
	now, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return 0, nil, err
	}
	// Status is the store clock's, read before the page is cut, so that
	// the world counts are read only for the page's workers.
	ws = slices.DeleteFunc(ws, func(w store.WorkerInfo) bool {
		return !lw.matches(w.ID) || (status != "" && workerStatus(s.live(w, now), w.Draining) != status)
	})
	page, next := pageByID(ws, func(w store.WorkerInfo) string { return w.ID }, lw)
	out := make([]Worker, 0, len(page))
	for _, w := range page {
		wv, err := s.workerView(ctx, w, now)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, wv)
	}
	return http.StatusOK, workersResp{Workers: out, Next: next}, nil
}

// live says whether w's last heartbeat is within WorkerLiveFor of now.
func (s *Server) live(w store.WorkerInfo, now time.Time) bool {
	return now.Sub(w.HeartbeatAt) < s.cfg.WorkerLiveFor
}

// listRuns is GET /v1/runs: runs of every workflow or one, with a status,
// searched by id or workflow name (q) and id prefix, paged by id.
func (s *Server) listRuns(r *http.Request, _ *reqCtx) (int, any, error) {
	q, err := queryRepeating(r, []string{"attr"}, "workflow", "status", "version", "q", "prefix", "after", "limit")
	if err != nil {
		return 0, nil, err
	}
	attrs, err := attrFilter(q["attr"])
	if err != nil {
		return 0, nil, err
	}
	var version uint64
	if v := q.Get("version"); v != "" {
		if version, err = strconv.ParseUint(v, 10, 64); err != nil || version == 0 {
			return 0, nil, invalid(`query parameter "version" must be a workflow version (a positive integer)`)
		}
	}
	status := q.Get("status")
	if status != "" && !slices.Contains(runStatuses[:], workflow.RunStatus(status)) {
		return 0, nil, invalid(`query parameter "status" must be pending, queued, running, paused, blocked, unrunnable, completed, failed or cancelled`)
	}
	lw, err := windowParams(q, MaxListLimit)
	if err != nil {
		return 0, nil, err
	}
	rb := s.cfg.Runs
	if rb == nil {
		// Not an empty list: a client (the dashboard) tells "this server
		// runs no workflows" from "no run yet".
		return 0, nil, apiErr(http.StatusNotFound, CodeNotFound, "this server serves no workflows")
	}
	names := rb.Workflows.Names()
	if wf := q.Get("workflow"); wf != "" {
		if _, ok := rb.Workflows.Lookup(wf); !ok {
			return 0, nil, invalid(fmt.Sprintf("unknown workflow %q", truncate(wf, 128)))
		}
		names = []string{wf}
	}
	rows, err := s.runRowsAt(r.Context(), names, runFilter{status: status, version: version, attrs: attrs})
	if err != nil {
		return 0, nil, err
	}
	search := lw.search
	lw.search = ""
	rows = slices.DeleteFunc(rows, func(run Run) bool {
		return !lw.matches(run.ID) || (search != "" &&
			!strings.Contains(strings.ToLower(run.ID), search) && !strings.Contains(strings.ToLower(run.Workflow), search))
	})
	page, next := pageByID(rows, func(run Run) string { return run.ID }, lw)
	return http.StatusOK, runsResp{Runs: page, Next: next}, nil
}

// attrFilter reads GET /v1/runs's attr parameters, each "key:value" (the
// key is up to the first colon, which no key holds): a run must carry every
// pair.
func attrFilter(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, ":")
		if !ok || k == "" || v == "" {
			return nil, invalid(fmt.Sprintf(`query parameter "attr" must be key:value, not %q`, truncate(p, 64)))
		}
		if _, dup := out[k]; dup {
			return nil, invalid(fmt.Sprintf(`query parameter "attr" names the key %q twice`, truncate(k, 64)))
		}
		out[k] = v
	}
	if err := workflow.CheckAttributes(out); err != nil {
		return nil, invalid(`query parameter "attr": ` + strings.TrimPrefix(err.Error(), "workflow: "))
	}
	return out, nil
}

// effects is GET /v1/effects: effects across worlds (or one), of a kind,
// in a state, in queue (seq) order; after is the seq of the page before.
// Without a status it lists the open ones (pending, inflight and held), as
// a queue view does; "all" adds the done and withdrawn records the store
// keeps until swept.
func (s *Server) effects(r *http.Request, rc *reqCtx) (int, any, error) {
	q, err := query(r, "world", "kind", "status", "after", "limit")
	if err != nil {
		return 0, nil, err
	}
	f := store.EffectFilter{World: q.Get("world"), Kind: q.Get("kind")}
	rc.world = f.World
	if err := filterIDs(q, "world", "kind"); err != nil {
		return 0, nil, err
	}
	switch st := q.Get("status"); st {
	case "", "open":
		f.States = []vocab.EffectState{vocab.EffectPending, vocab.EffectInflight, vocab.EffectHeld}
	case "all":
	case string(vocab.EffectPending), string(vocab.EffectInflight), string(vocab.EffectHeld), string(vocab.EffectDone),
		string(vocab.EffectWithdrawn):
		f.States = []vocab.EffectState{vocab.EffectState(st)}
	default:
		return 0, nil, invalid(`query parameter "status" must be open (the default: pending, inflight or held), pending, inflight, held, done, withdrawn or all`)
	}
	if err := s.worldKnown(r.Context(), f.World); err != nil {
		return 0, nil, err
	}
	if f.AfterSeq, err = uintParam(q, "after", 0); err != nil {
		return 0, nil, err
	}
	if err := store.CheckInt("api", "after", f.AfterSeq); err != nil {
		return 0, nil, invalid(`query parameter "after" is out of range`)
	}
	if f.Limit, err = limitParam(q, DefaultListLimit, MaxListLimit); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	items, err := s.cfg.Store.QueryEffects(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	next := ""
	if len(items) == f.Limit {
		more := f
		more.AfterSeq, more.Limit = items[len(items)-1].Seq, 1
		probe, err := s.cfg.Store.QueryEffects(ctx, more)
		if err != nil {
			return 0, nil, err
		}
		if len(probe) > 0 {
			next = strconv.FormatUint(more.AfterSeq, 10)
		}
	}
	out := make([]Effect, 0, len(items))
	for _, it := range items {
		e := Effect{
			IntentHash: it.IntentHash, World: it.World, Kind: it.Kind, Origin: it.Origin, Seq: it.Seq,
			State: string(it.State), EnqueuedAt: utc(it.EnqueuedAt), Attempt: it.Attempt, ClaimedBy: it.ClaimedBy,
			ClaimExpires: utc(it.ClaimExpires), Retries: it.Retries, ParamsCBOR: it.Params,
			Failures: it.Failures, HoldReason: it.HoldReason, HeldAt: utc(it.HeldAt),
		}
		if it.State == vocab.EffectPending {
			e.RetryAt = utc(it.RetryAt)
		}
		if js, err := cborToJSON(it.Params); err == nil {
			e.Params = js
		}
		out = append(out, e)
	}
	return http.StatusOK, effectsResp{Effects: out, Next: next}, nil
}

// filterIDs checks the id filters present in q: a filter given is a
// valid id, never empty (an empty one is a client's slip, not "every").
func filterIDs(q url.Values, names ...string) error {
	for _, n := range names {
		if q.Has(n) {
			if err := checkID(n, q.Get(n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// worldKnown answers a filter by a world that does not exist with the
// world's 404, so a mistyped id is not taken for a world with nothing
// queued.
func (s *Server) worldKnown(ctx context.Context, world string) error {
	if world == "" {
		return nil
	}
	_, err := s.cfg.Store.GetWorld(ctx, world)
	return err
}

// TimerCursor is the "after" of GET /v1/timers: the due time of the page
// before's last timer, in Unix nanoseconds, a dot, and its intent hash.
func TimerCursor(t Timer) string {
	return strconv.FormatInt(t.DeliverAt.UnixNano(), 10) + "." + t.IntentHash
}

func parseTimerCursor(s string) (store.TimerCursor, error) {
	if s == "" {
		return store.TimerCursor{}, nil
	}
	ns, hash, ok := strings.Cut(s, ".")
	v, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || hash == "" {
		return store.TimerCursor{}, invalid(`query parameter "after" must be the "next" of the page before`)
	}
	if err := checkID("after", hash); err != nil {
		return store.TimerCursor{}, err
	}
	return store.TimerCursor{DeliverAt: time.Unix(0, v).UTC(), IntentHash: hash}, nil
}

// timers is GET /v1/timers: timers across worlds (or one), in a state, in
// (due time, intent hash) order. Without a status it lists the open ones
// (scheduled and claimed); "all" adds the delivered ones kept until swept.
func (s *Server) timers(r *http.Request, rc *reqCtx) (int, any, error) {
	q, err := query(r, "world", "status", "after", "limit")
	if err != nil {
		return 0, nil, err
	}
	f := store.TimerFilter{World: q.Get("world")}
	rc.world = f.World
	if err := filterIDs(q, "world"); err != nil {
		return 0, nil, err
	}
	switch st := q.Get("status"); st {
	case "", "open":
		f.States = []store.TimerState{store.TimerScheduled, store.TimerClaimed}
	case "all":
	case string(store.TimerScheduled), string(store.TimerClaimed), string(store.TimerDelivered):
		f.States = []store.TimerState{store.TimerState(st)}
	default:
		return 0, nil, invalid(`query parameter "status" must be open (the default: scheduled or claimed), scheduled, claimed, delivered or all`)
	}
	if err := s.worldKnown(r.Context(), f.World); err != nil {
		return 0, nil, err
	}
	if f.After, err = parseTimerCursor(q.Get("after")); err != nil {
		return 0, nil, err
	}
	if f.Limit, err = limitParam(q, DefaultListLimit, MaxListLimit); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	items, err := s.cfg.Store.QueryTimers(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	out := make([]Timer, 0, len(items))
	for _, t := range items {
		out = append(out, Timer{
			IntentHash: t.IntentHash, World: t.World, DeliverAt: utc(t.DeliverAt), State: string(t.State),
			Attempt: t.Attempt, ClaimedBy: t.ClaimedBy, ClaimExpires: utc(t.ClaimExpires),
		})
	}
	next := ""
	if len(items) == f.Limit {
		more := f
		more.After, more.Limit = items[len(items)-1].CursorOf(), 1
		probe, err := s.cfg.Store.QueryTimers(ctx, more)
		if err != nil {
			return 0, nil, err
		}
		if len(probe) > 0 {
			next = TimerCursor(out[len(out)-1])
		}
	}
	return http.StatusOK, timersResp{Timers: out, Next: next}, nil
}

// runActions are the controls that apply to a run in a status: a finished
// run takes none, a paused one resumes, a live one pauses; both of those
// cancel. A blocked or unrunnable run takes the operator's ways out too:
// terminate and reset.
func runActions(status string) []string {
	switch workflow.RunStatus(status) {
	case workflow.StatusCompleted, workflow.StatusFailed, workflow.StatusCancelled:
		return []string{}
	case workflow.StatusPaused:
		return []string{"resume", "cancel", "signal"}
	case workflow.StatusBlocked, workflow.StatusUnrunnable:
		return []string{"pause", "cancel", "signal", "terminate", "reset"}
	}
	return []string{"pause", "cancel", "signal"}
}

// stepDetails reads the run's input from its stream, and fills each
// attempt of v's timeline with what the stream says of it: how it started (the step kind, the effect or timer
// it waits on), the effect's parameters (its input, while the effect
// record is kept), its output and its failure.
func (s *Server) stepDetails(ctx context.Context, v *RunView) error {
	type key struct {
		step    string
		attempt uint64
	}
	idx := map[key]*RunAttempt{}
	for i := range v.Timeline {
		for j := range v.Timeline[i].Attempts {
			a := &v.Timeline[i].Attempts[j]
			idx[key{v.Timeline[i].ID, a.Attempt}] = a
		}
	}
	intents := map[string]*RunAttempt{}
	for after := uint64(0); ; {
		recs, err := s.cfg.Store.Read(ctx, v.ID, after, listPage)
		if err != nil {
			return err
		}
		for _, e := range recs {
			if e.EventType == event.RunStarted {
				if js, err := cborToJSON(e.Payload); err == nil {
					v.Input = rawField(js, "input")
				}
				continue
			}
			a := idx[key{e.StepID, e.LogicalAttemptID}]
			if a == nil || e.StepID == "" {
				continue
			}
			js, err := cborToJSON(e.Payload)
			if err != nil {
				continue // an unreadable payload leaves the attempt as the timeline has it
			}
			switch e.EventType {
			case event.StepStarted:
				a.Started = js
				if h := jsonField(js, "intent"); h != "" {
					intents[h] = a
				}
			case event.StepCompleted:
				a.Output = rawField(js, "value")
			case event.StepFailed:
				a.Failure = js
			}
		}
		if len(recs) < listPage {
			break
		}
		after = recs[len(recs)-1].RunSeq
	}
	if len(intents) == 0 {
		return nil
	}
	for f := (store.EffectFilter{World: v.ID, Limit: MaxListLimit}); ; {
		items, err := s.cfg.Store.QueryEffects(ctx, f)
		if err != nil {
			return err
		}
		for _, it := range items {
			if a := intents[it.IntentHash]; a != nil {
				if js, err := cborToJSON(it.Params); err == nil {
					a.Input, a.EffectKind = js, it.Kind
				}
			}
		}
		if len(items) < f.Limit {
			return nil
		}
		f.AfterSeq = items[len(items)-1].Seq
	}
}

// rawField is the JSON of an object's field, nil when absent.
func rawField(js json.RawMessage, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(js, &m) != nil {
		return nil
	}
	return m[name]
}

// jsonField is an object's string field, "" when absent or not a string.
func jsonField(js json.RawMessage, name string) string {
	var s string
	if json.Unmarshal(rawField(js, name), &s) != nil {
		return ""
	}
	return s
}
