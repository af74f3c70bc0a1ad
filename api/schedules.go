package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
)

// Schedules: durable schedules (plane/schedule) that start a workflow run
// or send a world an event on a cron expression or a fixed interval. The
// server only records them; every node with the orchestrator role runs a
// scheduler that fires them.

// ScheduleTarget is what each tick starts: a run of Workflow with Input,
// or an event of Type with Value sent to World.
type ScheduleTarget struct {
	Workflow string          `json:"workflow,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	World    string          `json:"world,omitempty"`
	Type     string          `json:"type,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
}

// ScheduleSpec is a schedule's cadence and policies (durations as Go
// writes them: "90s", "1h30m").
type ScheduleSpec struct {
	Cron         string         `json:"cron,omitempty"`
	Every        string         `json:"every,omitempty"`
	Offset       string         `json:"offset,omitempty"`
	TimeZone     string         `json:"time_zone,omitempty"`
	Jitter       string         `json:"jitter,omitempty"`
	Overlap      string         `json:"overlap,omitempty"`
	CatchUp      string         `json:"catch_up,omitempty"`
	CatchUpLimit int            `json:"catch_up_limit,omitempty"`
	Target       ScheduleTarget `json:"target"`
}

// CreateScheduleRequest is the body of POST /v1/schedules.
type CreateScheduleRequest struct {
	ID string `json:"id"`
	ScheduleSpec
}

