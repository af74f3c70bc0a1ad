package api_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
)

// TestSchedulesThroughTheClient: create, list with the next fire times,
// pause, resume, trigger and delete through the Go client, each refusal a
// typed error that errors.Is matches across the wire.
func TestSchedulesThroughTheClient(t *testing.T) {
	r := newRunsRig(t)
	c, ctx := r.Client, r.Ctx
	req := api.CreateScheduleRequest{ID: "hourly", ScheduleSpec: api.ScheduleSpec{Every: "1h", Offset: "15m", Jitter: "1m",
		Target: api.ScheduleTarget{Workflow: "payout", Input: json.RawMessage(`{"Account":"a","Amount":1}`)}}}
	v, err := c.CreateSchedule(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "active" || len(v.NextFireTimes) != 5 || v.NextFireAt == nil || !v.NextFireAt.Equal(v.NextFireTimes[0]) ||
		v.Spec.Overlap != "skip" || v.Spec.CatchUp != "once" || string(v.Spec.Target.Input) != `{"Account":"a","Amount":1}` {
		t.Fatalf("created %+v", v)
	}
	for i := 1; i < 5; i++ {
		nominal := v.NextFireTimes[i].Truncate(time.Hour).Add(15 * time.Minute)
		if d := v.NextFireTimes[i].Sub(nominal); d < 0 || d >= time.Minute {
			t.Fatalf("fire time %v is not its tick %v plus a jitter below 1m", v.NextFireTimes[i], nominal)
		}
	}
	if _, err := c.CreateSchedule(ctx, req); !errors.Is(err, store.ErrScheduleExists) {
		t.Fatalf("a taken id: %v, want ErrScheduleExists", err)
	}
	bad := req
	bad.ID, bad.Every, bad.Cron = "bad", "", "99 * * * *"
	if _, err := c.CreateSchedule(ctx, bad); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("a bad cron: %v, want schedule.ErrInvalid", err)
	}
	if _, err := c.GetSchedule(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown schedule: %v, want ErrNotFound", err)
	}
	if v, err = c.PauseSchedule(ctx, "hourly"); err != nil || v.State != "paused" || v.NextFireAt != nil || len(v.NextFireTimes) != 0 {
		t.Fatalf("paused: %+v, %v", v, err)
	}
	if v, err = c.ResumeSchedule(ctx, "hourly"); err != nil || v.State != "active" || len(v.NextFireTimes) != 5 {
		t.Fatalf("resumed: %+v, %v", v, err)
	}
	tr, err := c.TriggerSchedule(ctx, "hourly", "")
	if err != nil || tr.Run != schedule.RunID("hourly", schedule.Tick{Key: tr.Tick}) || tr.Schedule.Pending != 1 {
		t.Fatalf("triggered: %+v, %v", tr, err)
	}
	list, err := c.ListSchedules(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "hourly" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := c.DeleteSchedule(ctx, "hourly"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSchedule(ctx, "hourly"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting again: %v, want ErrNotFound", err)
	}
}

// FuzzCreateSchedule: whatever the body, the server answers 201 or a 4xx
// (never a 5xx), and only a 201 leaves a schedule behind, which reads back
// as the server answered it.
func FuzzCreateSchedule(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","every":"1h","target":{"workflow":"payout","input":{"Account":"a","Amount":1}}}`,
		`{"id":"b","cron":"*/5 * * * *","time_zone":"America/New_York","jitter":"30s","overlap":"buffer_one","target":{"workflow":"payout"}}`,
		`{"id":"c","cron":"@daily","catch_up":"all","catch_up_limit":3,"target":{"world":"w","type":"T","value":[1,2]}}`,
		`{"id":"d","cron":"TZ=","target":{"workflow":"payout"}}`,
		`{"id":"e","cron":"CRON_TZ=Europe/Paris 0 0 * * *","target":{"workflow":"payout"}}`,
		`{"id":"f","every":"-1s","target":{"workflow":"payout"}}`,
		`{"id":"g","every":"1h","offset":"2h","target":{"workflow":"payout"}}`,
		`{"id":"h","cron":"0 0 30 2 *","target":{"workflow":"payout"}}`,
		`{"id":"","every":"1h","target":{}}`,
		`[]`, `{`, `{"id":"i","every":1}`,
	} {
		f.Add(s)
	}
	r := newRunsRigWith(f, rigOptions{})
	f.Fuzz(func(t *testing.T, body string) {
		before, err := r.Store.ListSchedules(r.Ctx, "", store.MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(r.Ctx, http.MethodPost, r.HTTP.URL+"/v1/schedules", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.HTTP.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		st := resp.StatusCode
		after, err := r.Store.ListSchedules(r.Ctx, "", store.MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case st == http.StatusCreated:
			var v api.ScheduleView
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("201 body %s: %v", out, err)
			}
			got, err := r.Client.GetSchedule(r.Ctx, v.ID)
			if err != nil || got.ID != v.ID || len(after) != len(before)+1 {
				t.Fatalf("created %s but read back %+v, %v (%d → %d schedules)", v.ID, got, err, len(before), len(after))
			}
			if err := r.Client.DeleteSchedule(r.Ctx, v.ID); err != nil {
				t.Fatal(err)
			}
		case st >= 400 && st < 500:
			if len(after) != len(before) {
				t.Fatalf("a %d left a schedule behind: %s", st, body)
			}
		default:
			t.Fatalf("status %d for %q: %s", st, body, out)
		}
	})
}

// TestScheduleMetrics: /metrics exports each schedule's durable tick
// counters as orrery_schedule_ticks_total{schedule,outcome}.
func TestScheduleMetrics(t *testing.T) {
	r := newRig(t, rigOptions{metrics: true})
	r.Metrics.CollectSchedules(r.Store)
	if _, err := schedule.Create(r.Ctx, r.Store, "s", schedule.Spec{Every: schedule.Duration(time.Hour), Target: schedule.Target{Workflow: "w"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := r.Store.GetSchedule(r.Ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(rec.State, &st); err != nil {
		t.Fatal(err)
	}
	st["fired"], st["missed"], st["skipped"], st["failed"] = 4, 3, 2, 1
	if rec.State, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Store.UpdateSchedule(r.Ctx, rec); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, r, "")
	for outcome, want := range map[string]float64{"fired": 4, "missed": 3, "skipped": 2, "failed": 1} {
		series := `orrery_schedule_ticks_total{outcome="` + outcome + `",schedule="s"}`
		if v, ok := metricValue(t, text, series); !ok || v != want {
			t.Fatalf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
}

// losesFirstAnswer is a transport whose first round trip reaches the
// server but whose answer never reaches the client: a dropped connection
// after the server committed.
type losesFirstAnswer struct {
	next http.RoundTripper
	lost bool
}

func (l *losesFirstAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || l.lost {
		return resp, err
	}
	l.lost = true
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("connection reset after the request was sent")
}

// TestTriggerScheduleIsIdempotent: a client that triggered, lost the
// answer and retried with the same idempotency key started one tick: the
// retry answers the first trigger's tick and run, duplicate. A trigger
// without a key through the Go client gets one of its own; raw requests
// without one are new ticks each.
func TestTriggerScheduleIsIdempotent(t *testing.T) {
	r := newRunsRig(t)
	ctx := r.Ctx
	req := api.CreateScheduleRequest{ID: "daily", ScheduleSpec: api.ScheduleSpec{Every: "24h",
		Target: api.ScheduleTarget{Workflow: "payout", Input: json.RawMessage(`{"Account":"a","Amount":1}`)}}}
	if _, err := r.Client.CreateSchedule(ctx, req); err != nil {
		t.Fatal(err)
	}
	lossy := &losesFirstAnswer{next: r.HTTP.Client().Transport}
	c, err := api.NewClient(r.HTTP.URL, "", api.WithHTTPClient(&http.Client{Transport: lossy}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TriggerSchedule(ctx, "daily", "op-42"); err == nil || !lossy.lost {
		t.Fatalf("the first trigger's answer was not lost: %v", err)
	}
	tr, err := c.TriggerSchedule(ctx, "daily", "op-42")
	if err != nil || !tr.Duplicate || tr.IdempotencyKey != "op-42" || tr.Run != schedule.RunID("daily", schedule.Tick{Key: tr.Tick}) {
		t.Fatalf("the retry: %+v, %v; want the first trigger's tick, duplicate", tr, err)
	}
	sc, err := schedule.Get(ctx, r.Store, "daily")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.State.Triggers) != 1 || sc.State.Triggers[0].Tick.Key != tr.Tick || sc.State.Fired+uint64(len(sc.State.Pending)) != 1 {
		t.Fatalf("schedule state %+v: want one tick recorded, %s", sc.State, tr.Tick)
	}
	// The Go client's own key: two calls, two ticks.
	a, err := r.Client.TriggerSchedule(ctx, "daily", "")
	if err != nil || a.Duplicate || a.IdempotencyKey == "" {
		t.Fatalf("a keyless client trigger: %+v, %v", a, err)
	}
	b, err := r.Client.TriggerSchedule(ctx, "daily", "")
	if err != nil || b.Duplicate || b.Tick == a.Tick {
		t.Fatalf("a second keyless client trigger: %+v, %v; want a tick of its own", b, err)
	}
	// The key is a body field, checked like any key.
	if st, body := r.Do(http.MethodPost, "/v1/schedules/daily/trigger", "application/json", `{"idempotency_key":"op-42"}`, ""); st != http.StatusAccepted || !strings.Contains(string(body), `"duplicate":true`) {
		t.Fatalf("raw repeat: %d %s", st, body)
	}
	if st, body := r.Do(http.MethodPost, "/v1/schedules/daily/trigger", "application/json", `{"idempotency_key":"`+strings.Repeat("k", store.MaxKeyBytes+1)+`"}`, ""); st != http.StatusBadRequest {
		t.Fatalf("an oversized key: %d %s, want 400", st, body)
	}
	if st, body := r.Do(http.MethodPost, "/v1/schedules/daily/trigger", "application/json", `{"key":"x"}`, ""); st != http.StatusBadRequest {
		t.Fatalf("an unknown field: %d %s, want 400", st, body)
	}
	if st, body := r.Do(http.MethodPost, "/v1/schedules/daily/trigger", "", "", ""); st != http.StatusAccepted || !strings.Contains(string(body), `"duplicate":false`) {
		t.Fatalf("a keyless raw trigger: %d %s", st, body)
	}
}

// TestTheSchedulesNamespacesAreClosedToClients: a run id in the schedules'
// namespace is refused at the run start (400 invalid_argument) and so is
// an event keyed in it, so no client can take a tick's identity first.
func TestTheSchedulesNamespacesAreClosedToClients(t *testing.T) {
	r := newRunsRig(t)
	_, _, err := r.Client.StartRun(r.Ctx, "payout", "sched.daily.20261128T090000.000000000Z", payout{Account: "a", Amount: 1})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	if _, err := r.Client.GetRun(r.Ctx, "sched.daily.20261128T090000.000000000Z"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused run: %v, want not found", err)
	}
	if _, _, err := r.Client.CreateWorld(r.Ctx, "acct", universe); err != nil {
		t.Fatal(err)
	}
	_, err = r.Client.Send(r.Ctx, "acct", typeName(t, Add{}), Add{By: 1}, "schedule:daily:20261128T090000.000000000Z")
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	if _, err := r.Client.SendPayload(r.Ctx, "acct", nil, "schedule:daily:x"); err == nil {
		t.Fatal("a payload keyed like a tick was accepted")
	}
	// A run is a world: a world created or forked under a tick's run id
	// would take it as well.
	_, _, err = r.Client.CreateWorld(r.Ctx, "sched.daily.20261128T090000.000000000Z", universe)
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	_, _, err = r.Client.Fork(r.Ctx, "acct", "sched.daily.x", 0)
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	// A schedule id that would blur its ticks with another's.
	req := api.CreateScheduleRequest{ID: "a.b", ScheduleSpec: api.ScheduleSpec{Every: "1h", Target: api.ScheduleTarget{Workflow: "payout"}}}
	if _, err := r.Client.CreateSchedule(r.Ctx, req); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("schedule id a.b: %v, want schedule.ErrInvalid", err)
	}
}