// ScheduleView is a schedule as the API shows it.
type ScheduleView struct {
	ID    string       `json:"id"`
	Spec  ScheduleSpec `json:"spec"`
	State string       `json:"state"` // active or paused
	// NextFireAt is when the scheduler next looks at the schedule (null:
	// paused, or no tick left); NextFireTimes are the next cadence ticks,
	// jitter included.
	NextFireAt    *time.Time  `json:"next_fire_at"`
	NextFireTimes []time.Time `json:"next_fire_times"`
	LastTick      *time.Time  `json:"last_tick"`
	LastFiredAt   *time.Time  `json:"last_fired_at"`
	LastResult    string      `json:"last_result"`
	LastRun       string      `json:"last_run,omitempty"`
	Pending       int         `json:"pending"`
	Buffered      bool        `json:"buffered"`
	Fired         uint64      `json:"fired"`
	Missed        uint64      `json:"missed"`
	Skipped       uint64      `json:"skipped"`
	Failed        uint64      `json:"failed"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
}

type schedulesResp struct {
	Schedules []ScheduleView `json:"schedules"`
	Next      string         `json:"next,omitempty"`
}

// TriggerRequest is the optional body of POST /v1/schedules/{id}/trigger.
// IdempotencyKey makes the trigger safe to retry: a trigger with a key the
// schedule has seen records nothing and answers the first's tick with
// Duplicate true. Without a key each trigger is a new tick.
type TriggerRequest struct {
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// TriggerResult answers POST /v1/schedules/{id}/trigger.
type TriggerResult struct {
	Schedule  ScheduleView `json:"schedule"`
	Tick      string       `json:"tick"`
	Run       string       `json:"run,omitempty"`
	Duplicate bool         `json:"duplicate"`
	// IdempotencyKey is the request's key, echoed (empty: none given).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

func (s *Server) scheduleRoutes() {
	s.route("POST /v1/schedules", false, s.createSchedule)
	s.route("GET /v1/schedules", false, s.listSchedules)
	s.route("GET /v1/schedules/{id}", false, s.getSchedule)
	s.route("DELETE /v1/schedules/{id}", false, s.deleteSchedule)
	s.route("POST /v1/schedules/{id}/pause", false, s.scheduleOp(schedule.Pause))
	s.route("POST /v1/schedules/{id}/resume", false, s.scheduleOp(schedule.Resume))
	s.route("POST /v1/schedules/{id}/trigger", false, s.triggerSchedule)
}

func optDuration(what, v string) (schedule.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, invalid(what + ": " + cleanMessage(err.Error()))
	}
	return schedule.Duration(d), nil
}

// specOf turns the API's spec into the scheduler's: durations parsed,
// JSON values as canonical CBOR. A workflow the server does not serve is
// refused here, where the operator sees it, not at the first tick.
func (s *Server) specOf(in ScheduleSpec) (schedule.Spec, error) {
	out := schedule.Spec{Cron: in.Cron, TimeZone: in.TimeZone, Overlap: schedule.Overlap(in.Overlap),
		CatchUp: schedule.CatchUp(in.CatchUp), CatchUpLimit: in.CatchUpLimit}
	var err error
	if out.Every, err = optDuration("every", in.Every); err != nil {
		return out, err
	}
	if out.Offset, err = optDuration("offset", in.Offset); err != nil {
		return out, err
	}
	if out.Jitter, err = optDuration("jitter", in.Jitter); err != nil {
		return out, err
	}
	t := in.Target
	out.Target = schedule.Target{Workflow: t.Workflow, World: t.World, Type: t.Type}
	if t.Workflow != "" {
		if rb := s.cfg.Runs; rb == nil {
			return out, invalid("no workflows are served")
		} else if _, ok := rb.Workflows.Lookup(t.Workflow); !ok {
			return out, invalid("unknown workflow " + strconv.Quote(truncate(t.Workflow, 128)))
		}
		if out.Target.Input, err = jsonToCBOR(t.Input); err != nil {
			return out, err
		}
	} else if len(t.Input) > 0 {
		return out, invalid("target.input is for workflow targets")
	}
	if t.World != "" {
		if err := checkID("world", t.World); err != nil {
			return out, err
		}
		if out.Target.Value, err = jsonToCBOR(t.Value); err != nil {
			return out, err
		}
	} else if len(t.Value) > 0 {
		return out, invalid("target.value is for world targets")
	}
	if _, err := out.Normalize(); err != nil {
		return out, invalid(cleanMessage(err.Error()))
	}
	return out, nil
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func durString(d schedule.Duration) string {
	if d == 0 {
		return ""
	}
	return time.Duration(d).String()
}

// scheduleView shows sc with its next five cadence ticks.
func scheduleView(sc schedule.Schedule) ScheduleView {
	sp := sc.Spec
	v := ScheduleView{
		ID: sc.ID, State: "active", NextFireAt: optTime(sc.NextFireAt), LastTick: optTime(sc.State.LastTick),
		LastFiredAt: optTime(sc.State.LastFiredAt), LastResult: sc.State.LastResult, LastRun: sc.State.LastRun,
		Pending: len(sc.State.Pending), Buffered: sc.State.Buffered != nil, Fired: sc.State.Fired, Missed: sc.State.Missed,
		Skipped: sc.State.Skipped, Failed: sc.State.Failed, CreatedAt: sc.CreatedAt.UTC(), UpdatedAt: sc.UpdatedAt.UTC(),
		NextFireTimes: []time.Time{},
		Spec: ScheduleSpec{Cron: sp.Cron, Every: durString(sp.Every), Offset: durString(sp.Offset), TimeZone: sp.TimeZone,
			Jitter: durString(sp.Jitter), Overlap: string(sp.Overlap), CatchUp: string(sp.CatchUp), CatchUpLimit: sp.CatchUpLimit,
			Target: ScheduleTarget{Workflow: sp.Target.Workflow, World: sp.Target.World, Type: sp.Target.Type}},
	}
	if sp.Target.Workflow != "" {
		v.Spec.Target.Input, _ = cborToJSON(sp.Target.Input)
	}
	if sp.Target.World != "" {
		v.Spec.Target.Value, _ = cborToJSON(sp.Target.Value)
	}
	if sc.Paused {
		v.State = "paused"
	} else {
		v.NextFireTimes = sc.NextFireTimes(5)
	}
	return v
}

func (s *Server) createSchedule(r *http.Request, rc *reqCtx) (int, any, error) {
	var req CreateScheduleRequest
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("schedule", req.ID); err != nil {
		return 0, nil, err
	}
	spec, err := s.specOf(req.ScheduleSpec)
	if err != nil {
		return 0, nil, err
	}
	sc, err := schedule.Create(r.Context(), s.cfg.Store, req.ID, spec)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, scheduleView(sc), nil
}

func (s *Server) listSchedules(r *http.Request, _ *reqCtx) (int, any, error) {
	q, err := query(r, "after", "limit")
	if err != nil {
		return 0, nil, err
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return 0, nil, invalid("query parameter \"limit\" must be an integer in [1, " + strconv.Itoa(MaxListLimit) + "]")
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" {
		if err := checkID("after", after); err != nil {
			return 0, nil, err
		}
	}
	// One more than the page tells whether another follows; at the
	// store's largest page a full page says there may be one.
	scs, err := schedule.List(r.Context(), s.cfg.Store, after, min(limit+1, MaxListLimit))
	if err != nil {
		return 0, nil, err
	}
	resp := schedulesResp{Schedules: []ScheduleView{}}
	if len(scs) >= limit && (len(scs) > limit || limit == MaxListLimit) {
		scs = scs[:limit]
		resp.Next = scs[limit-1].ID
	}
	for _, sc := range scs {
		resp.Schedules = append(resp.Schedules, scheduleView(sc))
	}
	return http.StatusOK, resp, nil
}

func (s *Server) getSchedule(r *http.Request, _ *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	if err := checkID("schedule", id); err != nil {
		return 0, nil, err
	}
	sc, err := schedule.Get(r.Context(), s.cfg.Store, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleView(sc), nil
}

func (s *Server) deleteSchedule(r *http.Request, _ *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	if err := checkID("schedule", id); err != nil {
		return 0, nil, err
	}
	if err := schedule.Delete(r.Context(), s.cfg.Store, id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]string{"id": id, "status": "deleted"}, nil
}

func (s *Server) scheduleOp(op func(context.Context, store.Store, string) (schedule.Schedule, error)) handlerFunc {
	return func(r *http.Request, _ *reqCtx) (int, any, error) {
		id := r.PathValue("id")
		if err := checkID("schedule", id); err != nil {
			return 0, nil, err
		}
		sc, err := op(r.Context(), s.cfg.Store, id)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, scheduleView(sc), nil
	}
}

func (s *Server) triggerSchedule(r *http.Request, rc *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	if err := checkID("schedule", id); err != nil {
		return 0, nil, err
	}
	var req TriggerRequest
	if err := s.body(r, rc, &req, true); err != nil {
		return 0, nil, err
	}
	tk, sc, dup, err := schedule.TriggerKeyed(r.Context(), s.cfg.Store, id, req.IdempotencyKey)
	if err != nil {
		return 0, nil, err
	}
	res := TriggerResult{Schedule: scheduleView(sc), Tick: tk.Key, Duplicate: dup, IdempotencyKey: req.IdempotencyKey}
	if sc.Spec.Target.Workflow != "" {
		res.Run = schedule.RunID(id, tk)
	}
	return http.StatusAccepted, res, nil
}

func schedulePath(id string) string { return "/v1/schedules/" + url.PathEscape(id) }

// CreateSchedule creates schedule req.ID. A taken id is already_exists
// (errors.Is store.ErrScheduleExists); a spec that cannot work is
// invalid_argument (errors.Is schedule.ErrInvalid).
func (c *Client) CreateSchedule(ctx context.Context, req CreateScheduleRequest) (ScheduleView, error) {
	var out ScheduleView
	_, err := c.do(ctx, http.MethodPost, "/v1/schedules", nil, req, &out)
	return out, err
}

// ListSchedules lists every schedule, by id, following the pages.
func (c *Client) ListSchedules(ctx context.Context) ([]ScheduleView, error) {
	var all []ScheduleView
	after := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(MaxListLimit)}}
		if after != "" {
			q.Set("after", after)
		}
		var out schedulesResp
		if _, err := c.do(ctx, http.MethodGet, "/v1/schedules", q, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Schedules...)
		if out.Next == "" {
			return all, nil
		}
		after = out.Next
	}
}

// GetSchedule reads one schedule (not_found: errors.Is store.ErrNotFound).
func (c *Client) GetSchedule(ctx context.Context, id string) (ScheduleView, error) {
	var out ScheduleView
	_, err := c.do(ctx, http.MethodGet, schedulePath(id), nil, nil, &out)
	return out, err
}

// PauseSchedule pauses a schedule; ResumeSchedule resumes it at its next
// tick (the ticks of the pause are not caught up).
func (c *Client) PauseSchedule(ctx context.Context, id string) (ScheduleView, error) {
	var out ScheduleView
	_, err := c.do(ctx, http.MethodPost, schedulePath(id)+"/pause", nil, nil, &out)
	return out, err
}

// ResumeSchedule: see PauseSchedule.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (ScheduleView, error) {
	var out ScheduleView
	_, err := c.do(ctx, http.MethodPost, schedulePath(id)+"/resume", nil, nil, &out)
	return out, err
}

// TriggerSchedule fires a schedule now, with a tick of its own; its
// cadence is unchanged. key is the trigger's idempotency key: the same key
// again (a retry after a lost answer) starts nothing more and answers the
// first trigger's tick with Duplicate true. An empty key gets a random
// one, so this call's answer is still the only tick it records.
func (c *Client) TriggerSchedule(ctx context.Context, id, key string) (TriggerResult, error) {
	if key == "" {
		key = rand.Text()
	}
	var out TriggerResult
	_, err := c.do(ctx, http.MethodPost, schedulePath(id)+"/trigger", nil, TriggerRequest{IdempotencyKey: key}, &out)
	return out, err
}

// DeleteSchedule deletes a schedule: nothing fires after it.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, schedulePath(id), nil, nil, nil)
	return err
}
